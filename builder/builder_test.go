package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/mgmt"
	"berth/store"
)

// fakeImages stands in for the Docker daemon behind Images: each build
// blocks until the test releases it (or its context ends), so the test
// sees what runs at once.
type fakeImages struct {
	mu      sync.Mutex
	present map[string]bool
	running map[string]chan error // by tag
	started chan string
	builds  int
	// The registry behind Push: pushErr refuses; pushed records what
	// came, by remote name, with the login used.
	pushErr error
	pushed  map[string]*Login
}

func newFakeImages() *fakeImages {
	return &fakeImages{present: map[string]bool{}, running: map[string]chan error{}, started: make(chan string, 16)}
}

func (f *fakeImages) ImageExists(_ context.Context, ref string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.present[ref], nil
}

func (f *fakeImages) Build(ctx context.Context, r io.Reader, s Spec, line func(string)) error {
	io.Copy(io.Discard, r)
	done := make(chan error, 1)
	f.mu.Lock()
	f.running[s.Tag] = done
	f.builds++
	f.mu.Unlock()
	line("Step 1/2 : FROM base")
	line("Step 2/2 : RUN make")
	f.started <- s.Tag
	select {
	case err := <-done:
		if err == nil {
			f.mu.Lock()
			f.present[s.Tag] = true
			f.mu.Unlock()
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeImages) Push(_ context.Context, local, remote string, login *Login, line func(string)) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.present[local] {
		return "", errors.New("no such image " + local)
	}
	if f.pushErr != nil {
		return "", f.pushErr
	}
	if f.pushed == nil {
		f.pushed = map[string]*Login{}
	}
	f.pushed[remote] = login
	line("pushed")
	return "sha256:" + strings.Repeat("ab", 32), nil
}

func (f *fakeImages) finish(tag string, err error) {
	f.mu.Lock()
	ch := f.running[tag]
	f.mu.Unlock()
	ch <- err
}

func setup(t *testing.T, cfg Config) (*Service, *mgmt.Service, *fakeImages, []store.Endpoint) {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mg := mgmt.New(mgmt.Config{Store: db})
	var eps []store.Endpoint
	for _, n := range []string{"one", "two", "three"} {
		name, img, cpu := n, "base:1", "CPU"
		e, err := mg.CreateEndpointWith(context.Background(), mgmt.EndpointInput{Name: &name, ComputeType: &cpu},
			mgmt.EndpointOptions{Template: &mgmt.TemplateInput{ImageName: &img}})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, e)
	}
	f := newFakeImages()
	cfg.Records, cfg.Images, cfg.Dir = mg, f, filepath.Join(t.TempDir(), "builds")
	s := New(cfg)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, mg, f, eps
}

func tarOf(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, b := range files {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write([]byte(b))
	}
	tw.Close()
	return buf.Bytes()
}

func waitStatus(t *testing.T, mg *mgmt.Service, b store.Build, want string) store.Build {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cur, err := mg.Build(context.Background(), b.EndpointID, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Status == want {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("build %s: %s, want %s", b.ID, cur.Status, want)
		}
		time.Sleep(5 * time.Millisecond) // polling the record, bounded by the deadline
	}
}

