package cli

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/spf13/cobra"
)

// initFiles are the workers berth init writes: queue/ (runpod-python's
// handler) and lb/ (a load-balancing worker's HTTP server).
//
//go:embed initfiles
var initFiles embed.FS

func initCommand(a *app) *cobra.Command {
	var lb, force bool
	cmd := &cobra.Command{Use: "init [--lb] DIR", Short: "Write a minimal RunPod worker (handler.py, Dockerfile, test_input.json, README) into DIR",
		Long: `init writes the smallest worker a RunPod user recognises into DIR (made
when missing): handler.py with runpod-python (or, with --lb, a
load-balancing worker's HTTP server with its /ping health check), a
Dockerfile, requirements.txt, test_input.json, .dockerignore and a README.
Then 'berth deploy DIR' builds and runs it. Existing files are not
overwritten unless --force is given.`,
		Args: exactArgs(1, "DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind := "queue"
			if lb {
				kind = "lb"
			}
			return writeInit(a, args[0], kind, force)
		}}
	cmd.Flags().BoolVar(&lb, "lb", false, "a load-balancing worker (an HTTP server) instead of a queue worker")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing files")
	return cmd
}

func writeInit(a *app, dir, kind string, force bool) error {
	root := path.Join("initfiles", kind)
	entries, err := fs.ReadDir(initFiles, root)
	if err != nil {
		return err
	}
	if !force {
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
				return usageErr("init: %s already exists (--force overwrites)", filepath.Join(dir, e.Name()))
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		b, err := initFiles.ReadFile(path.Join(root, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(a.o.Stderr, "wrote", filepath.Join(dir, e.Name()))
	}
	fmt.Fprintf(a.o.Stderr, "next: berth deploy %s --name NAME --compute-type CPU\n", dir)
	return nil
}
