// Command berth runs the RunPod serverless platform on one machine.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"berth/httpapi"
	"berth/queue"
	"berth/runtime"
	"berth/store"
)

var version = "0.1.0-dev"

const usage = `berth — the RunPod serverless platform on one machine

Usage:
  berth serve [--addr 127.0.0.1:8080] [--data ./berth-data] [--rate-limits on|off]
  berth version
  berth check [--data ./berth-data]   full consistency check of berth.db (run it with serve stopped)
  berth worker-env ENDPOINT_ID          print export lines for a worker run outside Docker
  berth template create NAME IMAGE      create a serverless template
  berth endpoint create TEMPLATE_ID     create an endpoint (workersMin 0, workersMax 3)
  berth endpoint get ENDPOINT_ID
  berth run ENDPOINT_ID INPUT_JSON      submit a job (/run)
  berth runsync ENDPOINT_ID INPUT_JSON  submit and wait (/runsync)
  berth status ENDPOINT_ID JOB_ID
  berth cancel ENDPOINT_ID JOB_ID
  berth health ENDPOINT_ID

Client verbs talk to BERTH_URL (default http://127.0.0.1:8080) with BERTH_API_KEY.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		err = serve(args)
	case "check":
		err = check(args)
	case "version", "--version":
		fmt.Println("berth", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		err = clientVerb(cmd, args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "berth:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", envOr("BERTH_ADDR", "127.0.0.1:8080"), "listen address")
	data := fs.String("data", envOr("BERTH_DATA", "./berth-data"), "data directory")
	limits := fs.String("rate-limits", envOr("BERTH_RATE_LIMITS", "on"), "the spec's rate limits: on or off")
	workerTimeout := fs.Duration("worker-timeout", 60*time.Second, "a worker silent this long is lost and its jobs requeued")
	reconcile := fs.Duration("reconcile-grace", 30*time.Second, "a job a worker's pings stop reporting this long after it took it is requeued")
	maxAttempts := fs.Int("max-attempts", 3, "times a job is handed to workers that are lost before it fails")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *limits != "on" && *limits != "off" {
		return fmt.Errorf("--rate-limits must be on or off, got %q", *limits)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(store.Procs())
	}

	db, err := store.Open(filepath.Join(*data, "berth.db"), store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	keyHash, err := apiKeyHash(db, log)
	if err != nil {
		return err
	}

	var sup atomic.Pointer[runtime.Supervisor]
	q := queue.New(db, queue.Config{Logger: log, WorkerTimeout: *workerTimeout, ReconcileGrace: *reconcile, MaxAttempts: *maxAttempts,
		OnQueueChange: func(id string) {
			if s := sup.Load(); s != nil {
				s.Notify(id)
			}
		},
		OnStopPod: func(ep, w string) {
			if s := sup.Load(); s != nil {
				s.Recycle(ep, w)
			}
		},
	})
	if err := q.Start(context.Background()); err != nil {
		return err
	}
	s, gpus, workerLn, err := startRuntime(context.Background(), log, db, q, *addr, *data)
	if err != nil {
		q.Stop()
		return fmt.Errorf("start the container runtime: %w", err)
	}
	cfg := httpapi.Config{
		Store: db, Queue: q, Logger: log, APIKeyHash: keyHash, DataDir: *data,
		RateLimits: *limits == "on", Version: version, PingInterval: pingInterval,
		GPUs: gpus.Snapshot,
	}
	if s != nil {
		sup.Store(s)
		defer s.Stop() // containers keep running and are adopted at the next start
		cfg.Workers, cfg.EndpointChanged, cfg.EndpointDeleted = s.WorkerCounts, s.Notify, s.Notify
		cfg.WorkerInfo = workerInfo(s)
		cfg.Pods = podRuntime{s}
		wireLogsAndStatus(&cfg, s)
	}
	api := httpapi.New(cfg)
	if workerLn != nil {
		log.Info("worker protocol for containers", "addr", workerLn.Addr().String())
		go http.Serve(workerLn, workerOnly(api.Handler()))
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		q.Stop()
		return err
	}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Info("berth serving", "addr", ln.Addr().String(), "data", *data, "version", version, "rateLimits", *limits)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		q.Stop()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	if s != nil {
		s.Stop()
	}
	q.Stop() // wakes every long poll
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// check runs the full consistency check of the database file. serve runs
// the cheaper checks (header, length, page tree) at every start.
func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	data := fs.String("data", envOr("BERTH_DATA", "./berth-data"), "data directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path := filepath.Join(*data, "berth.db")
	if err := store.Check(path); err != nil {
		if errors.Is(err, store.ErrLocked) {
			return fmt.Errorf("%w (stop 'berth serve' first)", err)
		}
		return err
	}
	fmt.Println(path + ": ok")
	return nil
}

// apiKeyHash returns the hash of the operator's key: BERTH_API_KEY when set,
// otherwise a key generated on first start, stored hashed and printed once.
func apiKeyHash(db *store.DB, log *slog.Logger) (string, error) {
	if k := os.Getenv("BERTH_API_KEY"); k != "" {
		return httpapi.HashKey(k), nil
	}
	var stored []byte
	db.View(func(tx *store.Tx) error { stored = tx.GetRaw(store.Meta, "api_key_hash"); return nil })
	if stored != nil {
		log.Info("using the API key generated on first start (set BERTH_API_KEY to use another)")
		return string(stored), nil
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	key := "berth_" + hex.EncodeToString(b)
	h := httpapi.HashKey(key)
	if err := db.Write(store.PutRaw(store.Meta, "api_key_hash", []byte(h))); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "\nYour Berth API key (shown only this once; only its hash is stored):\n\n    %s\n\nexport BERTH_API_KEY=%s\n\n", key, key)
	return h, nil
}

// ---- client verbs ----

func clientVerb(cmd string, args []string) error {
	need := func(n int) error {
		if len(args) != n {
			return fmt.Errorf("%s: expected %d argument(s); see 'berth help'", cmd, n)
		}
		return nil
	}
	switch cmd {
	case "worker-env":
		if err := need(1); err != nil {
			return err
		}
		var env map[string]string
		if err := call(http.MethodGet, "/v1/endpoints/"+args[0]+"/worker-env", nil, &env); err != nil {
			return err
		}
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Printf("export %s='%s'\n", k, strings.ReplaceAll(env[k], "'", `'\''`))
		}
		return nil
	case "template":
		if len(args) != 3 || args[0] != "create" {
			return errors.New("usage: berth template create NAME IMAGE")
		}
		return show(http.MethodPost, "/v1/templates", map[string]any{"name": args[1], "imageName": args[2], "isServerless": true})
	case "endpoint":
		if len(args) == 2 && args[0] == "create" {
			return show(http.MethodPost, "/v1/endpoints", map[string]any{"templateId": args[1]})
		}
		if len(args) == 2 && args[0] == "get" {
			return show(http.MethodGet, "/v1/endpoints/"+args[1], nil)
		}
		return errors.New("usage: berth endpoint create TEMPLATE_ID | berth endpoint get ENDPOINT_ID")
	case "run", "runsync":
		if err := need(2); err != nil {
			return err
		}
		var input json.RawMessage
		if err := json.Unmarshal([]byte(args[1]), &input); err != nil {
			return fmt.Errorf("INPUT_JSON is not JSON: %w", err)
		}
		return show(http.MethodPost, "/v2/"+args[0]+"/"+cmd, map[string]any{"input": input})
	case "status", "cancel":
		if err := need(2); err != nil {
			return err
		}
		method := http.MethodGet
		if cmd == "cancel" {
			method = http.MethodPost
		}
		return show(method, "/v2/"+args[0]+"/"+cmd+"/"+args[1], nil)
	case "health":
		if err := need(1); err != nil {
			return err
		}
		return show(http.MethodGet, "/v2/"+args[0]+"/health", nil)
	}
	return fmt.Errorf("unknown command %q; see 'berth help'", cmd)
}

func show(method, path string, body any) error {
	var out json.RawMessage
	if err := call(method, path, body, &out); err != nil {
		return err
	}
	var buf bytes.Buffer
	json.Indent(&buf, out, "", "  ")
	fmt.Println(buf.String())
	return nil
}

func call(method, path string, body, out any) error {
	base := strings.TrimRight(envOr("BERTH_URL", "http://127.0.0.1:8080"), "/")
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("BERTH_API_KEY"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}
