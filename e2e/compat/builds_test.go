package compat

import (
	"archive/tar"
	"bytes"
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
)

// build is the builds API's view of a build.
type build struct {
	ID             string
	Status         string
	ImageName      string
	Error          *string
	Reused         bool
	ReleaseVersion *int
}

type release struct {
	ID      string
	Version int
	Source  string
	BuildID *string
}

// runsync runs one job through /runsync, polling its status while the
// worker starts, and returns its output.
func (s *server) runsync(t testing.TB, epID string, input any) json.RawMessage {
	t.Helper()
	var job struct {
		ID     string
		Status string
		Output json.RawMessage
		Error  any
	}
	s.rest("POST", "/v2/"+epID+"/runsync", map[string]any{"input": input}, 200, &job)
	deadline := time.Now().Add(waitLong)
	for job.Status != "COMPLETED" {
		if job.Status == "FAILED" || job.Status == "CANCELLED" || job.Status == "TIMED_OUT" || time.Now().After(deadline) {
			t.Fatalf("job %s: %s %v", job.ID, job.Status, job.Error)
		}
		time.Sleep(200 * time.Millisecond) // polling a job's status, bounded by the deadline
		s.rest("GET", "/v2/"+epID+"/status/"+job.ID, nil, 200, &job)
	}
	return job.Output
}

func (s *server) builds(t testing.TB, epID string) []build {
	t.Helper()
	var list struct{ Builds []build }
	s.rest("GET", "/v2/serverless/"+epID+"/builds", nil, 200, &list)
	return list.Builds
}

// removeBuiltImages removes, when the test ends (before its Berth stops),
// the images the builds of the endpoint *id made: a later run would
// otherwise find them and build nothing.
func removeBuiltImages(t testing.TB, s *server, id *string) {
	t.Cleanup(func() {
		if *id == "" {
			return
		}
		code, b := s.do("GET", "/v2/serverless/"+*id+"/builds", nil)
		var list struct{ Builds []build }
		if code != 200 || json.Unmarshal(b, &list) != nil {
			t.Errorf("list builds to remove their images: %d %s", code, b)
			return
		}
		seen := map[string]bool{}
		for _, bd := range list.Builds {
			// A TEST_FAILED build made its image too.
			if (bd.Status == "COMPLETED" || bd.Status == "TEST_FAILED") && !seen[bd.ImageName] {
				seen[bd.ImageName] = true
				if err := dockertest.RemoveImage(bd.ImageName); err != nil {
					t.Errorf("remove %s: %v", bd.ImageName, err)
				}
			}
		}
	})
}

