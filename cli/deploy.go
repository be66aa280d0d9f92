package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"berth/builder"
	"berth/mgmt"
	"berth/v1input"
)

// placeholderImage is a new endpoint's image until its first build
// releases one (docs/builds.md): the endpoint is made with workersMin 0,
// so nothing runs it.
// The server knows it too: hub.json's config applies to such an endpoint
// (mgmt.ApplyHubDefaults).
const placeholderImage = mgmt.PendingBuildImage

func deployCommand(a *app) *cobra.Command {
	var fields *inputFlags
	var dockerfile, target, ref, contextPath, gitCred string
	var buildArgs, buildSecrets []string
	var timeout time.Duration
	var buildLog bool
	cmd := &cobra.Command{Use: "deploy [DIR | GIT_URL] [flags]", Short: "Build DIR's or a git repository's Dockerfile on Berth and roll the endpoint named --name onto it",
		Long: `deploy builds the image of a source directory or a git repository (its
Dockerfile) on Berth and makes the endpoint named --name (default: the
directory's or the repository's name) run it:

  - DIR (default .) is sent as the build context (.dockerignore applies);
  - GIT_URL (https://, http://, ssh:// or git@host:path) is cloned by Berth
    at --ref (a branch, tag or commit; default: the default branch), and
    --context (a directory of the repository) is the build context;
    --git-credential names a stored git credential (docs/builds.md);
  - the endpoint and a template of the same name are created when missing,
    with the endpoint flags given (the same as 'endpoint create'); an
    existing endpoint takes the flags given as an update;
  - the build's steps are shown as they run; a completed build is a new
    release (source GIT_BUILD) and the workers roll onto it; the same
    source built again reuses the image (nothing is built);
  - when the endpoint has workers (or workersMin > 0) it waits until a
    worker of the new release is ready and no idle old one is left; then
    it prints the endpoint's id (-o json: the endpoint).

A failed build changes nothing that runs: its error names the failing step.`,
		Args: rangeArgs(0, 1, "[DIR | GIT_URL]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			gitSrc := isGitURL(dir)
			if !gitSrc && (ref != "" || contextPath != "" || gitCred != "") {
				return usageErr("%s: --ref, --context and --git-credential are for a GIT_URL source; %s is a directory", cmd.CommandPath(), dir)
			}
			body, err := fields.body(cmd, "", nil)
			if err != nil {
				return err
			}
			if _, ok := body["templateId"]; ok {
				return usageErr("%s: --template-id: deploy makes the endpoint's template from DIR", cmd.CommandPath())
			}
			q := url.Values{}
			if dockerfile != "" {
				q.Set("dockerfile", dockerfile)
			}
			if target != "" {
				q.Set("target", target)
			}
			for _, kv := range buildArgs {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return usageErr("--build-arg: want KEY=VALUE, got %q", kv)
				}
				q.Add("buildArg", kv)
			}
			secrets := map[string]string{}
			for _, kv := range buildSecrets {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					// KEY alone: the value from the environment, so it
					// is on no command line (ps, shell history).
					if v, ok = os.LookupEnv(k); !ok {
						return usageErr("--build-secret %s: no value given and no variable %s in the environment", k, k)
					}
				}
				if k == "" {
					return usageErr("--build-secret: want KEY=VALUE or KEY (the value from the environment)")
				}
				secrets[k] = v
			}
			// The endpoint fields given: hub.json's config does not
			// override them.
			var given []string
			for k := range body {
				if k != "name" {
					given = append(given, k)
				}
			}
			sort.Strings(given)
			if len(given) > 0 {
				q.Set("given", strings.Join(given, ","))
			}
			if gitSrc {
				args := map[string]string{}
				for _, kv := range q["buildArg"] {
					k, v, _ := strings.Cut(kv, "=")
					args[k] = v
				}
				gb := map[string]any{"git": map[string]any{"url": dir, "ref": ref, "contextPath": contextPath, "credentialId": gitCred},
					"dockerfile": dockerfile, "target": target, "buildArgs": args, "secretBuildArgs": secrets, "given": given}
				return a.deployGit(cmd.Context(), dir, body, gb, timeout, buildLog)
			}
			return a.deploy(cmd.Context(), dir, body, q, secrets, timeout, buildLog)
		}}
	fields = newInputFlags(cmd.Flags(), reflect.TypeFor[v1input.EndpointInput]())
	cmd.Flags().StringVar(&dockerfile, "dockerfile", "", "the Dockerfile's path inside DIR or the git context [Dockerfile]")
	cmd.Flags().StringVar(&ref, "ref", "", "GIT_URL: the branch, tag or commit to build [the default branch]")
	cmd.Flags().StringVar(&contextPath, "context", "", "GIT_URL: the build context's directory inside the repository [its root]")
	cmd.Flags().StringVar(&gitCred, "git-credential", "", "GIT_URL: the id of the stored git credential to clone with")
	cmd.Flags().StringVar(&target, "target", "", "the build stage to build")
	cmd.Flags().StringArrayVar(&buildArgs, "build-arg", nil, "KEY=VALUE build argument (repeat the flag)")
	cmd.Flags().StringArrayVar(&buildSecrets, "build-secret", nil, "a secret build argument, KEY=VALUE or KEY (its value from the environment): passed to the build, never stored, answered or logged; the classic builder still records it in the image's history of the steps using it (docs/builds.md) (repeat the flag)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "give up waiting for the build and the rollout after this long")
	cmd.Flags().BoolVar(&buildLog, "build-log", false, "show every line of the build's output, not only its steps")
	return cmd
}

