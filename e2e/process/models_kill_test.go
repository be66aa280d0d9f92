package process_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/internal/hubtest"
	"berth/internal/proctest"
)

// TestModelDownloadSurvivesKill9: berth serve (the built binary) is killed
// with SIGKILL while a model's large file is mid-transfer (the test Hub
// holds it at a byte and says so); nothing of the model is visible under
// snapshots/ or refs/. Restarted on the same data folder, Berth resumes
// the partial file with Range from where it stopped — the Hub is asked for
// fewer bytes than the file has — checks the whole file's sha256 and
// publishes the snapshot.
func TestModelDownloadSurvivesKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs berth")
	}
	dockertest.Require(t) // the model cache runs with the Docker runtime
	hub := hubtest.New(t)
	weights := make([]byte, 6_000_000)
	if _, err := rand.Read(weights); err != nil {
		t.Fatal(err)
	}
	const heldAt = 2_500_000
	repo := hub.Add(hubtest.Repo{ID: "acme/kill9", Files: []hubtest.File{
		{Path: "config.json", Data: []byte(`{"kill":9}`)},
		{Path: "model.safetensors", Data: weights, LFS: true},
	}})
	reached, release := hub.Hold(weights, heldAt)
	defer release()

	const key = "kill9-test-key"
	berth := proctest.Start(t, proctest.Options{Key: key, Args: []string{"--hf-endpoint", hub.URL}})
	addr, data := berth.Addr, berth.Data
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path string, body, out any) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
		}
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	var tpl, ep struct{ ID string }
	call("POST", "/v1/templates", map[string]any{"name": "kill9", "imageName": "berth-test/never-started:1", "isServerless": true}, &tpl)
	call("POST", "/v1/endpoints", map[string]any{"templateId": tpl.ID, "computeType": "CPU", "workersMin": 0, "workersMax": 0,
		"modelReferences": []string{"https://huggingface.co/acme/kill9"}}, &ep)

	select {
	case <-reached: // the Hub has sent heldAt bytes of the file and holds the rest
	case <-time.After(2 * time.Minute):
		t.Fatal("the download never reached the held byte")
	}
	repoDir := filepath.Join(data, "models", "hub", "models--acme--kill9")
	part := filepath.Join(repoDir, "blobs", hubtest.Sha256(weights)+".incomplete")
	deadline := time.Now().Add(time.Minute)
	for st, err := os.Stat(part); err != nil || st.Size() != heldAt; st, err = os.Stat(part) {
		if time.Now().After(deadline) {
			t.Fatalf("the partial file never held the %d bytes sent: %v %v", heldAt, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	berth.Kill() // SIGKILL: no shutdown code runs
	for _, d := range []string{"snapshots", "refs"} {
		if ents, err := os.ReadDir(filepath.Join(repoDir, d)); err == nil && len(ents) > 0 {
			t.Fatalf("%s/ after the kill holds %v: a half-written model is visible", d, ents)
		}
	}
	if st, err := os.Stat(part); err != nil || st.Size() != heldAt {
		t.Fatalf("the partial file after the kill: %v %v", st, err)
	}

	berth.Start()
	snap := filepath.Join(repoDir, "snapshots", repo.Commit, "model.safetensors")
	deadline = time.Now().Add(2 * time.Minute)
	for {
		var view struct {
			Models []struct{ State string }
		}
		call("GET", "/v1/endpoints/"+ep.ID, nil, &view)
		if len(view.Models) == 1 && view.Models[0].State == "ready" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the model did not complete after the restart: %+v", view)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hubtest.Sha256(weights) {
		t.Fatal("the snapshot's file is not the Hub's")
	}
	if _, err := os.Stat(part); !os.IsNotExist(err) {
		t.Errorf("the partial file is still there: %v", err)
	}
	// The requests for the file's bytes: the first from 0 (cut by the
	// kill), then one resumed from the partial file's end: the Hub was
	// asked again for len(weights)-heldAt bytes, not the whole file.
	var ranges []string
	for _, r := range hub.Requests() {
		if strings.HasPrefix(r.Path, "/cdn/"+hubtest.Sha256(weights)) {
			ranges = append(ranges, r.Range)
		}
	}
	if len(ranges) != 2 || ranges[0] != "" || ranges[1] != "bytes="+strconv.Itoa(heldAt)+"-" {
		t.Fatalf("the file's requests asked for ranges %q; want the whole file, then bytes=%d-", ranges, heldAt)
	}
}