// TestDeployFromInit is the path from nothing to a job: `berth init`
// writes a runpod-python worker, `berth deploy` builds it on Berth (from
// the local SDK base image: nothing is pulled) and rolls the endpoint
// onto it; a one-line change deploys as a new release answered by a new
// worker; the same source again builds nothing; a failing Dockerfile
// fails naming its step and leaves the old release serving.
func TestDeployFromInit(t *testing.T) {
	base := sdkBaseImage(t)
	s := startBerth(t)
	dir := filepath.Join(t.TempDir(), "hello")
	if _, errOut, code := s.cli("init", dir); code != 0 {
		t.Fatalf("berth init: exit %d: %s", code, errOut)
	}
	for _, f := range []string{"handler.py", "Dockerfile", "test_input.json", "README.md", "requirements.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("berth init wrote no %s: %v", f, err)
		}
	}
	if _, _, code := s.cli("init", dir); code != 2 {
		t.Errorf("berth init over an existing worker: exit %d, want 2 (nothing overwritten)", code)
	}
	var id string
	removeBuiltImages(t, s, &id)
	name := dockertest.Unique("hello-") // the image name follows it: runs do not share images
	args := []string{"deploy", dir, "--name", name, "--compute-type", "CPU", "--idle-timeout", "60",
		"--build-arg", "BASE_IMAGE=" + base, "--build-arg", "PIP_INSTALL=no"}
	deploy := func(want int, extra ...string) (map[string]any, string) {
		t.Helper()
		out, errOut, code := s.cli(append(append([]string{}, args...), extra...)...)
		if code != want {
			t.Fatalf("berth deploy: exit %d, want %d\nstdout: %s\nstderr: %s", code, want, out, errOut)
		}
		var ep map[string]any
		if want == 0 {
			if err := json.Unmarshal([]byte(out), &ep); err != nil {
				t.Fatalf("berth deploy -o json: %v: %s", err, out)
			}
		}
		return ep, errOut
	}

	ep, errOut := deploy(0, "-o", "json")
	id, _ = ep["id"].(string)
	if id == "" || !strings.Contains(errOut, "Step 1/") {
		t.Fatalf("berth deploy: endpoint %v, log without the build's steps:\n%s", ep, errOut)
	}
	greet := func(want string) {
		t.Helper()
		out := s.runsync(t, id, map[string]any{"name": "Berth"})
		var o struct{ Greeting string }
		if json.Unmarshal(out, &o); o.Greeting != want {
			t.Fatalf("runsync output %s, want greeting %q", out, want)
		}
	}
	greet("Hello, Berth!")
	bs := s.builds(t, id)
	if len(bs) != 1 || bs[0].Status != "COMPLETED" || !strings.HasPrefix(bs[0].ImageName, "berth/"+name+":") || bs[0].ReleaseVersion == nil {
		t.Fatalf("builds after the first deploy: %+v", bs)
	}
	first := bs[0]
	releases := func() []release {
		var rl struct{ Releases []release }
		s.rest("GET", "/v2/serverless/"+id+"/releases", nil, 200, &rl)
		return rl.Releases
	}
	if rs := releases(); rs[0].Source != "GIT_BUILD" || rs[0].BuildID == nil || *rs[0].BuildID != first.ID || rs[0].Version != *first.ReleaseVersion {
		t.Fatalf("the newest release %+v is not the build %s's", rs[0], first.ID)
	}

	// A one-line change: a new build, a new release, a new worker answers.
	h := filepath.Join(dir, "handler.py")
	src, _ := os.ReadFile(h)
	os.WriteFile(h, bytes.Replace(src, []byte(`f"Hello, {name}!"`), []byte(`f"Hi, {name}!"`), 1), 0o644)
	if _, errOut := deploy(0); !strings.Contains(errOut, "release v") {
		t.Fatalf("second deploy made no release:\n%s", errOut)
	}
	greet("Hi, Berth!")
	bs = s.builds(t, id)
	second := bs[0]
	if len(bs) != 2 || second.ImageName == first.ImageName || *second.ReleaseVersion <= *first.ReleaseVersion {
		t.Fatalf("builds after the change: %+v", bs)
	}

	// The same source again: the image is reused, nothing is built, no release.
	_, errOut = deploy(0)
	bs = s.builds(t, id)
	if len(bs) != 3 || !bs[0].Reused || bs[0].ImageName != second.ImageName || bs[0].ReleaseVersion != nil || strings.Contains(errOut, "Step 1/") {
		t.Fatalf("the same source deployed again: builds %+v\n%s", bs, errOut)
	}
	if rs := releases(); rs[0].Version != *second.ReleaseVersion {
		t.Errorf("the same source made a release: %+v", rs[0])
	}

	// A failing Dockerfile: FAILED naming the step, the old release serves on.
	df := filepath.Join(dir, "Dockerfile")
	good, _ := os.ReadFile(df)
	os.WriteFile(df, append(append([]byte{}, good...), []byte("RUN echo about to fail && exit 3\n")...), 0o644)
	_, errOut = deploy(1)
	bs = s.builds(t, id)
	if bs[0].Status != "FAILED" || bs[0].Error == nil || !strings.Contains(*bs[0].Error, "RUN echo about to fail && exit 3") ||
		!strings.Contains(*bs[0].Error, "about to fail") || !strings.Contains(errOut, "exit 3") {
		t.Fatalf("a failing build: %+v\n%s", bs[0], errOut)
	}
	if rs := releases(); rs[0].Version != *second.ReleaseVersion {
		t.Errorf("a failed build made a release: %+v", rs[0])
	}
	greet("Hi, Berth!")
	os.WriteFile(df, good, 0o644)

	// Rollback: to the newest earlier build (the first), then to a version.
	if out, errOut, code := s.cli("endpoint", "rollback", name); code != 0 {
		t.Fatalf("rollback: exit %d\n%s\n%s", code, out, errOut)
	}
	greet("Hello, Berth!")
	if rs := releases(); rs[0].Source != "GIT_BUILD" || rs[0].BuildID == nil || *rs[0].BuildID != first.ID || rs[0].Version <= *second.ReleaseVersion {
		t.Errorf("the rollback's release %+v: want a new one naming build %s", rs[0], first.ID)
	}
	if _, errOut, code := s.cli("endpoint", "rollback", name, "--to", strconv.Itoa(*second.ReleaseVersion)); code != 0 {
		t.Fatalf("rollback --to: exit %d\n%s", code, errOut)
	}
	greet("Hi, Berth!")
	for _, c := range []struct {
		to   string
		code int
		says string
	}{{"1", 1, "not made by a build"}, {"999", 3, "no release v999"}, {strconv.Itoa(*second.ReleaseVersion), 1, "already runs"}} {
		if _, errOut, code := s.cli("endpoint", "rollback", name, "--to", c.to); code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("rollback --to %s: exit %d %s, want %d saying %q", c.to, code, errOut, c.code, c.says)
		}
	}

	// Its log, as the worker logs are read.
	code, b := s.do("GET", "/v2/serverless/"+id+"/builds/"+bs[0].ID+"/logs?follow=false", nil)
	if code != 200 || !strings.Contains(string(b), `"source":"build"`) || !strings.Contains(string(b), "Step ") {
		t.Errorf("build log: %d %.500s", code, b)
	}
}

