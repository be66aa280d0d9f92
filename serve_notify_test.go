package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `berth serve --apply FILE` under systemd (Type=notify) tells systemd the
// start is still under way (EXTEND_TIMEOUT_USEC) while the file is
// applied — a first build may take longer than the unit's start timeout —
// and READY=1 only after it.
func TestServeApplyExtendsTheStartTimeout(t *testing.T) {
	dir := t.TempDir()
	conn := notifySocket(t, dir)
	file := filepath.Join(dir, "berth.json")
	if err := os.WriteFile(file, []byte(`{"templates": [{"name": "t", "imageName": "me/echo:1", "isServerless": true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	ready, done, cancel := serveCmd(t, &stderr, "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--apply", file)
	defer cancel()
	waitServing(t, ready, done, &stderr)
	var got []string
	buf := make([]byte, 256)
	for !strings.Contains(strings.Join(got, " "), "READY=1") {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("sd_notify after %q: %v", got, err)
		}
		got = append(got, string(buf[:n]))
	}
	if len(got) < 2 || got[0] != "EXTEND_TIMEOUT_USEC=120000000" || got[len(got)-1] != "READY=1" {
		t.Fatalf("notifications %q: want EXTEND_TIMEOUT_USEC=120000000 while applying, then READY=1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}
