package buildkit

import (
	"context"
	"strings"
	"testing"
	"time"

	bk "github.com/moby/buildkit/client"
	"github.com/moby/buildkit/session/auth"
	digest "github.com/opencontainers/go-digest"
)

// The progress stream becomes lines as buildctl's plain output: a step's
// name once when it starts, its output line by line (a line split over
// two messages joined), DONE, CACHED or ERROR once at its end, an
// export's named statuses once, per-layer statuses not at all.
func TestPrinter(t *testing.T) {
	t0 := time.Unix(100, 0)
	t1 := t0.Add(1500 * time.Millisecond)
	a, b, c := digest.FromString("a"), digest.FromString("b"), digest.FromString("c")
	for _, tc := range []struct {
		name string
		in   []*bk.SolveStatus
		want []string
	}{
		{"a step with output", []*bk.SolveStatus{
			{Vertexes: []*bk.Vertex{{Digest: a, Name: "[1/2] RUN make", Started: &t0}}},
			{Logs: []*bk.VertexLog{{Vertex: a, Data: []byte("comp")}}},
			{Logs: []*bk.VertexLog{{Vertex: a, Data: []byte("iling\nlinking\r\nla")}}},
			{Vertexes: []*bk.Vertex{{Digest: a, Name: "[1/2] RUN make", Started: &t0, Completed: &t1}}},
			{Vertexes: []*bk.Vertex{{Digest: a, Name: "[1/2] RUN make", Started: &t0, Completed: &t1}}},
		}, []string{"#1 [1/2] RUN make", "#1 compiling", "#1 linking", "#1 la", "#1 DONE 1.5s"}},
		{"cached and failed", []*bk.SolveStatus{
			{Vertexes: []*bk.Vertex{{Digest: a, Name: "[1/2] COPY . /"}, {Digest: b, Name: "[2/2] RUN false"}}},
			{Vertexes: []*bk.Vertex{{Digest: a, Name: "[1/2] COPY . /", Cached: true}}},
			{Vertexes: []*bk.Vertex{{Digest: b, Name: "[2/2] RUN false", Started: &t0, Completed: &t1, Error: "exit code: 1"}}},
		}, []string{"#1 [1/2] COPY . /", "#1 CACHED", "#2 [2/2] RUN false", "#2 ERROR: exit code: 1"}},
		{"an export", []*bk.SolveStatus{
			{Vertexes: []*bk.Vertex{{Digest: c, Name: "exporting to image", Started: &t0}}},
			{Statuses: []*bk.VertexStatus{{ID: "pushing layers", Vertex: c, Name: "pushing layers"}, {ID: "sha256:0123", Vertex: c, Name: "sha256:0123"}}},
			{Statuses: []*bk.VertexStatus{{ID: "pushing layers", Vertex: c, Name: "pushing layers", Completed: &t1}}},
		}, []string{"#1 exporting to image", "#1 pushing layers"}},
	} {
		var got []string
		p := newPrinter(func(l string) { got = append(got, l) })
		for _, st := range tc.in {
			p.status(st)
		}
		p.flush()
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// The session hands the login only to the registry it is for.
func TestAuthServerCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, host string
		login      *Login
		user, pass string
	}{
		{"the registry", "reg.example:5000", &Login{"u", "p"}, "u", "p"},
		{"another host", "registry-1.docker.io", &Login{"u", "p"}, "", ""},
		{"anonymous", "reg.example:5000", nil, "", ""},
	} {
		a := &authServer{host: "reg.example:5000", login: tc.login}
		r, err := a.Credentials(context.Background(), &auth.CredentialsRequest{Host: tc.host})
		if err != nil || r.Username != tc.user || r.Secret != tc.pass {
			t.Errorf("%s: %+v %v", tc.name, r, err)
		}
	}
}

// A bad address fails at Connect, naming it.
func TestConnectRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Connect(ctx, "unix://"+t.TempDir()+"/none.sock")
	if err == nil || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("Connect to nothing: %v", err)
	}
}
