package lbproxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"berth/store"
)

// inProcess is a Balancer in front of one in-process worker server.
func inProcess(t *testing.T, h http.Handler, mod func(*Config)) (front string, lb *Balancer, workerID string) {
	t.Helper()
	worker := httptest.NewServer(h)
	t.Cleanup(worker.Close)
	host, port, _ := net.SplitHostPort(worker.Listener.Addr().String())
	ep := store.Endpoint{ID: "testendpoint01", Type: store.EndpointLoadBalancer, ScalerValue: 4}
	cfg := Config{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Endpoint: func(id string) (store.Endpoint, error) { return ep, nil },
		WorkerNet: func(context.Context, string) (WorkerNet, error) {
			return WorkerNet{IP: host, Env: map[string]string{"PORT": port}}, nil
		},
		Authorize: func(r *http.Request, _ string) (int, string) {
			if r.Header.Get("Authorization") == "Bearer k" {
				return 0, ""
			}
			return http.StatusUnauthorized, "missing or invalid API key"
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	lb = New(cfg)
	t.Cleanup(lb.Stop)
	reg, err := lb.Queue(nopQueue{}).RegisterWorker(ep.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	lb.probeAll()
	srv := httptest.NewServer(lb.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	return srv.URL + "/lb/" + ep.ID, lb, reg.WorkerID
}

func call(t *testing.T, method, url, body string, hdr map[string]string) (int, map[string]string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]string
	json.Unmarshal(b, &m)
	if m == nil {
		m = map[string]string{"body": string(b)}
	}
	return res.StatusCode, m, res.Header
}

func TestProxyLimitsAndErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/auth", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Header.Get("Authorization")) })
	mux.HandleFunc("/sink", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2048")
		w.Write(make([]byte, 2048))
	})
	url, _, wid := inProcess(t, mux, func(c *Config) {
		c.MaxBody, c.Timeout, c.StrictWait = 1024, 300*time.Millisecond, 300*time.Millisecond
	})

	if code, m, h := call(t, "GET", url+"/auth", "", nil); code != 200 || m["body"] != "" || h.Get(workerHeader) != wid {
		t.Errorf("the key reached the worker, or no worker id: %d %v %v", code, m, h)
	}
	if code, m, _ := call(t, "POST", url+"/sink", strings.Repeat("x", 2000), nil); code != 413 || m["reason"] != "payload_too_large" {
		t.Errorf("big request: %d %v", code, m)
	}
	if code, m, _ := call(t, "POST", url+"/sink", strings.Repeat("x", 1000), nil); code != 200 || m["body"] != "ok" {
		t.Errorf("request under the limit: %d %v", code, m)
	}
	if code, m, _ := call(t, "GET", url+"/big", "", nil); code != 502 || m["reason"] != "response_too_large" {
		t.Errorf("big response: %d %v", code, m)
	}
	if code, m, _ := call(t, "GET", url+"/slow", "", nil); code != 504 || m["reason"] != "worker_timeout" {
		t.Errorf("slow worker: %d %v", code, m)
	}
	req, _ := http.NewRequest("GET", url+"/auth", nil)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 401 {
		t.Errorf("no key: %v %v", res, err)
	}
}

func TestNoHealthyWorker(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	url, lb, wid := inProcess(t, mux, func(c *Config) { c.ColdStartWait, c.StrictWait = 300*time.Millisecond, 300*time.Millisecond })
	if h := lb.Health("testendpoint01"); len(h) != 1 || h[0].Health != "initializing" {
		t.Fatalf("pool %+v", h)
	}
	if code, m, _ := call(t, "GET", url+"/x", "", nil); code != 503 || m["reason"] != "no_healthy_worker" {
		t.Errorf("initializing only: %d %v", code, m)
	}
	if code, m, _ := call(t, "GET", url+"/x", "", map[string]string{workerHeader: "strict " + wid}); code != 400 || m["reason"] != "timed_out_waiting_for_worker" {
		t.Errorf("strict to an initializing worker: %d %v", code, m)
	}
	st := lb.Queue(nopQueue{}).Stats("testendpoint01")
	if st.InQueue != 0 {
		t.Errorf("waiting requests left behind: %+v", st)
	}
}
