package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"berth/internal/dockertest"
)

// lbCall sends a request through the load-balancing proxy (path is
// /lb/ID/… or, with host set, the worker path) with the operator key.
func (s *stack) lbCall(method, path, host, body string, hdr map[string]string) (*http.Response, []byte) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

type echoReply struct {
	Worker, Method, Path, Query, Body, Authorization string
}

// TestLoadBalancingEndpoint runs the HTTP test worker in real containers
// behind a LOAD_BALANCER endpoint: scale from zero on the first request,
// GET/POST by path and by Host, the key not forwarded, streaming,
// WebSocket, the three affinity modes, an unhealthy worker dropped from the
// pool (and replaced), a worker dying mid-request (502 with a reason), and
// scaling back to zero.
func TestLoadBalancingEndpoint(t *testing.T) {
	s := newStack(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/lbworker")
	ep := s.endpoint(image, map[string]string{"PORT": "8000", "LBWORKER_INIT_MS": "1000"},
		map[string]any{"type": "LOAD_BALANCER", "workersMax": 2, "idleTimeout": 2, "scalerValue": 100})
	lb := "/lb/" + ep.ID

	// No key, a queue endpoint: refused before any worker is involved.
	req, _ := http.NewRequest("GET", s.base+lb+"/echo", nil)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 401 {
		t.Fatalf("without a key: %v %v", res, err)
	}
	queueEp := s.endpoint(image, nil, nil)
	if res, b := s.lbCall("GET", "/lb/"+queueEp.ID+"/echo", "", "", nil); res.StatusCode != 400 || !strings.Contains(string(b), "QUEUE") {
		t.Errorf("queue endpoint through /lb: %d %s", res.StatusCode, b)
	}

	// Scale from zero: the first request waits for a healthy worker.
	res, b := s.lbCall("GET", lb+"/echo?x=1", "", "", nil)
	var e echoReply
	json.Unmarshal(b, &e)
	first := res.Header.Get("X-Runpod-Worker-Id")
	if res.StatusCode != 200 || e.Worker == "" || e.Worker != first || e.Path != "/echo" || e.Query != "x=1" || e.Authorization != "" {
		t.Fatalf("first request: %d %s (worker header %q)", res.StatusCode, b, first)
	}
	var h struct {
		Workers struct{ Ready, Idle, Running int }
	}
	var view struct {
		Workers []struct{ ID, State string }
	}
	// The balancer routes as soon as its health check passes and wakes
	// the runtime, whose worker state (what /health and the worker view
	// read) follows at its next pass: wait for that pass, no longer.
	s.eventually("the worker ready in the runtime's view", func() bool {
		h.Workers.Ready, h.Workers.Idle, h.Workers.Running = 0, 0, 0
		s.call("GET", "/v2/"+ep.ID+"/health", nil, 200, &h)
		view.Workers = nil
		s.call("GET", "/v1/endpoints/"+ep.ID+"?includeWorkers=true", nil, 200, &view)
		return h.Workers.Ready == 1 && len(view.Workers) == 1 && view.Workers[0].State != "initializing"
	})
	if h.Workers.Ready != 1 || h.Workers.Idle+h.Workers.Running != 1 || len(view.Workers) != 1 || view.Workers[0].ID != first ||
		(view.Workers[0].State != "idle" && view.Workers[0].State != "running") {
		t.Errorf("/health workers %+v, includeWorkers %+v; want the one worker ready (idle or running)", h.Workers, view.Workers)
	}

	// By Host, with a body.
	res, b = s.lbCall("POST", "/echo/abc", ep.ID+".lb.test", "hello", nil)
	json.Unmarshal(b, &e)
	if res.StatusCode != 200 || e.Method != "POST" || e.Path != "/echo/abc" || e.Body != "hello" {
		t.Errorf("by Host: %d %s", res.StatusCode, b)
	}

	// Streaming: events arrive as the worker writes them.
	sreq, _ := http.NewRequest("GET", s.base+lb+"/stream?n=5&ms=300", nil)
	sreq.Header.Set("Authorization", apiKey)
	sres, err := http.DefaultClient.Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(sres.Body)
	var times []time.Time
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			times = append(times, time.Now())
		}
	}
	sres.Body.Close()
	if len(times) != 5 || times[4].Sub(times[0]) < 600*time.Millisecond {
		t.Errorf("stream: %d events over %v; want 5, spread as sent", len(times), times[len(times)-1].Sub(times[0]))
	}

	// WebSocket through the proxy.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.base, "http")+lb+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + apiKey}}})
	if err != nil {
		t.Fatalf("websocket: %v", err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != first+": hi" {
		t.Errorf("websocket echo %q %v", msg, err)
	}
	c.Close(websocket.StatusNormalClosure, "")

	// Affinity.
	for _, v := range []string{first, "strict " + first, "strict-resume " + first} {
		res, b = s.lbCall("GET", lb+"/echo", "", "", map[string]string{"X-Runpod-Worker-Id": v})
		json.Unmarshal(b, &e)
		if res.StatusCode != 200 || e.Worker != first {
			t.Errorf("affinity %q: %d %s", v, res.StatusCode, b)
		}
	}
	res, _ = s.lbCall("GET", lb+"/echo", "", "", map[string]string{"X-Runpod-Worker-Id": "nosuchworker00"})
	if res.StatusCode != 200 {
		t.Errorf("soft affinity to an unknown worker: %d, want normal routing", res.StatusCode)
	}
	for _, v := range []string{"strict nosuchworker00", "strict-resume nosuchworker00"} {
		res, b = s.lbCall("GET", lb+"/echo", "", "", map[string]string{"X-Runpod-Worker-Id": v})
		if res.StatusCode != 404 || !strings.Contains(string(b), "affinity_worker_gone") {
			t.Errorf("affinity %q: %d %s", v, res.StatusCode, b)
		}
	}

	// The worker turns unhealthy: it leaves the pool, the next request is
	// served by a new worker, and the unhealthy one is replaced.
	s.lbCall("POST", lb+"/health/unhealthy", "", "", nil)
	s.eventually("the unhealthy worker leaves the pool", func() bool {
		for _, w := range s.lb.Health(ep.ID) {
			if w.ID == first {
				return w.Health == "unhealthy"
			}
		}
		return true
	})
	res, b = s.lbCall("GET", lb+"/echo", "", "", nil)
	json.Unmarshal(b, &e)
	second := e.Worker
	if res.StatusCode != 200 || second == first || second == "" {
		t.Fatalf("after the worker turned unhealthy: %d %s", res.StatusCode, b)
	}
	s.eventually("the unhealthy worker is stopped", func() bool {
		for _, w := range s.sup.Workers(ep.ID) {
			if w.WorkerID == first {
				return false
			}
		}
		return true
	})

	// A worker that dies mid-request: 502 with the reason.
	res, b = s.lbCall("GET", lb+"/crash", "", "", nil)
	if res.StatusCode != 502 || !strings.Contains(string(b), "worker_failed") || !strings.Contains(string(b), second) {
		t.Errorf("crash: %d %s", res.StatusCode, b)
	}

	// Idle: back to zero workers.
	s.eventually("scaled back to zero", func() bool { return len(s.sup.Workers(ep.ID)) == 0 })
}