func (a *app) deploy(ctx context.Context, dir string, body map[string]any, q url.Values, secrets map[string]string, timeout time.Duration, buildLog bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return usageErr("deploy: %s is not a directory", dir)
	}
	abs, _ := filepath.Abs(dir)
	name, _ := body["name"].(string)
	if name == "" {
		name = filepath.Base(abs)
		body["name"] = name
	}
	df := q.Get("dockerfile")
	if df == "" {
		df = "Dockerfile"
	}
	// The context first: a directory that cannot be read changes nothing.
	tmp, err := os.CreateTemp("", "berth-deploy-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	files, err := writeContext(tmp, abs, filepath.ToSlash(filepath.Clean(df)))
	if err != nil {
		return fmt.Errorf("deploy: read %s: %w", dir, err)
	}
	size, _ := tmp.Seek(0, io.SeekCurrent)
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	log := a.o.Stderr
	fmt.Fprintf(log, "deploy: %s (%d files, %d KiB) as endpoint %q\n", dir, files, (size+1023)/1024, name)

	ep, created, wantMin, err := a.ensureEndpoint(ctx, name, body)
	if err != nil {
		return err
	}
	id, _ := ep["id"].(string)
	if created {
		fmt.Fprintf(log, "deploy: created endpoint %s; its first build gives it its image\n", id)
	}

	var b map[string]any
	path := "/v2/serverless/" + url.PathEscape(id) + "/builds"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	hdr := http.Header{}
	for k, v := range secrets {
		hdr.Add("X-Berth-Build-Secret", k+"="+v)
	}
	resp, err := a.client().SendBody(ctx, http.MethodPost, path, "application/x-tar", tmp, size, hdr)
	if err != nil {
		return err
	}
	err = json.NewDecoder(resp.Body).Decode(&b)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("deploy: decode the build: %w", err)
	}
	return a.finishDeploy(ctx, id, b, created, wantMin, buildLog)
}

// isGitURL tells a repository URL from a directory: a URL scheme, or
// scp-like user@host:path that is no existing path.
func isGitURL(s string) bool {
	if strings.Contains(s, "://") {
		return true
	}
	if _, err := os.Stat(s); err == nil {
		return false
	}
	at, colon := strings.Index(s, "@"), strings.Index(s, ":")
	return at > 0 && colon > at && !strings.Contains(s[:colon], "/")
}

// deployGit is deploy from a git repository Berth clones.
func (a *app) deployGit(ctx context.Context, src string, body, gb map[string]any, timeout time.Duration, buildLog bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	name, _ := body["name"].(string)
	if name == "" {
		base := src[strings.LastIndexAny(src, "/:")+1:]
		name = strings.TrimSuffix(base, ".git")
		if name == "" {
			name = "worker"
		}
		body["name"] = name
	}
	log := a.o.Stderr
	fmt.Fprintf(log, "deploy: %s as endpoint %q\n", src, name)
	ep, created, wantMin, err := a.ensureEndpoint(ctx, name, body)
	if err != nil {
		return err
	}
	id, _ := ep["id"].(string)
	if created {
		fmt.Fprintf(log, "deploy: created endpoint %s; its first build gives it its image\n", id)
	}
	var b map[string]any
	if err := a.client().Do(ctx, http.MethodPost, "/v2/serverless/"+url.PathEscape(id)+"/builds", gb, &b); err != nil {
		return err
	}
	return a.finishDeploy(ctx, id, b, created, wantMin, buildLog)
}