// contextTar is a tar of files (name → content).
func contextTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return buf.Bytes()
}

// postBuild uploads a context to the builds API.
func (s *server) postBuild(t *testing.T, epID, query, contentType string, body io.Reader) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+"/v2/serverless/"+epID+"/builds"+query, body)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	req.Header.Set("Content-Type", contentType)
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// TestBuildsAPI: the builds routes' answers and refusals, and a build cut
// by a restart of Berth (killed, so nothing ran at its stop) is FAILED
// saying so, never left BUILDING.
func TestBuildsAPI(t *testing.T) {
	base := sdkBaseImage(t)
	s := startBerth(t, "--build-max-context", "1")
	var tpl, ep struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": "api", "imageName": base, "isServerless": true}, 200, &tpl)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "api", "templateId": tpl.ID, "computeType": "CPU", "workersMax": 1}, 200, &ep)
	ok := contextTar(t, map[string]string{"Dockerfile": "FROM " + base + "\nRUN sleep 600\n"})
	for _, c := range []struct {
		name, query, ct string
		body            []byte
		code            int
		words           []string
	}{
		{"not a tar", "", "application/x-tar", []byte("hello"), 400, []string{"tar"}},
		{"wrong content type", "", "text/plain", ok, 400, []string{"application/x-tar", "application/json"}},
		{"dockerfile leaving the tree", "?dockerfile=../Dockerfile", "application/x-tar", ok, 400, []string{"dockerfile", "leaves the source tree"}},
		{"entry leaving the tree", "", "application/x-tar", contextTar(t, map[string]string{"Dockerfile": "FROM x\n", "../evil": "x"}), 400, []string{"leaves the source tree"}},
		{"no dockerfile", "?dockerfile=other/Dockerfile", "application/x-tar", ok, 400, []string{"other/Dockerfile"}},
		{"bad build arg", "?buildArg=NOEQUALS", "application/x-tar", ok, 400, []string{"buildArg"}},
		{"unknown parameter", "?context=x", "application/x-tar", ok, 400, []string{"context"}},
		{"too big", "", "application/x-tar", contextTar(t, map[string]string{"Dockerfile": "FROM x\n", "big": strings.Repeat("x", 2<<20)}), 413, []string{"1 MiB"}},
	} {
		code, b := s.postBuild(t, ep.ID, c.query, c.ct, bytes.NewReader(c.body))
		if code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, b, c.code)
			continue
		}
		for _, w := range c.words {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s: %s does not say %q", c.name, b, w)
			}
		}
	}
	if bs := s.builds(t, ep.ID); len(bs) != 0 {
		t.Fatalf("refused uploads made builds: %+v", bs)
	}
	if code, b := s.postBuild(t, "nosuchendpoint", "", "application/x-tar", bytes.NewReader(ok)); code != 404 {
		t.Errorf("a build of an unknown endpoint: %d %s", code, b)
	}
	for _, p := range []string{"/builds/build_nosuch", "/builds/build_nosuch/logs"} {
		if code, b := s.do("GET", "/v2/serverless/"+ep.ID+p, nil); code != 404 {
			t.Errorf("GET %s: %d %s, want 404", p, code, b)
		}
	}

	// A long build, cancelled; then another cut by a restart.
	code, body := s.postBuild(t, ep.ID, "?buildArg=A=1", "application/x-tar", bytes.NewReader(ok))
	var b build
	if json.Unmarshal(body, &b); code != 202 || b.Status != "PENDING" {
		t.Fatalf("create build: %d %s", code, body)
	}
	waitStatus := func(id, want string) build {
		t.Helper()
		var cur build
		eventually(t, "build "+id+" "+want, func() bool {
			s.rest("GET", "/v2/serverless/"+ep.ID+"/builds/"+id, nil, 200, &cur)
			return cur.Status == want
		})
		return cur
	}
	waitStatus(b.ID, "BUILDING")
	eventually(t, "the build's log at its RUN step", func() bool {
		_, log := s.do("GET", "/v2/serverless/"+ep.ID+"/builds/"+b.ID+"/logs?follow=false", nil)
		return strings.Contains(string(log), "RUN sleep 600")
	})
	var cancelled build
	s.rest("POST", "/v2/serverless/"+ep.ID+"/builds/"+b.ID+"/cancel", nil, 200, &cancelled)
	if cancelled.Status != "CANCELLED" || cancelled.Error == nil || !strings.Contains(*cancelled.Error, "RUN sleep 600") {
		t.Fatalf("cancel: %+v", cancelled)
	}

	code, body = s.postBuild(t, ep.ID, "?buildArg=A=2", "application/x-tar", bytes.NewReader(ok))
	if json.Unmarshal(body, &b); code != 202 {
		t.Fatalf("create build: %d %s", code, body)
	}
	waitStatus(b.ID, "BUILDING")
	s.Kill()
	s.Start()
	cut := waitStatus(b.ID, "FAILED")
	if cut.Error == nil || !strings.Contains(*cut.Error, "Berth restarted while the build was BUILDING") {
		t.Errorf("a build cut by a restart: %+v", cut)
	}

	// The list, newest first, a page at a time.
	var page struct {
		Builds     []build
		Pagination struct {
			NextCursor  *string
			HasNextPage bool
		}
	}
	s.rest("GET", "/v2/serverless/"+ep.ID+"/builds?limit=1", nil, 200, &page)
	if len(page.Builds) != 1 || page.Builds[0].ID != b.ID || !page.Pagination.HasNextPage || page.Pagination.NextCursor == nil {
		t.Fatalf("first page: %+v", page)
	}
	s.rest("GET", "/v2/serverless/"+ep.ID+"/builds?limit=1&cursor="+*page.Pagination.NextCursor, nil, 200, &page)
	if len(page.Builds) != 1 || page.Builds[0].ID != cancelled.ID || page.Pagination.HasNextPage {
		t.Fatalf("second page: %+v", page)
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?cursor=build_nosuch"} {
		if code, b := s.do("GET", "/v2/serverless/"+ep.ID+"/builds"+q, nil); code != 400 {
			t.Errorf("GET builds%s: %d %s, want 400", q, code, b)
		}
	}
}

