package hfcache_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/hfcache"
	"berth/internal/clientkit"
	"berth/internal/disktest"
	"berth/internal/hubtest"
)

func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRef(t testing.TB, s string) hfcache.Ref {
	r, err := hfcache.ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// clock is a settable time for the cache's last-use records.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func newCache(t *testing.T, hub *hubtest.Server, dir string, mut func(*hfcache.Config)) *hfcache.Cache {
	t.Helper()
	cfg := hfcache.Config{Dir: dir, Endpoint: hub.URL, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	if mut != nil {
		mut(&cfg)
	}
	c, err := hfcache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitFor polls ref's progress until ok says so (30 s at most).
func waitFor(t *testing.T, c *hfcache.Cache, ref hfcache.Ref, what string, ok func(hfcache.Progress) bool) hfcache.Progress {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var p hfcache.Progress
	for time.Now().Before(deadline) {
		p, _ = c.Status(ref)
		if ok(p) {
			return p
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation: the deadline bounds it
	}
	t.Fatalf("%s: %s not reached; last progress %+v (%s)", ref, what, p, p)
	return p
}

func ready(t *testing.T, c *hfcache.Cache, ref hfcache.Ref) hfcache.Progress {
	t.Helper()
	return waitFor(t, c, ref, "ready", func(p hfcache.Progress) bool { return p.State == hfcache.Ready })
}

func failed(t *testing.T, c *hfcache.Cache, ref hfcache.Ref) hfcache.Progress {
	t.Helper()
	return waitFor(t, c, ref, "failed", func(p hfcache.Progress) bool { return p.State == hfcache.Failed })
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func modelRepo(t testing.TB, id string, big int, refs ...string) hubtest.Repo {
	return hubtest.Repo{ID: id, Refs: refs, Files: []hubtest.File{
		{Path: "config.json", Data: []byte(`{"model_type":"test","id":"` + id + `"}`)},
		{Path: "model.safetensors", Data: random(t, big), LFS: true},
		{Path: "tokenizer/vocab.txt", Data: []byte("a\nb\nc\n")},
	}}
}

// TestDownloadLayout: a model lands in the hub cache layout — refs/main
// naming the commit, snapshots/COMMIT/PATH symlinks to blobs named by
// their hashes — with the bytes the Hub serves and progress counting them.
func TestDownloadLayout(t *testing.T) {
	hub := hubtest.New(t)
	repo := hub.Add(modelRepo(t, "acme/tiny", 3<<20))
	dir := filepath.Join(t.TempDir(), "hub")
	c := newCache(t, hub, dir, nil)
	ref := mustRef(t, "https://huggingface.co/acme/tiny")
	c.Sync([]hfcache.Ref{ref})
	p := ready(t, c, ref)
	var total int64
	for _, f := range repo.Files {
		total += int64(len(f.Data))
	}
	if p.Commit != repo.Commit || p.Total != total || p.Done != total {
		t.Fatalf("progress %+v; want commit %s, %d of %d bytes", p, repo.Commit, total, total)
	}
	folder := filepath.Join(dir, "models--acme--tiny")
	if b, err := os.ReadFile(filepath.Join(folder, "refs", "main")); err != nil || string(b) != repo.Commit {
		t.Fatalf("refs/main = %q, %v; want %s", b, err, repo.Commit)
	}
	for _, f := range repo.Files {
		p := filepath.Join(folder, "snapshots", repo.Commit, f.Path)
		target, err := os.Readlink(p)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		blob := hubtest.GitBlobID(f.Data)
		if f.LFS {
			blob = hubtest.Sha256(f.Data)
		}
		want := strings.Repeat("../", 2+strings.Count(f.Path, "/")) + "blobs/" + blob
		if target != want {
			t.Errorf("%s → %s, want %s", f.Path, target, want)
		}
		got, err := os.ReadFile(p)
		if err != nil || sum(got) != sum(f.Data) {
			t.Errorf("%s: read %d bytes (%v), not the Hub's %d", f.Path, len(got), err, len(f.Data))
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(folder, "blobs", "*.incomplete"))
	if len(leftovers) > 0 {
		t.Errorf("partial files left: %v", leftovers)
	}
	// The large file came through the redirect to the content store.
	var cdn bool
	for _, r := range hub.Requests() {
		cdn = cdn || strings.HasPrefix(r.Path, "/cdn/"+hubtest.Sha256(repo.Files[1].Data))
	}
	if !cdn {
		t.Errorf("the large file did not come from the content path the resolve redirects to: %+v", hub.Requests())
	}
	// A second cache on the folder (a restart) finds it complete without the Hub.
	before := len(hub.Requests())
	c2 := newCache(t, hub, dir, nil)
	c2.Sync([]hfcache.Ref{ref})
	if p, _ := c2.Status(ref); p.State != hfcache.Ready || p.Commit != repo.Commit {
		t.Fatalf("after a restart: %+v", p)
	}
	if n := len(hub.Requests()); n != before {
		t.Errorf("a complete model asked the Hub again: %d requests", n-before)
	}
}

// TestResumeAfterCut: the Hub's connection is cut mid-file; Berth stops
// (a restart), and the next cache on the folder resumes the partial file
// with Range from where it stopped. Nothing is visible before it is whole.
func TestResumeAfterCut(t *testing.T) {
	hub := hubtest.New(t)
	repo := hub.Add(modelRepo(t, "acme/cut", 2<<20))
	big := repo.Files[1].Data
	hub.CutOnce(big, 700_000)
	dir := filepath.Join(t.TempDir(), "hub")
	ref := mustRef(t, "https://huggingface.co/acme/cut")
	c := newCache(t, hub, dir, func(cfg *hfcache.Config) { cfg.MinBackoff = time.Hour })
	c.Sync([]hfcache.Ref{ref})
	p := failed(t, c, ref)
	if !strings.Contains(p.Error, "interrupted at byte") || !strings.Contains(p.Error, "model.safetensors") {
		t.Errorf("reason %q does not say the transfer was interrupted", p.Error)
	}
	c.Close()
	folder := filepath.Join(dir, "models--acme--cut")
	part := filepath.Join(folder, "blobs", hubtest.Sha256(big)+".incomplete")
	st, err := os.Stat(part)
	if err != nil || st.Size() == 0 || st.Size() > 700_000 {
		t.Fatalf("partial file: %v, %v; want 1–700000 bytes", st, err)
	}
	have := st.Size()
	if _, err := os.Stat(filepath.Join(folder, "snapshots", repo.Commit)); !os.IsNotExist(err) {
		t.Fatalf("the snapshot is visible before the model is complete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(folder, "refs", "main")); !os.IsNotExist(err) {
		t.Fatalf("refs/main written before the model is complete: %v", err)
	}

	c2 := newCache(t, hub, dir, nil)
	c2.Sync([]hfcache.Ref{ref})
	ready(t, c2, ref)
	got, err := os.ReadFile(filepath.Join(folder, "snapshots", repo.Commit, "model.safetensors"))
	if err != nil || sum(got) != sum(big) {
		t.Fatalf("resumed file: %d bytes, %v", len(got), err)
	}
	// The Range goes through the resolve's redirect to the content store.
	var ranges []string
	for _, r := range hub.Requests() {
		if r.Range != "" && strings.HasPrefix(r.Path, "/cdn/") {
			ranges = append(ranges, r.Path+" "+r.Range)
		}
	}
	want := "/cdn/" + hubtest.Sha256(big) + " bytes=" + itoa(have) + "-"
	if len(ranges) != 1 || ranges[0] != want {
		t.Fatalf("ranged requests %q; want one: %q", ranges, want)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestCorruptByteRefused: a flipped byte fails the sha256 check; nothing is
// visible, the reason says so, and the next attempt downloads it whole.
func TestCorruptByteRefused(t *testing.T) {
	hub := hubtest.New(t)
	repo := hub.Add(modelRepo(t, "acme/bad", 1<<20))
	big := repo.Files[1].Data
	hub.Corrupt(big, true)
	dir := filepath.Join(t.TempDir(), "hub")
	ref := mustRef(t, "https://huggingface.co/acme/bad")
	c := newCache(t, hub, dir, func(cfg *hfcache.Config) {
		cfg.MinBackoff, cfg.MaxBackoff = 100*time.Millisecond, 100*time.Millisecond
	})
	c.Sync([]hfcache.Ref{ref})
	p := failed(t, c, ref)
	if !strings.Contains(p.Error, "sha256 mismatch") || !strings.Contains(p.Error, "want "+hubtest.Sha256(big)) {
		t.Fatalf("reason %q does not name the sha256 check", p.Error)
	}
	if !strings.Contains(p.String(), "downloading acme/bad failed (attempt ") {
		t.Errorf("message %q", p.String())
	}
	folder := filepath.Join(dir, "models--acme--bad")
	for _, gone := range []string{
		filepath.Join("blobs", hubtest.Sha256(big)),
		filepath.Join("snapshots", repo.Commit),
		filepath.Join("refs", "main"),
	} {
		if _, err := os.Stat(filepath.Join(folder, gone)); !os.IsNotExist(err) {
			t.Errorf("%s exists after the sha256 check failed (%v)", gone, err)
		}
	}
	hub.Corrupt(big, false)
	ready(t, c, ref)
	got, err := os.ReadFile(filepath.Join(folder, "snapshots", repo.Commit, "model.safetensors"))
	if err != nil || sum(got) != sum(big) {
		t.Fatalf("after the retry: %d bytes, %v", len(got), err)
	}
}

// TestHubRefusals: a gated model without the token (401) and an unknown
// model (404) fail with their reason; with the token the gated one
// downloads, the token sent as Bearer.
func TestHubRefusals(t *testing.T) {
	hub := hubtest.New(t)
	gated := modelRepo(t, "corp/gated", 100_000)
	gated.Gated = true
	hub.Add(gated)
	dir := filepath.Join(t.TempDir(), "hub")
	gref := mustRef(t, "https://huggingface.co/corp/gated")
	missing := mustRef(t, "https://huggingface.co/corp/missing")
	norev := mustRef(t, "https://huggingface.co/corp/gated:nope")
	c := newCache(t, hub, dir, func(cfg *hfcache.Config) { cfg.MinBackoff = time.Hour })
	c.Sync([]hfcache.Ref{gref, missing})
	if p := failed(t, c, gref); !strings.Contains(p.Error, "HTTP 401") || !strings.Contains(p.Error, "gated or private") || !strings.Contains(p.Error, "no Hugging Face token") {
		t.Errorf("gated without a token: %q", p.Error)
	}
	if p := failed(t, c, missing); !strings.Contains(p.Error, "HTTP 404") || !strings.Contains(p.Error, "corp/missing") {
		t.Errorf("missing: %q", p.Error)
	}
	c.Close()

	wrong := newCache(t, hub, dir, func(cfg *hfcache.Config) {
		cfg.MinBackoff, cfg.Token = time.Hour, func() string { return "hf_wrong" }
	})
	wrong.Sync([]hfcache.Ref{gref})
	if p := failed(t, wrong, gref); !strings.Contains(p.Error, "no access") {
		t.Errorf("gated with a wrong token: %q", p.Error)
	}
	wrong.Close()

	c2 := newCache(t, hub, dir, func(cfg *hfcache.Config) { cfg.Token = func() string { return hub.Token } })
	c2.Sync([]hfcache.Ref{gref, norev})
	ready(t, c2, gref)
	if p := failed(t, c2, norev); !strings.Contains(p.Error, "HTTP 404 RevisionNotFound") {
		t.Errorf("unknown revision: %q", p.Error)
	}
	var bearer int
	for _, r := range hub.Requests() {
		if r.Authorization == "Bearer "+hub.Token {
			bearer++
		}
	}
	if bearer == 0 {
		t.Error("the token was never sent as Bearer")
	}
}

// TestEvictionLeastRecentlyUsed: past the cap, models no reference names
// go least recently used first; named ones stay; a model that cannot fit
// says so.
func TestEvictionLeastRecentlyUsed(t *testing.T) {
	hub := hubtest.New(t)
	const mb = 1_000_000
	for _, id := range []string{"m/a", "m/b", "m/c", "m/d"} {
		hub.Add(hubtest.Repo{ID: id, Files: []hubtest.File{{Path: "w.bin", Data: random(t, mb), LFS: true}}})
	}
	hub.Add(hubtest.Repo{ID: "m/e", Files: []hubtest.File{{Path: "w.bin", Data: random(t, 1_200_000), LFS: true}}})
	hub.Add(hubtest.Repo{ID: "m/huge", Files: []hubtest.File{{Path: "w.bin", Data: random(t, 4*mb), LFS: true}}})
	dir := filepath.Join(t.TempDir(), "hub")
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newCache(t, hub, dir, func(cfg *hfcache.Config) {
		cfg.MaxBytes, cfg.Now, cfg.MinBackoff = 3_500_000, clk.Now, time.Hour
	})
	ref := func(id string) hfcache.Ref { return mustRef(t, "https://huggingface.co/"+id) }
	var want []hfcache.Ref
	for i, id := range []string{"m/a", "m/b", "m/c"} {
		clk.Set(clk.Now().Add(time.Duration(i+1) * time.Hour))
		want = append(want, ref(id))
		c.Sync(want)
		ready(t, c, ref(id))
	}
	clk.Set(clk.Now().Add(time.Hour))
	c.Touch(ref("m/a")) // a is now the most recently used
	present := func() []string {
		ents, _ := os.ReadDir(dir)
		var out []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "models--") {
				out = append(out, strings.TrimPrefix(e.Name(), "models--m--"))
			}
		}
		sort.Strings(out)
		return out
	}
	// d needs 1 MB: b (least recently used, not named) goes.
	c.Sync([]hfcache.Ref{ref("m/d")})
	ready(t, c, ref("m/d"))
	if got := strings.Join(present(), ","); got != "a,c,d" {
		t.Fatalf("after d: %s; want a,c,d (b evicted first)", got)
	}
	// e needs 1.2 MB: c goes; a, used more recently, stays.
	c.Sync([]hfcache.Ref{ref("m/d"), ref("m/e")})
	ready(t, c, ref("m/e"))
	if got := strings.Join(present(), ","); got != "a,d,e" {
		t.Fatalf("after e: %s; want a,d,e (c before a)", got)
	}
	// huge (4 MB) cannot fit beside the named d and e.
	c.Sync([]hfcache.Ref{ref("m/d"), ref("m/e"), ref("m/huge")})
	p := failed(t, c, ref("m/huge"))
	if !strings.Contains(p.Error, "cap (3.5 MB) is too small") {
		t.Fatalf("huge: %q", p.Error)
	}
	if got := strings.Join(present(), ","); got != "d,e" {
		t.Fatalf("after huge: %s; want d,e (a evicted trying, named ones kept)", got)
	}
}

// TestDiskFull: a full disk fails the download with that reason.
func TestDiskFull(t *testing.T) {
	hub := hubtest.New(t)
	hub.Add(hubtest.Repo{ID: "m/big", Files: []hubtest.File{{Path: "w.bin", Data: random(t, 3<<20), LFS: true}}})
	dir := disktest.Tmpfs(t, 1<<20)
	ref := mustRef(t, "https://huggingface.co/m/big")
	c := newCache(t, hub, dir, func(cfg *hfcache.Config) { cfg.MinBackoff = time.Hour })
	c.Sync([]hfcache.Ref{ref})
	if p := failed(t, c, ref); !strings.Contains(p.Error, "disk full") {
		t.Fatalf("reason %q does not say the disk is full", p.Error)
	}
}

// TestBandwidthLimit: the rate limit bounds the transfer (the bytes
// counted by progress never run ahead of the allowance).
func TestBandwidthLimit(t *testing.T) {
	hub := hubtest.New(t)
	hub.Add(hubtest.Repo{ID: "m/slow", Files: []hubtest.File{{Path: "w.bin", Data: random(t, 600_000), LFS: true}}})
	ref := mustRef(t, "https://huggingface.co/m/slow")
	c := newCache(t, hub, filepath.Join(t.TempDir(), "hub"), func(cfg *hfcache.Config) { cfg.BytesPerSecond = 1_000_000 })
	c.Sync([]hfcache.Ref{ref})
	ready(t, c, ref)
	// 600 kB at 1 MB/s with a 1 MB burst is immediate; the point is the
	// limiter does not break a transfer. A tighter limit:
	hub.Add(hubtest.Repo{ID: "m/slower", Files: []hubtest.File{{Path: "w.bin", Data: random(t, 300_000), LFS: true}}})
	ref2 := mustRef(t, "https://huggingface.co/m/slower")
	c2 := newCache(t, hub, filepath.Join(t.TempDir(), "hub"), func(cfg *hfcache.Config) { cfg.BytesPerSecond = 100_000 })
	start := time.Now()
	c2.Sync([]hfcache.Ref{ref2})
	ready(t, c2, ref2)
	// burst 100 kB (the limiter's bucket is at least one 64 kB read): the
	// other 200 kB take ≥ 2 s at 100 kB/s.
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("300 kB at 100 kB/s took %v", d)
	}
}

// TestHuggingfaceHubReadsTheCache: the official huggingface_hub, offline,
// finds the models Berth downloaded — by branch, tag and commit — and
// reads their bytes; and the same library downloading from the test Hub
// lays out exactly the same files and links as Berth did.
func TestHuggingfaceHubReadsTheCache(t *testing.T) {
	lib := clientkit.HubLib(t)
	hub := hubtest.New(t)
	repo := hub.Add(modelRepo(t, "acme/layout", 1<<20, "v1.0"))
	dir := filepath.Join(t.TempDir(), "hub")
	c := newCache(t, hub, dir, nil)
	refs := []hfcache.Ref{mustRef(t, "https://huggingface.co/acme/layout"), mustRef(t, "https://huggingface.co/acme/layout:v1.0"),
		mustRef(t, "https://huggingface.co/acme/layout:"+repo.Commit)}
	c.Sync(refs)
	for _, r := range refs {
		ready(t, c, r)
	}
	script := filepath.Join(t.TempDir(), "read.py")
	if err := os.WriteFile(script, []byte(`
import hashlib, json, os, sys
from huggingface_hub import snapshot_download, hf_hub_download
repo = sys.argv[1]
out = {}
for rev in sys.argv[2:]:
    p = snapshot_download(repo, revision=rev)
    files = {}
    for root, _, names in os.walk(p):
        for n in names:
            full = os.path.join(root, n)
            files[os.path.relpath(full, p)] = hashlib.sha256(open(full, "rb").read()).hexdigest()
    one = hf_hub_download(repo, "tokenizer/vocab.txt", revision=rev)
    out[rev] = {"path": p, "files": files, "vocab": open(one).read()}
print(json.dumps(out))
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := lib.Command(ctx, map[string]string{"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": dir, "HF_HOME": home,
		"HF_HUB_DISABLE_TELEMETRY": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}, script, "acme/layout", "main", "v1.0", repo.Commit)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("huggingface_hub offline: %v\n%s", err, errOut(err))
	}
	var got map[string]struct {
		Path  string
		Files map[string]string
		Vocab string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, rev := range []string{"main", "v1.0", repo.Commit} {
		g := got[rev]
		if g.Path != filepath.Join(dir, "models--acme--layout", "snapshots", repo.Commit) {
			t.Errorf("%s: snapshot path %s", rev, g.Path)
		}
		if len(g.Files) != len(repo.Files) || g.Vocab != "a\nb\nc\n" {
			t.Errorf("%s: files %v, vocab %q", rev, g.Files, g.Vocab)
		}
		for _, f := range repo.Files {
			if g.Files[f.Path] != sum(f.Data) {
				t.Errorf("%s: %s read %s, want %s", rev, f.Path, g.Files[f.Path], sum(f.Data))
			}
		}
	}

	// The library itself, online against the test Hub, into another folder.
	libDir := filepath.Join(t.TempDir(), "hub")
	dl := filepath.Join(t.TempDir(), "dl.py")
	_ = os.WriteFile(dl, []byte("import sys\nfrom huggingface_hub import snapshot_download\nsnapshot_download(sys.argv[1], revision='main')\nsnapshot_download(sys.argv[1], revision='v1.0')\n"), 0o644)
	cmd = lib.Command(ctx, map[string]string{"HF_HUB_CACHE": libDir, "HF_HOME": home, "HF_HUB_DISABLE_TELEMETRY": "1",
		"HF_ENDPOINT": hub.URL, "HF_HUB_DISABLE_XET": "1"}, dl, "acme/layout")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("huggingface_hub downloading from the test Hub: %v\n%s", err, out)
	}
	ours, theirs := tree(t, filepath.Join(dir, "models--acme--layout")), tree(t, filepath.Join(libDir, "models--acme--layout"))
	if len(ours) < 10 || strings.Join(ours, "\n") != strings.Join(theirs, "\n") {
		t.Fatalf("Berth's layout:\n%s\nhuggingface_hub's:\n%s", strings.Join(ours, "\n"), strings.Join(theirs, "\n"))
	}
}

func errOut(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// tree lists a repository folder: each entry with its kind and, for a
// link its target, for a file its sha256.
func tree(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, rel+" -> "+target)
		case d.IsDir():
			out = append(out, rel+"/")
		case strings.HasPrefix(rel, "trees/"):
			// The listing: compared as JSON (the library writes it with Python's spacing).
			var v any
			b, _ := os.ReadFile(p)
			if err := json.Unmarshal(b, &v); err != nil {
				t.Errorf("%s: %v", p, err)
			}
			canon, _ := json.Marshal(v)
			out = append(out, rel+" "+string(canon))
		default:
			b, _ := os.ReadFile(p)
			out = append(out, rel+" "+sum(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}
