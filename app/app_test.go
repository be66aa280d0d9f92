package app_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"testing"

	"berth/app"
	"berth/gpu"
	"berth/internal/apptest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func start(t *testing.T, cfg app.Config) *apptest.Berth {
	t.Helper()
	return apptest.Start(t, cfg)
}

func stop(t *testing.T, a *apptest.Berth) {
	t.Helper()
	a.Stop()
}

func get(t *testing.T, url, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// A Berth without Docker serves on the port it picked; the key it
// generates on first start is shown once, and the next start on the same
// data directory accepts it without showing it again.
func TestFirstStartKeyAndRestart(t *testing.T) {
	dir := t.TempDir()
	var notice bytes.Buffer
	cfg := app.Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: quiet, KeyNotice: &notice, Backend: app.DockerOff,
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }}
	a := start(t, cfg)
	key := regexp.MustCompile(`berth_[0-9a-f]{40}`).FindString(notice.String())
	if key == "" {
		t.Fatalf("no key shown: %q", notice.String())
	}
	if a.WorkerAddr() != "" || a.Supervisor() != nil {
		t.Errorf("without Docker: worker listener %q, supervisor %v", a.WorkerAddr(), a.Supervisor())
	}
	if code := get(t, a.URL()+"/v1/endpoints", key); code != 200 {
		t.Errorf("GET /v1/endpoints with the key: %d", code)
	}
	if code := get(t, a.URL()+"/v1/endpoints", "wrong"); code != 401 {
		t.Errorf("GET /v1/endpoints with a wrong key: %d", code)
	}
	stop(t, a)

	notice.Reset()
	a = start(t, cfg)
	defer stop(t, a)
	if notice.Len() != 0 {
		t.Errorf("key shown again: %q", notice.String())
	}
	if code := get(t, a.URL()+"/v1/endpoints", key); code != 200 {
		t.Errorf("after a restart, GET /v1/endpoints with the key: %d", code)
	}
}

// New refuses what it cannot assemble, and leaves nothing open: the same
// data directory opens again at once.
func TestNewFailsCleanly(t *testing.T) {
	dir := t.TempDir()
	cfg := app.Config{DataDir: dir, Addr: "256.0.0.1:0", Logger: quiet, APIKey: "k", Backend: app.DockerOff,
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }}
	if _, err := app.New(cfg); err == nil {
		t.Fatal("New with a bad address succeeded")
	}
	cfg.Addr = "127.0.0.1:0"
	a := start(t, cfg)
	stop(t, a)
	if _, err := app.New(app.Config{Addr: "127.0.0.1:0"}); err == nil {
		t.Error("New without a data directory succeeded")
	}
}
