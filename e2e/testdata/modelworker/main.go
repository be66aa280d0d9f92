// Command modelworker is the worker of e2e's BenchmarkModelColdStart: at
// start it loads a Hugging Face model, reading every byte of its files,
// then serves jobs (through package berth/worker) answering each with the
// files' sha256 and how long the load took.
//
// MODEL_ID (ORG/NAME) and MODEL_REVISION (default main) name the model.
// Without MODEL_HUB it is read from Berth's cache ($HF_HUB_CACHE, the hub
// layout: refs/REV names the snapshot). With MODEL_HUB (a Hub's base URL)
// the worker downloads it itself, as a worker without cached models does:
// the revision API lists the files, each is fetched from its resolve URL
// into /model on the container's disk, then read back.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"berth/worker"
)

type loaded struct {
	Files   map[string]string `json:"files"` // path in the repository → sha256
	Bytes   int64             `json:"bytes"`
	Seconds float64           `json:"seconds"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	id, rev := os.Getenv("MODEL_ID"), os.Getenv("MODEL_REVISION")
	if rev == "" {
		rev = "main"
	}
	start := time.Now()
	dir, err := modelDir(ctx, id, rev, os.Getenv("MODEL_HUB"))
	var model loaded
	if err == nil {
		model, err = readAll(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modelworker: load", id, err)
		os.Exit(1)
	}
	model.Seconds = time.Since(start).Seconds()
	handle := func(context.Context, *worker.Job) (any, error) { return model, nil }
	if err := worker.Start(ctx, worker.Config{Handler: handle, Concurrency: 1}); err != nil {
		fmt.Fprintln(os.Stderr, "modelworker:", err)
		os.Exit(1)
	}
}

// modelDir is the folder holding the model's files: the cache's snapshot,
// or /model after downloading from hub.
func modelDir(ctx context.Context, id, rev, hub string) (string, error) {
	if hub == "" {
		repo := filepath.Join(os.Getenv("HF_HUB_CACHE"), "models--"+strings.ReplaceAll(id, "/", "--"))
		commit, err := os.ReadFile(filepath.Join(repo, "refs", rev))
		if err != nil {
			return "", err
		}
		return filepath.Join(repo, "snapshots", strings.TrimSpace(string(commit))), nil
	}
	var info struct {
		Sha      string
		Siblings []struct{ Rfilename string }
	}
	if err := getJSON(ctx, hub+"/api/models/"+id+"/revision/"+rev, &info); err != nil {
		return "", err
	}
	const dir = "/model"
	for _, s := range info.Siblings {
		if err := download(ctx, hub+"/"+id+"/resolve/"+info.Sha+"/"+s.Rfilename, filepath.Join(dir, s.Rfilename)); err != nil {
			return "", fmt.Errorf("%s: %w", s.Rfilename, err)
		}
	}
	return dir, nil
}

func getJSON(ctx context.Context, url string, out any) error {
	resp, err := get(ctx, url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

func get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req) // follows the Hub's redirect to its content store
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp, nil
}

func download(ctx context.Context, url, path string) error {
	resp, err := get(ctx, url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(f, resp.Body, make([]byte, 1<<20)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readAll reads every file under dir (following the cache's symlinks) and
// hashes it.
func readAll(dir string) (loaded, error) {
	out := loaded{Files: map[string]string{}}
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.CopyBuffer(h, f, buf)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out.Files[filepath.ToSlash(rel)] = hex.EncodeToString(h.Sum(nil))
		out.Bytes += n
		return nil
	})
	if err == nil && len(out.Files) == 0 {
		err = errors.New("no files in " + dir)
	}
	return out, err
}