// TestDeployLoadBalancer: `berth init --lb` is a load-balancing worker
// that `berth deploy --type LOAD_BALANCER` builds and runs; a request
// through the balancer reaches the built server.
func TestDeployLoadBalancer(t *testing.T) {
	base := sdkBaseImage(t)
	s := startBerth(t)
	dir := filepath.Join(t.TempDir(), dockertest.Unique("lb-"))
	if _, errOut, code := s.cli("init", "--lb", dir); code != 0 {
		t.Fatalf("berth init --lb: exit %d: %s", code, errOut)
	}
	var id string
	removeBuiltImages(t, s, &id)
	out, errOut, code := s.cli("deploy", dir, "--type", "LOAD_BALANCER", "--compute-type", "CPU", "-o", "id",
		"--build-arg", "BASE_IMAGE="+base, "--build-arg", "PIP_INSTALL=no")
	id = strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("berth deploy --type LOAD_BALANCER: exit %d, id %q\n%s", code, id, errOut)
	}
	body, _ := os.ReadFile(filepath.Join(dir, "test_input.json"))
	req, _ := http.NewRequest("POST", s.URL+"/lb/"+id+"/greet", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.Key)
	res, err := httpClient.Do(req) // scales from zero: waits for the built worker
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.Contains(string(b), `"greeting": "Hello, Berth!"`) {
		t.Fatalf("POST /lb/%s/greet: %d %s", id, res.StatusCode, b)
	}
}

