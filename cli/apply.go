package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"berth/apply"
)

// applyCommand is `berth apply -f FILE`: the file's ${VAR}s are expanded
// here, the plan is shown (POST /v1/apply?dryRun=true), then carried out.
func applyCommand(a *app) *cobra.Command {
	var file string
	var prune, dry bool
	var timeout time.Duration
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
"${VAR}" is the environment variable VAR. See docs/ci.md.

An endpoint's "build" builds its image on Berth, as berth deploy does:
{"context": DIR} (relative to the file's folder; packed and sent here)
or {"git": {"url", "ref", "contextPath", "credential"}}, with
"dockerfile", "target", "buildArgs". The same source and options build
nothing; apply waits for the builds and then for the rollout, as deploy.`,
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
			dir := "."
			if file != "-" {
				dir = filepath.Dir(file)
			}
			mp, ctype, err := applyBody(body, parsed, dir)
			if err != nil {
				return err
			}
			if mp != nil {
				defer os.Remove(mp.Name())
				defer mp.Close()
			}
			post := func(dryRun bool) (apply.Result, error) {
				q := url.Values{"dryRun": {fmt.Sprint(dryRun)}, "prune": {fmt.Sprint(prune)}}
				var res apply.Result
				if mp == nil {
					err := a.client().Do(cmd.Context(), http.MethodPost, "/v1/apply?"+q.Encode(), json.RawMessage(body), &res)
					return res, err
				}
				st, err := mp.Stat()
				if err != nil {
					return res, err
				}
				// A section, not the file: the transport closes a body it can.
				body := io.NewSectionReader(mp, 0, st.Size())
				resp, err := a.client().SendBody(cmd.Context(), http.MethodPost, "/v1/apply?"+q.Encode(), ctype, body, st.Size())
				if err != nil {
					return res, err
				}
				defer resp.Body.Close()
				if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
					return res, fmt.Errorf("apply: decode the answer: %w", err)
				}
				return res, nil
			}
			plan, err := post(true)
			if err != nil {
				return err
			}
			builds := 0
			for _, act := range plan.Actions {
				fmt.Fprintln(a.o.Stderr, printable(act.String()))
				if act.Op == apply.OpBuild {
					builds++
				}
			}
			res := plan
			if !dry {
				if builds > 0 {
					fmt.Fprintf(a.o.Stderr, "apply: %d build(s) run on Berth; the answer waits for them (GET /v2/serverless/ID/builds shows them)\n", builds)
				}
				if res, err = post(false); err != nil {
					return err
				}
				// As berth deploy: wait for the rollout of what a build released.
				for _, act := range res.Actions {
					if act.Kind != apply.KindBuild || act.Op != apply.OpBuild {
						continue
					}
					fmt.Fprintln(a.o.Stderr, printable(act.String()))
					if id := res.IDs["endpoints"][act.Name]; id != "" {
						ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
						err := a.waitRollout(ctx, id)
						cancel()
						if err != nil {
							return err
						}
					}
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
			for _, kind := range []string{"registryAuths", "networkVolumes", "templates", "endpoints", "builds"} {
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
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "give up waiting for a rollout of what a build released after this long")
	return cmd
}

// applyBody is the multipart body of a file whose endpoints build from a
// context directory (the JSON as part "file", each context's tar as part
// "context.N" for endpoints[N]), in a temporary file; nil when none does.
func applyBody(body []byte, f apply.File, dir string) (*os.File, string, error) {
	need := false
	for _, e := range f.Endpoints {
		need = need || e.Build != nil && e.Build.Context != nil
	}
	if !need {
		return nil, "", nil
	}
	tmp, err := os.CreateTemp("", "berth-apply-*.multipart")
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*os.File, string, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, "", err
	}
	mw := multipart.NewWriter(tmp)
	w, err := mw.CreateFormField("file")
	if err == nil {
		_, err = w.Write(body)
	}
	if err != nil {
		return fail(err)
	}
	for i, e := range f.Endpoints {
		if e.Build == nil || e.Build.Context == nil {
			continue
		}
		c, err := apply.PackDir(apply.ContextDir(dir, *e.Build.Context), e.Build.Dockerfile)
		if err != nil {
			return fail(usageErr("endpoints[%d] (%s): build: %v", i, printable(*e.Name), err))
		}
		err = func() error {
			defer c.Remove()
			src, err := os.Open(c.Path)
			if err != nil {
				return err
			}
			defer src.Close()
			w, err := mw.CreateFormFile(fmt.Sprintf("context.%d", i), "context.tar")
			if err != nil {
				return err
			}
			_, err = io.Copy(w, src)
			return err
		}()
		if err != nil {
			return fail(err)
		}
	}
	if err := mw.Close(); err != nil {
		return fail(err)
	}
	return tmp, mw.FormDataContentType(), nil
}

func sortedNames(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