// finishDeploy follows build b of endpoint id to its end and waits for
// the rollout.
func (a *app) finishDeploy(ctx context.Context, id string, b map[string]any, created bool, wantMin int, buildLog bool) error {
	log := a.o.Stderr
	bid, _ := b["id"].(string)
	if img, _ := b["imageName"].(string); img != "" {
		fmt.Fprintf(log, "deploy: build %s → %v\n", bid, img)
	} else {
		fmt.Fprintf(log, "deploy: build %s\n", bid)
	}
	if err := a.followBuild(ctx, id, bid, buildLog); err != nil {
		return err
	}
	if err := a.client().Do(ctx, http.MethodGet, "/v2/serverless/"+url.PathEscape(id)+"/builds/"+url.PathEscape(bid), nil, &b); err != nil {
		return err
	}
	if st := b["status"]; st != "COMPLETED" {
		msg, _ := b["error"].(string)
		return &exitError{ExitError, fmt.Errorf("build %s %v: %s", bid, st, msg)}
	}
	if h, _ := b["commitHash"].(string); h != "" {
		fmt.Fprintf(log, "deploy: built commit %s\n", h)
	}
	switch v := b["releaseVersion"]; {
	case v == nil:
		fmt.Fprintf(log, "deploy: endpoint %s already runs %v: no new release\n", id, b["imageName"])
	case b["reused"] == true:
		fmt.Fprintf(log, "deploy: release v%v of endpoint %s (build %s, image reused)\n", format(v), id, bid)
	default:
		fmt.Fprintf(log, "deploy: release v%v of endpoint %s (build %s)\n", format(v), id, bid)
	}
	if created && wantMin > 0 {
		if err := a.client().Do(ctx, http.MethodPatch, "/v1/endpoints/"+url.PathEscape(id), map[string]any{"workersMin": wantMin}, nil); err != nil {
			return err
		}
	}
	if err := a.waitRollout(ctx, id); err != nil {
		return err
	}
	var ep map[string]any
	if err := a.client().Do(ctx, http.MethodGet, "/v1/endpoints/"+url.PathEscape(id), nil, &ep); err != nil {
		return err
	}
	p := a.printer()
	if p.json {
		return p.Object(ep)
	}
	_, err := fmt.Fprintln(a.o.Stdout, id)
	return err
}

// ensureEndpoint finds the endpoint named name, updating it with the
// flags given, or creates it (and its template, named after it) with the
// placeholder image and workersMin 0 until the first build: wantMin is
// the workersMin to set then.
func (a *app) ensureEndpoint(ctx context.Context, name string, body map[string]any) (ep map[string]any, created bool, wantMin int, err error) {
	epr := resourceOf("endpoint")
	id, err := a.idByName(ctx, epr, name, errNone)
	switch {
	case err == nil:
		if len(body) > 1 { // more than the name
			err = a.client().Do(ctx, http.MethodPatch, epr.path+"/"+url.PathEscape(id), body, &ep)
		} else {
			err = a.client().Do(ctx, http.MethodGet, epr.path+"/"+url.PathEscape(id), nil, &ep)
		}
		return ep, false, 0, err
	case !errors.Is(err, errNone):
		return nil, false, 0, err
	}
	tpr := resourceOf("template")
	tid, err := a.idByName(ctx, tpr, name, errNone)
	if errors.Is(err, errNone) {
		var t map[string]any
		err = a.client().Do(ctx, http.MethodPost, tpr.path, map[string]any{"name": name, "imageName": placeholderImage, "isServerless": true}, &t)
		tid, _ = t["id"].(string)
	}
	if err != nil {
		return nil, false, 0, err
	}
	if v, ok := body["workersMin"]; ok {
		wantMin, _ = strconv.Atoi(format(v))
	}
	body["templateId"], body["workersMin"] = tid, 0
	if err := a.client().Do(ctx, http.MethodPost, epr.path, body, &ep); err != nil {
		return nil, false, 0, err
	}
	return ep, true, wantMin, nil
}

var errNone = errors.New("none of that name")