// One build at a time per endpoint and MaxConcurrent in all; the rest
// wait PENDING and start, oldest first, as slots free.
func TestSchedulingBounds(t *testing.T) {
	s, mg, f, eps := setup(t, Config{MaxConcurrent: 2})
	submit := func(ep store.Endpoint, body string) store.Build {
		b, err := s.Submit(context.Background(), ep.ID, Options{}, bytes.NewReader(tarOf(t, map[string]string{"Dockerfile": body})))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a1 := submit(eps[0], "a1")
	a2 := submit(eps[0], "a2") // same endpoint: waits for a1
	b1 := submit(eps[1], "b1")
	c1 := submit(eps[2], "c1") // the global limit: waits
	first := map[string]bool{<-f.started: true, <-f.started: true}
	if !first[a1.ImageName] || !first[b1.ImageName] {
		t.Fatalf("started %v, want a1 and b1", first)
	}
	waitStatus(t, mg, a2, store.BuildPending)
	waitStatus(t, mg, c1, store.BuildPending)
	f.finish(a1.ImageName, nil)
	waitStatus(t, mg, a1, store.BuildCompleted)
	// a1's slot: a2 is older than c1 but also a1's endpoint's, now free.
	if got := <-f.started; got != a2.ImageName {
		t.Fatalf("after a1, %s started, want a2", got)
	}
	f.finish(b1.ImageName, errors.New("boom"))
	if got := <-f.started; got != c1.ImageName {
		t.Fatalf("after b1, %s started, want c1", got)
	}
	failed := waitStatus(t, mg, b1, store.BuildFailed)
	if !strings.Contains(failed.Error, `"Step 2/2 : RUN make" failed: boom`) || !strings.Contains(failed.Error, "Step 1/2") {
		t.Errorf("failed build's error %q: want the step and the last lines", failed.Error)
	}
	f.finish(a2.ImageName, nil)
	f.finish(c1.ImageName, nil)
	waitStatus(t, mg, c1, store.BuildCompleted)
	done := waitStatus(t, mg, a2, store.BuildCompleted)
	rels, _ := mg.Releases(context.Background(), eps[0].ID)
	last := rels[len(rels)-1]
	if last.Source != mgmt.ReleaseGitBuild || last.BuildID != a2.ID || done.ReleaseVersion != last.Version {
		t.Errorf("endpoint one's last release %+v, build %+v", last, done)
	}
}

// The same source again reuses the image: no build runs, no release.
func TestSameSourceBuildsOnce(t *testing.T) {
	s, mg, f, eps := setup(t, Config{})
	ctx := []byte(tarOf(t, map[string]string{"Dockerfile": "FROM x"}))
	b1, _ := s.Submit(context.Background(), eps[0].ID, Options{}, bytes.NewReader(ctx))
	f.finish(<-f.started, nil)
	b1 = waitStatus(t, mg, b1, store.BuildCompleted)
	b2, _ := s.Submit(context.Background(), eps[0].ID, Options{}, bytes.NewReader(ctx))
	b2 = waitStatus(t, mg, b2, store.BuildCompleted)
	if !b2.Reused || b2.ImageName != b1.ImageName || b2.ReleaseVersion != 0 || f.builds != 1 {
		t.Errorf("second build %+v after %+v: %d builds ran", b2, b1, f.builds)
	}
	b3, _ := s.Submit(context.Background(), eps[0].ID, Options{BuildArgs: map[string]string{"A": "1"}}, bytes.NewReader(ctx))
	if b3.ImageName == b1.ImageName {
		t.Errorf("other build args, same image name %s", b3.ImageName)
	}
}

// The build step's time limit fails the build naming the step; cancel
// ends a running build CANCELLED.
func TestTimeoutAndCancel(t *testing.T) {
	s, mg, f, eps := setup(t, Config{StepTimeout: 50 * time.Millisecond})
	b, _ := s.Submit(context.Background(), eps[0].ID, Options{}, bytes.NewReader(tarOf(t, map[string]string{"Dockerfile": "x"})))
	<-f.started
	got := waitStatus(t, mg, b, store.BuildFailed)
	if !strings.Contains(got.Error, "maximum time limit") || !strings.Contains(got.Error, "RUN make") {
		t.Errorf("timed-out build's error %q", got.Error)
	}
	s2, mg2, f2, eps2 := setup(t, Config{})
	b, _ = s2.Submit(context.Background(), eps2[0].ID, Options{}, bytes.NewReader(tarOf(t, map[string]string{"Dockerfile": "x"})))
	<-f2.started
	c, err := s2.Cancel(context.Background(), eps2[0].ID, b.ID)
	if err != nil || c.Status != store.BuildCancelled || !strings.Contains(c.Error, "RUN make") {
		t.Errorf("cancel: %+v %v", c, err)
	}
	_ = mg2
}

// An upload over the limit is refused before anything is recorded.
func TestContextLimit(t *testing.T) {
	s, mg, _, eps := setup(t, Config{MaxContextBytes: 10 << 10})
	_, err := s.Submit(context.Background(), eps[0].ID, Options{}, bytes.NewReader(tarOf(t, map[string]string{"Dockerfile": "x", "big": strings.Repeat("x", 20<<10)})))
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("over the limit: %v, want TooLargeError", err)
	}
	if bs, _ := mg.Builds(context.Background(), eps[0].ID); len(bs) != 0 {
		t.Errorf("a refused upload made builds: %+v", bs)
	}
}

