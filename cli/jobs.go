package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"
)

func jobPath(ep, op, job string) string {
	p := "/v2/" + url.PathEscape(ep) + "/" + op
	if job != "" {
		p += "/" + url.PathEscape(job)
	}
	return p
}

// terminal reports whether a job status is final.
func terminal(status string) bool {
	switch status {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT":
		return true
	}
	return false
}

// jobResult turns a final job view into the command's error: nil when it
// completed, exit code 4 otherwise.
func jobResult(v map[string]any) error {
	st, _ := v["status"].(string)
	if st == "COMPLETED" || !terminal(st) {
		return nil
	}
	msg := fmt.Sprintf("job %s %s", format(v["id"]), st)
	if e := format(v["error"]); e != "-" {
		msg += ": " + e
	}
	return &exitError{ExitJobFailed, fmt.Errorf("%s", msg)}
}

var jobCols = []column{{header: "ID", path: "id"}, {header: "STATUS", path: "status"}, {header: "DELAY_MS", path: "delayTime"},
	{header: "EXEC_MS", path: "executionTime"}, {header: "WORKER", path: "workerId"}}

// showJob prints a job: JSON as is, or its fields then its output.
func (a *app) showJob(v map[string]any) error {
	p := a.printer()
	if p.json {
		return p.JSON(v)
	}
	if err := p.List([]any{v}, jobCols); err != nil {
		return err
	}
	if out, ok := v["output"]; ok {
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintf(a.o.Stdout, "output: %s\n", b)
	}
	if e := format(v["error"]); e != "-" {
		fmt.Fprintf(a.o.Stdout, "error: %s\n", e)
	}
	return nil
}

func parseInput(s string) (json.RawMessage, error) {
	var in json.RawMessage
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, usageErr("INPUT_JSON is not JSON: %v", err)
	}
	return in, nil
}

