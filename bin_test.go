package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The binaries these tests run as processes are built once per test run:
// each go build links for seconds, tens of seconds on a busy machine.
var (
	binDir string
	builds sync.Map // package → func() (string, error)
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBin builds the main package pkg (a path from the module root, "."
// for berth) once per test run and returns the binary.
func buildBin(t *testing.T, pkg string) string {
	t.Helper()
	f, _ := builds.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
		bin := filepath.Join(binDir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
		return bin, nil
	}))
	bin, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildBerth returns the berth binary.
func buildBerth(t *testing.T) string { return buildBin(t, ".") }
