package builder

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/internal/gittest"
	"berth/mgmt"
	"berth/queue"
	"berth/store"
)

// ctxImages records the files of each context it is given; a built tag
// is present after.
type ctxImages struct {
	mu      sync.Mutex
	present map[string]bool
	files   map[string][]string // by tag
}

// Push is not reached: these builds have no registry.
func (c *ctxImages) Push(context.Context, string, string, *Login, func(string)) (string, error) {
	return "", errors.New("no registry in these tests")
}

func (c *ctxImages) ImageExists(_ context.Context, ref string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.present[ref], nil
}

func (c *ctxImages) Build(_ context.Context, r io.Reader, s Spec, line func(string)) error {
	tr := tar.NewReader(r)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		names = append(names, h.Name)
	}
	line("Step 1/1 : FROM scratch")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.present[s.Tag], c.files[s.Tag] = true, names
	return nil
}

// testRepo is the builds' repository: a context in app/ with a
// .dockerignore and a sub-directory, served over http.
func testRepo(t *testing.T) (string, string) {
	return gittest.Repo(t, map[string]string{"app/Dockerfile": "FROM scratch\n", "app/.dockerignore": "secret.txt\n", "app/secret.txt": "s3cret",
		"app/sub/x.py": "print(1)\n", "README.md": "r\n"})
}

func gitSetup(t *testing.T, cfg Config, policy queue.WebhookPolicy) (*Service, *mgmt.Service, *ctxImages, store.Endpoint) {
	t.Helper()
	g, err := queue.NewWebhookGuard(policy)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Outbound = g
	s, mg, _, eps := setup(t, cfg)
	imgs := &ctxImages{present: map[string]bool{}, files: map[string][]string{}}
	s.cfg.Images = imgs
	return s, mg, imgs, eps[0]
}

// A git source is cloned at a branch, a tag, a full or abbreviated commit
// (the tip or not), and its context sub-path is tarred honouring its
// .dockerignore; the same commit reuses the image; what cannot be cloned
// fails the build saying why.
func TestGitBuilds(t *testing.T) {
	url, dir := testRepo(t)
	first := gittest.Git(t, dir, "rev-parse", "HEAD")
	gittest.Git(t, dir, "tag", "-a", "v1", "-m", "release one")
	os.WriteFile(filepath.Join(dir, "app", "sub", "x.py"), []byte("print(2)\n"), 0o644)
	gittest.Git(t, dir, "commit", "-q", "-am", "second\n\nbody")
	second := gittest.Git(t, dir, "rev-parse", "HEAD")
	s, mg, imgs, ep := gitSetup(t, Config{}, queue.WebhookPolicy{Allow: []string{"127.0.0.1"}})
	ctx := context.Background()
	submit := func(g mgmt.GitSource) store.Build {
		t.Helper()
		g.URL = url
		if g.ContextPath == "" {
			g.ContextPath = "app"
		}
		b, err := s.SubmitGit(ctx, ep.ID, mgmt.BuildInput{Git: &g})
		if err != nil {
			t.Fatalf("SubmitGit %+v: %v", g, err)
		}
		return waitEnd(t, mg, b)
	}
	b := submit(mgmt.GitSource{Ref: "main"})
	if b.Status != store.BuildCompleted || b.CommitHash != second || b.Branch != "main" || !strings.HasPrefix(b.CommitMessage, "second") || b.CommitDate == nil || b.Source != store.BuildSourceGit {
		t.Fatalf("main: %+v", b)
	}
	files := imgs.files[b.ImageName]
	if want := []string{".dockerignore", "Dockerfile", "sub/", "sub/x.py"}; !slices.Equal(files, want) {
		t.Errorf("the context of app/ at main: %v, want %v (secret.txt ignored)", files, want)
	}
	for _, c := range []struct {
		ref, commit, branch string
	}{{"v1", first, ""}, {first, first, ""}, {first[:9], first, ""}, {"", second, "main"}, {second[:7], second, ""}} {
		b := submit(mgmt.GitSource{Ref: c.ref})
		if b.Status != store.BuildCompleted || b.CommitHash != c.commit || b.Branch != c.branch {
			t.Errorf("ref %q: %s %s %q (%s), want commit %s branch %q", c.ref, b.Status, b.CommitHash, b.Branch, b.Error, c.commit, c.branch)
		}
	}
	// A webhook's pushed commit and branch.
	if b := submit(mgmt.GitSource{Commit: second, Branch: "main"}); b.Status != store.BuildCompleted || b.CommitHash != second || b.Branch != "main" || !b.Reused {
		t.Errorf("a pushed commit: %+v", b)
	}
	again := submit(mgmt.GitSource{Ref: "main"})
	if !again.Reused || again.ImageName != b.ImageName {
		t.Errorf("the same commit again: reused %v, image %s, want %s", again.Reused, again.ImageName, b.ImageName)
	}
	for _, c := range []struct {
		g    mgmt.GitSource
		says string
	}{
		{mgmt.GitSource{Ref: "nope"}, `ref "nope" is not a branch, a tag or a commit of the repository (branches: main)`},
		{mgmt.GitSource{Ref: "abcdef0"}, `ref "abcdef0" is not a branch, a tag or a commit`},
		{mgmt.GitSource{Ref: "main", ContextPath: "missing"}, `git.contextPath "missing" is not a directory`},
		{mgmt.GitSource{Ref: "main", ContextPath: "app/sub"}, "Dockerfile is not a file of the build context"},
	} {
		b := submit(c.g)
		if b.Status != store.BuildFailed || !strings.Contains(b.Error, c.says) {
			t.Errorf("%+v: %s %q, want FAILED saying %q", c.g, b.Status, b.Error, c.says)
		}
	}
}