// followBuild shows the build's log (its steps; every line with
// buildLog) until the build ends.
func (a *app) followBuild(ctx context.Context, id, bid string, buildLog bool) error {
	resp, err := a.client().Send(ctx, http.MethodGet, "/v2/serverless/"+url.PathEscape(id)+"/builds/"+url.PathEscape(bid)+"/logs", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct{ Line string }
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		if buildLog || builder.IsStepLine(ev.Line) || strings.HasPrefix(ev.Line, "berth: ") {
			fmt.Fprintln(a.o.Stderr, "  "+printable(ev.Line))
		}
	}
	if ctx.Err() != nil {
		return &exitError{ExitError, fmt.Errorf("build %s: not finished within --timeout", bid)}
	}
	return sc.Err()
}

// waitRollout waits for the rolling update: when the endpoint keeps
// workers (workersMin > 0) or has some, until a worker of its current
// version is ready and no idle worker of an older one is left to take a
// job (the runtime drains old workers as new ones become ready; a busy
// one finishes its job first).
func (a *app) waitRollout(ctx context.Context, id string) error {
	var ep map[string]any
	if err := a.client().Do(ctx, http.MethodGet, "/v1/endpoints/"+url.PathEscape(id), nil, &ep); err != nil {
		return err
	}
	min, _ := strconv.Atoi(format(ep["workersMin"]))
	var pr *progress
	defer func() {
		if pr != nil {
			pr.Stop()
		}
	}()
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		var wl struct {
			EndpointVersion int
			Workers         []struct {
				ID      string
				Status  string
				Version int
			}
		}
		if err := a.client().Do(ctx, http.MethodGet, "/v2/serverless/"+url.PathEscape(id)+"/workers", nil, &wl); err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		ready, staleIdle := 0, 0
		for _, w := range wl.Workers {
			switch {
			case w.Version == wl.EndpointVersion && (w.Status == "IDLE" || w.Status == "RUNNING"):
				ready++
			case w.Version < wl.EndpointVersion && w.Status == "IDLE":
				staleIdle++
			}
		}
		if len(wl.Workers) == 0 && min <= 0 {
			fmt.Fprintln(a.o.Stderr, "deploy: no workers (workersMin 0): a worker of the new release starts with the next job")
			return nil
		}
		if ready > 0 && staleIdle == 0 {
			if pr != nil {
				pr.Stop()
				pr = nil
			}
			fmt.Fprintf(a.o.Stderr, "deploy: rolled out: %d worker(s) of v%d ready\n", ready, wl.EndpointVersion)
			return nil
		}
		msg := fmt.Sprintf("deploy: rolling out v%d: %d worker(s) of it ready, %d idle worker(s) of older versions", wl.EndpointVersion, ready, staleIdle)
		if pr == nil {
			pr = a.progress()
			pr.Start(msg)
		} else {
			pr.Update(msg)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
			continue
		}
		break
	}
	return &exitError{ExitError, fmt.Errorf("endpoint %s: the rollout did not finish within --timeout", id)}
}

func rollbackCommand(a *app, r resource, getArg string) *cobra.Command {
	var to int
	var timeout time.Duration
	cmd := &cobra.Command{Use: "rollback " + getArg + " [--to VERSION]", Short: "Move an endpoint back onto an earlier build's image (a new release)",
		Long: `rollback moves the endpoint back onto the image of an earlier release that a
build made (berth deploy): --to VERSION, or the newest one whose image it
does not run now. It records a new release and rolls the workers, as any
release does, and waits for the rollout as deploy does. Only the image moves back; settings changed since stay.
'berth endpoint get ID' and GET /v2/serverless/ID/releases show the versions.`,
		Args: exactArgs(1, getArg),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if changed(cmd.Flags(), "to") {
				body["version"] = to
			}
			err := a.withID(cmd.Context(), r, args[0], func(id string) error {
				return a.client().Do(cmd.Context(), http.MethodPost, "/v2/serverless/"+url.PathEscape(id)+"/rollback", body, nil)
			})
			if err != nil {
				return err
			}
			var ep map[string]any
			err = a.withID(cmd.Context(), r, args[0], func(id string) error {
				return a.client().Do(cmd.Context(), http.MethodGet, r.path+"/"+url.PathEscape(id), nil, &ep)
			})
			if err != nil {
				return err
			}
			id, _ := ep["id"].(string)
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := a.waitRollout(ctx, id); err != nil {
				return err
			}
			return a.printer().Object(ep)
		}}
	cmd.Flags().IntVar(&to, "to", 0, "the release version to go back to [the newest earlier build's]")
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "give up waiting for the rollout after this long")
	return cmd
}
