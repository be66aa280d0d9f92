package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// podCommands are pod's verbs beyond list/get/create/update/delete.
func podCommands(a *app) []*cobra.Command {
	var out []*cobra.Command
	pods := resourceOf("pod")
	for _, v := range []struct{ verb, short string }{
		{"start", "Start a stopped pod"},
		{"stop", "Stop a pod (its container is kept)"},
		{"restart", "Restart a pod's container"},
		{"reset", "Recreate a pod's container from its image"},
	} {
		out = append(out, &cobra.Command{Use: v.verb + " POD_ID|NAME", Short: v.short, Args: exactArgs(1, "POD_ID|NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				var obj any
				err := a.withID(cmd.Context(), pods, args[0], func(id string) error {
					return a.client().Do(cmd.Context(), http.MethodPost, "/v1/pods/"+url.PathEscape(id)+"/"+v.verb, nil, &obj)
				})
				if err != nil {
					return err
				}
				return a.printer().Object(obj)
			}})
	}
	var lf logFlags
	logs := &cobra.Command{Use: "logs POD_ID|NAME", Short: "Print a pod's container log (-f follows it)", Args: exactArgs(1, "POD_ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withID(cmd.Context(), pods, args[0], func(id string) error {
				return copyLog(cmd.Context(), a, "/v1/pods/"+url.PathEscape(id)+"/logs"+lf.query(""), "")
			})
		}}
	lf.register(logs)
	return append(out, logs)
}

type logFlags struct {
	follow bool
	tail   int
}

func (lf *logFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&lf.follow, "follow", "f", false, "keep printing lines as the container writes them")
	cmd.Flags().IntVar(&lf.tail, "tail", 0, "only the last N lines (0: all)")
}

func (lf *logFlags) query(job string) string {
	v := url.Values{}
	if lf.follow {
		v.Set("follow", "true")
	}
	if lf.tail > 0 {
		v.Set("tail", strconv.Itoa(lf.tail))
	}
	if job != "" {
		v.Set("jobId", job)
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// copyLog prints a log route's text, each line prefixed with prefix.
func copyLog(ctx context.Context, a *app, path, prefix string) error {
	resp, err := a.client().Send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return prefixLines(a.o.Stdout, resp.Body, prefix, nil)
}

func prefixLines(w io.Writer, r io.Reader, prefix string, mu *sync.Mutex) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if !strings.HasSuffix(line, "\n") {
				line += "\n"
			}
			if mu != nil {
				mu.Lock()
			}
			_, werr := io.WriteString(w, prefix+line)
			if mu != nil {
				mu.Unlock()
			}
			if werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
	}
}

// waitEndpoint polls the endpoint until workersMin workers are ready,
// showing its status (image pull progress, why workers are held back).
func waitEndpoint(ctx context.Context, a *app, obj map[string]any, timeout time.Duration) (map[string]any, error) {
	id, _ := obj["id"].(string)
	min, _ := strconv.Atoi(format(obj["workersMin"]))
	if min <= 0 {
		fmt.Fprintln(a.o.Stderr, "workersMin is 0: workers start when jobs arrive; nothing to wait for")
		return obj, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pr := a.progress()
	pr.Start(fmt.Sprintf("endpoint %s: waiting for %d worker(s)", id, min))
	defer pr.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		var cur map[string]any
		if err := a.client().Do(ctx, http.MethodGet, "/v1/endpoints/"+url.PathEscape(id), nil, &cur); err != nil {
			if ctx.Err() != nil {
				return nil, &exitError{ExitError, fmt.Errorf("endpoint %s: workers not ready after %s", id, timeout)}
			}
			return nil, err
		}
		st, _ := cur["status"].(map[string]any)
		idle, _ := strconv.Atoi(format(lookup(st, "workers.idle")))
		running, _ := strconv.Atoi(format(lookup(st, "workers.running")))
		if idle+running >= min {
			return cur, nil
		}
		if u, _ := st["unhealthy"].(bool); u {
			return nil, fmt.Errorf("endpoint %s is unhealthy: %s", id, format(st["reason"]))
		}
		msg := fmt.Sprintf("endpoint %s: %d/%d worker(s) ready", id, idle+running, min)
		if r := format(st["reason"]); r != "-" {
			msg += " — " + r
		}
		pr.Update(msg)
		select {
		case <-ctx.Done():
			return nil, &exitError{ExitError, fmt.Errorf("endpoint %s: workers not ready after %s", id, timeout)}
		case <-tick.C:
		}
	}
}

// createPodShowingPull runs create, which answers only once the server has
// pulled the pod's image and started its container, and meanwhile polls the
// pod list: the new pod (an id not listed before, with the name given) has
// the runtime's pull progress as its statusMessage while the pull runs.
func createPodShowingPull(ctx context.Context, a *app, name string, create func(context.Context) error) error {
	pr := a.progress()
	pr.Start("creating pod (pulling its image when missing)")
	defer pr.Stop()
	done := make(chan error, 1)
	var before map[string]bool
	var list []map[string]any
	if err := a.client().Do(ctx, http.MethodGet, "/v1/pods", nil, &list); err == nil {
		before = map[string]bool{}
		for _, p := range list {
			id, _ := p["id"].(string)
			before[id] = true
		}
	}
	go func() { done <- create(ctx) }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		if before == nil { // no list: the spinner alone
			continue
		}
		list = nil
		if err := a.client().Do(ctx, http.MethodGet, "/v1/pods", nil, &list); err != nil {
			continue // the create call reports what matters
		}
		for _, p := range list {
			id, _ := p["id"].(string)
			if before[id] || (name != "" && p["name"] != name) {
				continue
			}
			if m := format(p["statusMessage"]); strings.HasPrefix(m, "pulling ") {
				pr.Update("pod " + id + ": " + m)
			}
		}
	}
}

// waitPod polls the pod until it runs (or says why it does not).
func waitPod(ctx context.Context, a *app, obj map[string]any, timeout time.Duration) (map[string]any, error) {
	id, _ := obj["id"].(string)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if obj["desiredStatus"] == "RUNNING" && format(obj["statusMessage"]) == "-" {
			return obj, nil
		}
		if m := format(obj["statusMessage"]); m != "-" {
			return nil, fmt.Errorf("pod %s: %s", id, m)
		}
		select {
		case <-ctx.Done():
			return nil, &exitError{ExitError, fmt.Errorf("pod %s: not running after %s", id, timeout)}
		case <-tick.C:
		}
		obj = nil
		if err := a.client().Do(ctx, http.MethodGet, "/v1/pods/"+url.PathEscape(id), nil, &obj); err != nil {
			return nil, err
		}
	}
}