// BenchmarkDeployChange: `berth deploy` of a one-line handler change with
// the build cache warm, from the command's start to the first job
// answered by the new release (the endpoint keeps one worker, so the
// rollout replaces a running worker). Reported: s/deploy (the whole
// path), build-s (the build's share, from its record), and the deploy
// command's own time.
//
//	go test ./compat -run '^$' -bench BenchmarkDeployChange -benchtime 5x
func BenchmarkDeployChange(b *testing.B) {
	base := sdkBaseImage(b)
	s := startBerth(b)
	dir := filepath.Join(b.TempDir(), dockertest.Unique("bench-"))
	if _, errOut, code := s.cli("init", dir); code != 0 {
		b.Fatalf("init: %s", errOut)
	}
	var id string
	removeBuiltImages(b, s, &id)
	args := []string{"deploy", dir, "--compute-type", "CPU", "--workers-min", "1", "-o", "id",
		"--build-arg", "BASE_IMAGE=" + base, "--build-arg", "PIP_INSTALL=no"}
	out, errOut, code := s.cliLong(args...)
	if code != 0 {
		b.Fatalf("first deploy: %s", errOut)
	}
	id = strings.TrimSpace(out)
	h := filepath.Join(dir, "handler.py")
	src, _ := os.ReadFile(h)
	var build, command time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		want := "Hello " + strconv.Itoa(i)
		os.WriteFile(h, bytes.Replace(src, []byte(`f"Hello, {name}!"`), []byte(`f"`+want+`, {name}!"`), 1), 0o644)
		start := time.Now()
		if _, errOut, code := s.cliLong(args...); code != 0 {
			b.Fatalf("deploy: %s", errOut)
		}
		command += time.Since(start)
		var o struct{ Greeting string }
		if out := s.runsync(b, id, map[string]any{"name": "x"}); json.Unmarshal(out, &o) != nil || o.Greeting != want+", x!" {
			b.Fatalf("job after deploy %d: %s", i, out)
		}
		var list struct {
			Builds []struct{ StartedAt, CompletedAt time.Time }
		}
		s.rest("GET", "/v2/serverless/"+id+"/builds?limit=1", nil, 200, &list)
		build += list.Builds[0].CompletedAt.Sub(list.Builds[0].StartedAt)
	}
	b.StopTimer()
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/deploy")
	b.ReportMetric(build.Seconds()/float64(b.N), "build-s")
	b.ReportMetric(command.Seconds()/float64(b.N), "command-s")
}