// The log keeps its start and its newest lines within its cap; a
// follower reads what is there, then each line as it comes, to the end.
func TestLogCap(t *testing.T) {
	l := newLogBuffer(100)
	r := l.reader(true)
	for i := 0; i < 50; i++ {
		l.line("line " + strings.Repeat("x", i%5))
	}
	b := l.bytes()
	if len(b) > 140 || !strings.HasPrefix(string(b), "line \n") || !strings.Contains(string(b), "bytes of log cut") || !strings.HasSuffix(string(b), "line xxxx\n") {
		t.Errorf("capped log %q", b)
	}
	l.close()
	all, err := io.ReadAll(r)
	if err != nil || !strings.HasPrefix(string(all), "line \n") || !strings.HasSuffix(string(all), "line xxxx\n") {
		t.Errorf("follower read %q %v", all, err)
	}
}

// With a registry, a built image is pushed (UPLOADING) with the stored
// registry auth named, and the release runs the pushed reference by
// digest with that auth; a refused push is FAILED with the registry's
// error and the template is left as it was.
func TestRegistryPush(t *testing.T) {
	s, mg, f, eps := setup(t, Config{Registry: "reg.example:5000/team", RegistryAuth: "ci"})
	src := bytes.NewReader(tarOf(t, map[string]string{"Dockerfile": "FROM x"}))
	b, _ := s.Submit(context.Background(), eps[0].ID, Options{}, src)
	f.finish(<-f.started, nil)
	failed := waitStatus(t, mg, b, store.BuildFailed)
	if !strings.Contains(failed.Error, `no container registry auth named "ci"`) {
		t.Errorf("push without the named auth: %q", failed.Error)
	}
	name, user, pass := "ci", "u", "p"
	auth, err := mg.CreateRegistryAuth(context.Background(), mgmt.RegistryAuthInput{Name: &name, Username: &user, Password: &pass})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.pushErr = errors.New("unauthorized: authentication required")
	f.mu.Unlock()
	b, _ = s.Submit(context.Background(), eps[0].ID, Options{}, bytes.NewReader(tarOf(t, map[string]string{"Dockerfile": "FROM x"})))
	failed = waitStatus(t, mg, b, store.BuildFailed)
	if !strings.Contains(failed.Error, "push to reg.example:5000/team failed: unauthorized: authentication required") {
		t.Errorf("refused push: %q", failed.Error)
	}
	tmplImage := func() store.Template {
		es, ts, err := mg.Endpoints(context.Background(), eps[0].ID, true)
		if err != nil {
			t.Fatal(err)
		}
		return ts[es[0].TemplateID]
	}
	if tm := tmplImage(); tm.ImageName != "base:1" {
		t.Errorf("a failed push changed the template's image to %s", tm.ImageName)
	}
	f.mu.Lock()
	f.pushErr = nil
	f.mu.Unlock()
	b, _ = s.Submit(context.Background(), eps[0].ID, Options{}, bytes.NewReader(tarOf(t, map[string]string{"Dockerfile": "FROM x"})))
	done := waitStatus(t, mg, b, store.BuildCompleted)
	remote := "reg.example:5000/team/" + strings.TrimPrefix(done.ImageName, "berth/")
	want := remote[:strings.LastIndex(remote, ":")] + "@sha256:" + strings.Repeat("ab", 32)
	if done.PushedImage != want || done.ImageDigest != "sha256:"+strings.Repeat("ab", 32) || done.RegistryAuthID != auth.ID || done.ReleaseVersion == 0 {
		t.Errorf("pushed build %+v, want %s", done, want)
	}
	if l := f.pushed[remote]; l == nil || l.Username != "u" || l.Password != "p" {
		t.Errorf("pushed %v", f.pushed)
	}
	if tm := tmplImage(); tm.ImageName != want || tm.ContainerRegistryAuthID != auth.ID {
		t.Errorf("template after the push: %s with auth %q", tm.ImageName, tm.ContainerRegistryAuthID)
	}
}

func TestCheckRegistry(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"127.0.0.1:5000", true}, {"registry.example.com/berth/team", true}, {"localhost:5000/x", true},
		{"", false}, {"berth", false}, {"user/repo", false}, {"reg.example.com/UPPER", false}, {"reg.example.com/x@sha256:00", false},
	} {
		if err := CheckRegistry(c.in); (err == nil) != c.ok {
			t.Errorf("CheckRegistry(%q) = %v, want ok %v", c.in, err, c.ok)
		}
	}
}
