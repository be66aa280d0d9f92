package kube_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"berth/internal/kubetest"
	"berth/runtime"
)

// TestLoadBalancingToPodIP: a load-balancing endpoint's requests go to its
// worker's own HTTP server at the Pod's IP (Berth in the cluster reaches
// Pod IPs), once its health check answers: the first request scales the
// endpoint from zero and waits for the Pod.
func TestLoadBalancingToPodIP(t *testing.T) {
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	e.start()
	lbworker := build(t, "berth/testdata/lbworker")
	// The worker's port: free on the Pod's IP, a loopback address other
	// than Berth's own.
	const podIP = "127.16.200.7"
	ln, err := net.Listen("tcp", net.JoinHostPort(podIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/lb:1", "env": map[string]string{"PORT": port}})
	ep := e.endpoint(map[string]any{"templateId": tpl, "type": "LOAD_BALANCER", "computeType": "CPU", "workersMax": 1, "idleTimeout": 5})

	type reply struct {
		resp *http.Response
		body []byte
		err  error
	}
	first := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequestWithContext(e.ctx, "GET", e.base+"/lb/"+ep+"/echo?x=1", nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		first <- reply{resp: resp, body: b, err: err}
	}()
	pod := e.newPod(ep, nil, true)
	e.runPodWith(pod.Name, lbworker, podIP)
	var r reply
	select {
	case r = <-first:
	case <-time.After(waitLong):
		t.Fatalf("no answer to the first request after %s; endpoint %+v", waitLong, e.status(ep))
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	var echo struct{ Worker, Path, Query string }
	_ = json.Unmarshal(r.body, &echo)
	wid := pod.Labels[runtime.LabelWorker]
	if r.resp.StatusCode != 200 || echo.Worker != wid || echo.Path != "/echo" || echo.Query != "x=1" ||
		r.resp.Header.Get("X-Runpod-Worker-Id") != wid {
		t.Fatalf("the first request: %d %s (worker header %q), want the echo of worker %s", r.resp.StatusCode, r.body,
			r.resp.Header.Get("X-Runpod-Worker-Id"), wid)
	}
}
