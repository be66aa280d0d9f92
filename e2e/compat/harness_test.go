package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth/app"
	"berth/internal/apptest"
	"berth/internal/clientkit"
	"berth/internal/dockertest"
	"berth/internal/proctest"
)

// waitLong bounds every wait for a container-level event (generous: the
// tests run on a loaded machine).
const waitLong = 2 * time.Minute

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.RemoveBuilds()
	if baseRef != "" {
		if err := dockertest.RemoveImage(baseRef); err != nil {
			fmt.Fprintln(os.Stderr, "remove the SDK base image:", err)
		}
	}
	os.Exit(code)
}

// berthBinary is the berth command, built once per test binary (with
// -race when the tests run with it: the server is checked for races too).
func berthBinary(t testing.TB) string { return proctest.Build(t, "berth", true) }

// server is one `berth serve` process on a fresh data directory
// (proctest's: Start again, Stop, Kill, Logs).
type server struct {
	*proctest.Berth
	t    testing.TB
	URL  string // http://127.0.0.1:PORT
	Key  string
	inst string // the runtime's instance label of its containers
}

// startBerth runs `berth serve` with Docker (required: the test skips or
// fails without a daemon), extra serve flags appended. Its containers are
// removed when the test ends.
func startBerth(t testing.TB, extra ...string) *server {
	t.Helper()
	return startBerthEnv(t, nil, extra...)
}

// startBerthEnv is startBerth with variables added to berth serve's
// environment.
func startBerthEnv(t testing.TB, env []string, extra ...string) *server {
	t.Helper()
	dockertest.Require(t)
	data := filepath.Join(t.TempDir(), "data")
	s := &server{t: t, Key: "compat-" + dockertest.Unique(""), inst: app.Instance(data)}
	// Registered first, so it runs last: whatever this Berth left.
	t.Cleanup(func() { apptest.RemoveContainers(t, data) })
	s.Berth = proctest.Start(t, proctest.Options{Data: data, Key: s.Key, Env: env, Race: true,
		Args: append([]string{"--rate-limits", "off"}, extra...)})
	s.URL = s.Base
	return s
}

var httpClient = &http.Client{Timeout: 5 * time.Minute}

// do sends a request with the key and returns the status and body.
func (s *server) do(method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Key)
	req.Header.Set("Content-Type", "application/json")
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// rest sends a request, wants status want and decodes the body into out
// (when not nil).
func (s *server) rest(method, path string, body any, want int, out any) []byte {
	s.t.Helper()
	code, b := s.do(method, path, body)
	if code != want {
		s.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v\n%s", method, path, err, b)
		}
	}
	return b
}

type gqlResponse struct {
	Data   map[string]json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
	Extensions map[string]any `json:"extensions"`
}

// gql posts a GraphQL document.
func (s *server) gql(doc string, vars map[string]any) gqlResponse {
	s.t.Helper()
	code, b := s.do("POST", "/graphql", map[string]any{"query": doc, "variables": vars})
	var r gqlResponse
	if err := json.Unmarshal(b, &r); err != nil || code != http.StatusOK {
		s.t.Fatalf("graphql: status %d: %v\n%s", code, err, b)
	}
	return r
}

// cli runs the berth binary as a client of this server, bounded by
// waitLong.
func (s *server) cli(args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	return s.cliFor(waitLong, args...)
}

// cliFor is cli bounded by d: a deploy's image build on a loaded machine's
// fuse-overlayfs daemon can take minutes.
func (s *server) cliFor(d time.Duration, args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBinary(s.t), args...)
	cmd.Env = append(os.Environ(), "BERTH_URL="+s.URL, "BERTH_API_KEY="+s.Key)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), clientkit.ExitCode(err)
}

// eventually polls cond until it holds or waitLong passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitLong)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podCommand sends one line to a podprog pod's port 8888 and returns the
// answer.
func podCommand(t testing.TB, port int, line string) string {
	t.Helper()
	var answer string
	eventually(t, fmt.Sprintf("pod port %d answers %q", port, line), func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintln(c, line); err != nil {
			return false
		}
		b, err := io.ReadAll(c)
		if err != nil || len(b) == 0 {
			return false // docker-proxy accepts before the program listens
		}
		answer = string(b)
		return true
	})
	return strings.TrimSpace(answer)
}