func jobCommands(a *app) []*cobra.Command {
	var wait bool
	var webhook string
	run := &cobra.Command{Use: "run ENDPOINT_ID|NAME INPUT_JSON", Short: "Submit a job (--wait: follow it and print its output)",
		Long: `Submit a job to an endpoint. INPUT_JSON is the job's "input".

Without --wait it prints the job's id and status. With --wait it follows the
job (a spinner with the elapsed time and the job's state on a terminal), then
prints the final job with its output; the exit code is 4 when the job did
not complete (FAILED, CANCELLED, TIMED_OUT).`,
		Args: exactArgs(2, "ENDPOINT_ID|NAME INPUT_JSON"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := parseInput(args[1])
			if err != nil {
				return err
			}
			ep, err := a.endpointID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			body := map[string]any{"input": in}
			if webhook != "" {
				body["webhook"] = webhook
			}
			var v map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodPost, jobPath(ep, "run", ""), body, &v); err != nil {
				return err
			}
			if !wait {
				return a.showJob(v)
			}
			if v, err = a.follow(cmd.Context(), ep, format(v["id"])); err != nil {
				return err
			}
			if err := a.showJob(v); err != nil {
				return err
			}
			return jobResult(v)
		}}
	run.Flags().BoolVarP(&wait, "wait", "w", false, "wait for the job to finish and print its output")
	run.Flags().StringVar(&webhook, "webhook", "", "URL the result is POSTed to")

	runsync := &cobra.Command{Use: "runsync ENDPOINT_ID|NAME INPUT_JSON", Short: "Submit a job with /runsync (the server waits up to 90 s)",
		Args: exactArgs(2, "ENDPOINT_ID|NAME INPUT_JSON"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := parseInput(args[1])
			if err != nil {
				return err
			}
			ep, err := a.endpointID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var v map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodPost, jobPath(ep, "runsync", ""), map[string]any{"input": in}, &v); err != nil {
				return err
			}
			if err := a.showJob(v); err != nil {
				return err
			}
			return jobResult(v)
		}}

	simple := func(use, short, method, op string, result bool) *cobra.Command {
		return &cobra.Command{Use: use + " ENDPOINT_ID|NAME JOB_ID", Short: short, Args: exactArgs(2, "ENDPOINT_ID|NAME JOB_ID"),
			RunE: func(cmd *cobra.Command, args []string) error {
				ep, err := a.endpointID(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				var v map[string]any
				if err := a.client().Do(cmd.Context(), method, jobPath(ep, op, args[1]), nil, &v); err != nil {
					return err
				}
				return a.showJob(v)
			}}
	}
	status := simple("status", "Show a job's status and output", http.MethodGet, "status", false)
	cancel := simple("cancel", "Cancel a job", http.MethodPost, "cancel", false)
	retry := simple("retry", "Requeue a failed or timed-out job", http.MethodPost, "retry", false)

	stream := &cobra.Command{Use: "stream ENDPOINT_ID|NAME JOB_ID", Short: "Print a streaming job's chunks as they arrive",
		Long: `Print a streaming job's chunks as they arrive, one JSON value per line
(the chunk's "output"), until the job ends. The exit code is 4 when the job
did not complete. With --json each line is the whole chunk object.`,
		Args: exactArgs(2, "ENDPOINT_ID|NAME JOB_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := a.endpointID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			for {
				var v struct {
					Status string            `json:"status"`
					Stream []json.RawMessage `json:"stream"`
					Error  any               `json:"error"`
				}
				if err := a.client().Do(cmd.Context(), http.MethodGet, jobPath(ep, "stream", args[1]), nil, &v); err != nil {
					return err
				}
				for _, c := range v.Stream {
					if a.printer().json {
						fmt.Fprintf(a.o.Stdout, "%s\n", compact(c))
						continue
					}
					var chunk struct {
						Output json.RawMessage `json:"output"`
					}
					json.Unmarshal(c, &chunk)
					fmt.Fprintf(a.o.Stdout, "%s\n", compact(chunk.Output))
				}
				if terminal(v.Status) {
					return jobResult(map[string]any{"id": args[1], "status": v.Status, "error": v.Error})
				}
			}
		}}

	purge := &cobra.Command{Use: "purge ENDPOINT_ID|NAME", Short: "Remove every queued job of an endpoint", Args: exactArgs(1, "ENDPOINT_ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := a.endpointID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var v map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodPost, jobPath(ep, "purge-queue", ""), nil, &v); err != nil {
				return err
			}
			return a.printer().Object(v)
		}}

	health := &cobra.Command{Use: "health ENDPOINT_ID|NAME", Short: "Show an endpoint's jobs and workers by state", Args: exactArgs(1, "ENDPOINT_ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := a.endpointID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var v map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodGet, jobPath(ep, "health", ""), nil, &v); err != nil {
				return err
			}
			p := a.printer()
			if p.json {
				return p.JSON(v)
			}
			var rows []any
			for _, kind := range []string{"jobs", "workers"} {
				m, _ := v[kind].(map[string]any)
				keys := make([]string, 0, len(m))
				for k := range m {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					rows = append(rows, map[string]any{"kind": kind, "state": k, "count": m[k]})
				}
			}
			if err := p.List(rows, []column{{header: "KIND", path: "kind"}, {header: "STATE", path: "state"}, {header: "COUNT", path: "count"}}); err != nil {
				return err
			}
			if r := format(v["reason"]); r != "-" {
				fmt.Fprintln(a.o.Stdout, "reason:", r)
			}
			return nil
		}}

	var lf logFlags
	var logJob string
	logs := &cobra.Command{Use: "logs ENDPOINT_ID|NAME [WORKER_ID]", Short: "Print worker container logs (all workers when none is named)",
		Long: `Print the logs of an endpoint's worker containers. Without WORKER_ID every
worker of the endpoint is shown, each line prefixed with its worker id.
--job keeps only the lines the worker logged for that job; -f follows.`,
		Args: rangeArgs(1, 2, "ENDPOINT_ID|NAME [WORKER_ID]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := a.endpointID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			base := "/v1/endpoints/" + url.PathEscape(ep) + "/workers/"
			if len(args) == 2 {
				return copyLog(cmd.Context(), a, base+url.PathEscape(args[1])+"/logs"+lf.query(logJob), "")
			}
			var e struct {
				Workers []struct {
					ID       string `json:"id"`
					External bool   `json:"external"`
				} `json:"workers"`
			}
			if err := a.client().Do(cmd.Context(), http.MethodGet, "/v1/endpoints/"+url.PathEscape(ep)+"?includeWorkers=true", nil, &e); err != nil {
				return err
			}
			var ids []string
			for _, w := range e.Workers {
				if !w.External {
					ids = append(ids, w.ID)
				}
			}
			if len(ids) == 0 {
				fmt.Fprintf(a.o.Stderr, "endpoint %s has no worker containers\n", ep)
				return nil
			}
			var mu sync.Mutex
			var wg sync.WaitGroup
			errs := make([]error, len(ids))
			for i, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := a.client().Send(cmd.Context(), http.MethodGet, base+url.PathEscape(id)+"/logs"+lf.query(logJob), nil)
					if err != nil {
						errs[i] = err
						return
					}
					defer resp.Body.Close()
					errs[i] = prefixLines(a.o.Stdout, resp.Body, id+" | ", &mu)
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil && ExitCode(err) != ExitNotFound { // a worker gone meanwhile
					return err
				}
			}
			return nil
		}}
	lf.register(logs)
	logs.Flags().StringVar(&logJob, "job", "", "only the lines logged for this job id")

	return []*cobra.Command{run, runsync, status, stream, cancel, retry, purge, health, logs}
}

func compact(b json.RawMessage) string {
	var buf strings.Builder
	if len(b) == 0 {
		return "null"
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	buf.Write(out)
	return buf.String()
}

// follow waits for a job to end, showing its state as it moves, and
// returns the final view. Each /status-sync call returns as soon as the job
// ends or after a second, so state changes show within a second.
func (a *app) follow(ctx context.Context, ep, id string) (map[string]any, error) {
	pr := a.progress()
	pr.Start("job " + id + " IN_QUEUE")
	defer pr.Stop()
	for {
		var v map[string]any
		if err := a.client().Do(ctx, http.MethodGet, jobPath(ep, "status-sync", id)+"?wait=1000", nil, &v); err != nil {
			return nil, err
		}
		st := format(v["status"])
		if terminal(st) {
			return v, nil
		}
		pr.Update("job " + id + " " + st)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
	}
}

// endpointID is the id of the endpoint arg names: arg when an endpoint has
// that id, else the one endpoint named arg (as get takes a name).
func (a *app) endpointID(ctx context.Context, arg string) (string, error) {
	err := a.client().Do(ctx, http.MethodGet, "/v1/endpoints/"+url.PathEscape(arg), nil, nil)
	if !maybeName(err) {
		return arg, err
	}
	return a.idByName(ctx, resourceOf("endpoint"), arg, err)
}
