package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"berth/apply"
)

// applyCommand is `berth apply -f FILE`: the file's ${VAR}s are expanded
// here, the plan is shown (POST /v1/apply?dryRun=true), then carried out.
func applyCommand(a *app) *cobra.Command {
	var file string
	var prune, dry bool
	cmd := &cobra.Command{Use: "apply -f FILE", Short: "Make a file of templates, endpoints, volumes and registry auths true",
		Long: `Make a declarative file true, idempotently: records are matched by name,
created when missing, updated (only the fields given that differ) when
present, left alone when equal. With --prune, templates, endpoints, network
volumes and registry auths the file does not name are deleted. The plan is
printed first (on stderr); --dry-run prints it and changes nothing. The
answer is every record's id by name (JSON: {"ids": {"endpoints": {NAME: ID}}}).

The file is JSON: {"registryAuths": […], "networkVolumes": […],
"templates": […], "endpoints": […]}, each entry with the REST v1 fields
and references by name ("registryAuth", "template", "networkVolume(s)");
"${VAR}" is the environment variable VAR. See docs/ci.md.`,
		Args: exactArgs(0, "no arguments (the file is -f FILE)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErr("apply: -f FILE is required (- for stdin)")
			}
			in := a.o.Stdin
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			parsed, err := apply.Parse(in, func(k string) (string, bool) { v := a.o.Getenv(k); return v, v != "" })
			if err != nil {
				return usageErr("%s: %v", file, err)
			}
			body, err := json.Marshal(parsed)
			if err != nil {
				return err
			}
			post := func(dryRun bool) (apply.Result, error) {
				q := url.Values{"dryRun": {fmt.Sprint(dryRun)}, "prune": {fmt.Sprint(prune)}}
				var res apply.Result
				err := a.client().Do(cmd.Context(), http.MethodPost, "/v1/apply?"+q.Encode(), json.RawMessage(body), &res)
				return res, err
			}
			plan, err := post(true)
			if err != nil {
				return err
			}
			for _, act := range plan.Actions {
				fmt.Fprintln(a.o.Stderr, printable(act.String()))
			}
			res := plan
			if !dry {
				if res, err = post(false); err != nil {
					return err
				}
			}
			p := a.printer()
			if p.json || p.ids {
				return p.JSON(res)
			}
			var buf bytes.Buffer
			changed := 0
			for _, act := range res.Actions {
				if act.Op != apply.OpUnchanged {
					changed++
				}
			}
			verb := "applied"
			if dry {
				verb = "dry run, nothing changed"
			}
			fmt.Fprintf(&buf, "%s: %d change(s), %d record(s) unchanged\n", verb, changed, len(res.Actions)-changed)
			for _, kind := range []string{"registryAuths", "networkVolumes", "templates", "endpoints"} {
				for _, name := range sortedNames(res.IDs[kind]) {
					fmt.Fprintf(&buf, "%s\t%s\t%s\n", kind, printable(name), res.IDs[kind][name])
				}
			}
			_, err = a.o.Stdout.Write(buf.Bytes())
			return err
		}}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the file (- for stdin)")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete the templates, endpoints, network volumes and registry auths the file does not name")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "print the plan only")
	return cmd
}

func sortedNames(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
