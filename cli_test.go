package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth/httpapi"
	"berth/queue"
	"berth/store"
)

// runCLI runs a client verb against an in-process Berth and returns what it
// printed.
func runCLI(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	t.Setenv("BERTH_URL", url)
	t.Setenv("BERTH_API_KEY", "cli-key")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	err = clientVerb(args[0], args[1:])
	w.Close()
	os.Stdout = old
	return <-done, err
}

func TestCLIVerbs(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := queue.New(db, queue.Config{Logger: quiet})
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q.Stop()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Store: db, Queue: q, Logger: quiet, APIKeyHash: httpapi.HashKey("cli-key")}).Handler())
	defer srv.Close()

	field := func(out, name string) string {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, `"`+name+`": "`) {
				return strings.Trim(strings.SplitN(line, `": `, 2)[1], `",`)
			}
		}
		t.Fatalf("no %s in %s", name, out)
		return ""
	}
	out, err := runCLI(t, srv.URL, "template", "create", "cli", "img:1")
	if err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, srv.URL, "endpoint", "create", field(out, "id"))
	if err != nil {
		t.Fatal(err)
	}
	ep := field(out, "id")

	out, err = runCLI(t, srv.URL, "worker-env", ep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"export RUNPOD_WEBHOOK_GET_JOB='" + srv.URL + "/v2/" + ep + "/job-take/", "export RUNPOD_WEBHOOK_POST_OUTPUT='", "/$ID?gpu='", "export RUNPOD_AI_API_KEY='bw_", "export RUNPOD_ENDPOINT_ID='" + ep + "'"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker-env output lacks %q:\n%s", want, out)
		}
	}

	out, err = runCLI(t, srv.URL, "run", ep, `{"x":1}`)
	if err != nil || field(out, "status") != "IN_QUEUE" {
		t.Fatalf("run: %v %s", err, out)
	}
	job := field(out, "id")
	if out, err = runCLI(t, srv.URL, "status", ep, job); err != nil || field(out, "status") != "IN_QUEUE" {
		t.Fatalf("status: %v %s", err, out)
	}
	if out, err = runCLI(t, srv.URL, "cancel", ep, job); err != nil || field(out, "status") != "CANCELLED" {
		t.Fatalf("cancel: %v %s", err, out)
	}
	if out, err = runCLI(t, srv.URL, "health", ep); err != nil || !strings.Contains(out, `"inQueue": 0`) {
		t.Fatalf("health: %v %s", err, out)
	}
	// Errors are reported with the server's message, not swallowed.
	if _, err = runCLI(t, srv.URL, "run", ep, `not json`); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("bad input: %v", err)
	}
	if _, err = runCLI(t, srv.URL, "status", ep, "nosuchjob"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("unknown job: %v", err)
	}
	if _, err = runCLI(t, srv.URL, "frobnicate"); err == nil {
		t.Fatal("unknown verb accepted")
	}
}