// Clones obey the outbound policy where they connect and their bounds.
func TestGitBuildLimits(t *testing.T) {
	url, _ := testRepo(t)
	ctx := context.Background()
	// A name the policy cannot judge before it resolves: refused at the dial.
	s, mg, _, ep := gitSetup(t, Config{}, queue.WebhookPolicy{Lookup: func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}})
	named := strings.Replace(url, "127.0.0.1", "repo.test", 1)
	b, err := s.SubmitGit(ctx, ep.ID, mgmt.BuildInput{Git: &mgmt.GitSource{URL: named}})
	if err != nil {
		t.Fatal(err)
	}
	if b = waitEnd(t, mg, b); b.Status != store.BuildFailed || !strings.Contains(b.Error, "loopback") {
		t.Errorf("a name resolving to loopback: %s %q", b.Status, b.Error)
	}
	if _, err := s.SubmitGit(ctx, ep.ID, mgmt.BuildInput{Git: &mgmt.GitSource{URL: url}}); err == nil || !strings.Contains(err.Error(), "loopback") || mgmt.KindOf(err) != mgmt.Invalid {
		t.Errorf("a loopback URL: %v, want refused at submission", err)
	}

	s2, mg2, _, ep2 := gitSetup(t, Config{MaxGitFetchBytes: 2000}, queue.WebhookPolicy{Allow: []string{"127.0.0.1"}})
	b, err = s2.SubmitGit(ctx, ep2.ID, mgmt.BuildInput{Git: &mgmt.GitSource{URL: url, ContextPath: "app"}})
	if err != nil {
		t.Fatal(err)
	}
	if b = waitEnd(t, mg2, b); b.Status != store.BuildFailed || !strings.Contains(b.Error, "the clone read over 2000 bytes") {
		t.Errorf("over the fetch bound: %s %q", b.Status, b.Error)
	}
}

// waitEnd waits for b to end.
func waitEnd(t *testing.T, mg *mgmt.Service, b store.Build) store.Build {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		cur, err := mg.Build(context.Background(), b.EndpointID, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if store.BuildDone(cur.Status) {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("build %s: still %s", b.ID, cur.Status)
		}
		time.Sleep(10 * time.Millisecond) // polling the record, bounded by the deadline
	}
}
