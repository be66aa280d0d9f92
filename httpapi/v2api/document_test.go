package v2api_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
	"berth/runtime/fake"
)

// TestV2AsTheDocumentSays: each behaviour an outside checker built from
// RunPod's v2.json found Berth doing otherwise (issue 16), as the
// document's text states it.
func TestV2AsTheDocumentSays(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3", "alpine:4", "busybox:1", "me/private:1"))
	// The talker prints a backlog, then each line the test gives it.
	talk := make(chan string)
	e.Fake.Image("talker:1", func(ctx context.Context, p fake.Process) int {
		io.WriteString(p.Out, "backlog\n")
		for {
			select {
			case line := <-talk:
				io.WriteString(p.Out, line)
			case <-ctx.Done():
				return 0
			}
		}
	})
	e.Conformant(true)
	var podTpl, other, sls v2Template
	e.Must(201, "POST", "/v2/templates", J{"name": "pod-tpl", "image": "alpine:3", "env": J{"A": "1", "B": "1"}}, &podTpl)
	e.Must(201, "POST", "/v2/templates", J{"name": "other", "image": "busybox:1", "args": "sleep 9", "env": J{"B": "2"}}, &other)
	e.Must(201, "POST", "/v2/templates", J{"name": "sls", "image": "worker:1", "serverless": true}, &sls)
	endpoint := func(extra J) J {
		b := J{"name": "ep", "type": "QUEUE", "templateId": sls.ID, "gpu": J{"pools": []string{"ADA_24"}}, "scaling": J{"type": "QUEUE_DELAY", "queueDelay": 4}}
		for k, v := range extra {
			b[k] = v
			if v == nil {
				delete(b, k)
			}
		}
		return b
	}

	t.Run("PATCH accepts what the schema does", func(t *testing.T) {
		e.T = t
		var pod v2Pod
		e.Must(201, "POST", "/v2/pods", J{"name": "p", "templateId": podTpl.ID, "cpu": J{"id": "cpu3c", "vcpuCount": 2}}, &pod)
		// A pod's templateId applies that template's container (recreating
		// it), the body's fields winning and env merged.
		e.Must(200, "PATCH", "/v2/pods/"+pod.ID, J{"templateId": other.ID, "env": J{"C": "3"}}, &pod)
		if pod.Image != "busybox:1" || pod.Env["B"] != "2" || pod.Env["C"] != "3" || pod.Env["A"] != "" {
			t.Errorf("after PATCH templateId: %+v", pod)
		}
		e.Must(200, "PATCH", "/v2/pods/"+pod.ID, J{"image": "alpine:4"}, &pod)
		if pod.Image != "alpine:4" {
			t.Errorf("after an image PATCH: %+v", pod)
		}
		e.MustProblem(404, "PATCH", "/v2/pods/"+pod.ID, J{"templateId": "nosuchtpl1"}, "templateId")
		e.MustProblem(422, "PATCH", "/v2/pods/"+pod.ID, J{"templateId": sls.ID}, "serverless")
		// A template's category and serverless, with the current value or
		// a new one.
		e.Must(200, "PATCH", "/v2/templates/"+podTpl.ID, J{"category": "NVIDIA", "serverless": false}, nil)
		var tp v2Template
		e.Must(200, "PATCH", "/v2/templates/"+podTpl.ID, J{"category": "CPU"}, &tp)
		if tp.Category != "CPU" {
			t.Errorf("category after PATCH: %q", tp.Category)
		}
		// An endpoint's templateId with container fields; an unchanged
		// value is no error.
		var ep v2Endpoint
		e.Must(201, "POST", "/v2/serverless", endpoint(nil), &ep)
		e.Must(200, "PATCH", "/v2/serverless/"+ep.ID, J{"templateId": sls.ID, "image": "worker:2", "name": ep.Name, "flashboot": "OFF"}, &ep)
		if ep.Image != "worker:2" {
			t.Errorf("after PATCH templateId + image: %+v", ep)
		}
		e.Must(204, "DELETE", "/v2/serverless/"+ep.ID, nil, nil)
		e.Must(204, "DELETE", "/v2/pods/"+pod.ID, nil, nil)
	})

	t.Run("comma-separated lists", func(t *testing.T) {
		e.T = t
		for _, p := range []string{"/v2/catalog/gpus?include=AVAILABILITY&product=POD,SERVERLESS",
			"/v2/catalog/datacenters?include=GPU_AVAILABILITY,CPU_AVAILABILITY", "/v2/catalog/datacenters?regions=EUROPE,UNKNOWN",
			"/v2/catalog/cpus?include=AVAILABILITY&product=POD,SERVERLESS", "/v2/catalog/gpus?include=AVAILABILITY&product=POD&cudaVersions=12.4,12.8"} {
			e.Must(200, "GET", p, nil, nil)
		}
	})

	t.Run("422 for what fails the schema", func(t *testing.T) {
		e.T = t
		var pod v2Pod
		e.Must(201, "POST", "/v2/pods", J{"name": "p2", "image": "alpine:3", "cpu": J{"id": "cpu3c", "vcpuCount": 2}}, &pod)
		for _, c := range []struct {
			method, path string
			body         any
			word         string
		}{
			{"PUT", "/v2/account/ssh-keys", J{"keys": []string{"not a key"}}, "keys[0]"},
			{"PUT", "/v2/account/ssh-keys", J{}, "keys"},
			{"POST", "/v2/pods", J{"name": "x", "image": "alpine:3", "cpu": J{"id": "cpu3c", "vcpuCount": 1}}, "vcpuCount"},
			{"POST", "/v2/pods", J{"name": "x", "image": "alpine:3", "cpu": J{"id": "cpu3c", "vcpuCount": 2}, "locked": true}, "locked"},
			{"PATCH", "/v2/pods/" + pod.ID, J{"cloud": "SECURE"}, "cloud"},
			{"PATCH", "/v2/pods/" + pod.ID, J{"mounts": J{"network": []J{{"volumeId": "a", "path": "/a"}, {"volumeId": "b", "path": "/b"}}}}, "network"},
			{"POST", "/v2/pods/" + pod.ID + "/action", J{"action": "explode"}, "action"},
			{"POST", "/v2/pods/" + pod.ID + "/action", J{}, "action"},
			{"POST", "/v2/templates", J{"name": "", "image": "alpine:3"}, "name"},
			{"POST", "/v2/templates", J{"name": "t", "image": "alpine:3", "disk": 0}, "disk"},
			{"PATCH", "/v2/templates/" + podTpl.ID, J{"mounts": J{"network": []J{}}}, "network"},
			{"POST", "/v2/network-volumes", J{"name": "v", "size": 5000, "dataCenter": "EU-RO-1"}, "size"},
			{"PATCH", "/v2/network-volumes/nosuchvol1", J{}, "minProperties"},
			{"POST", "/v2/registries", J{"name": "r", "username": "", "password": "p"}, "username"},
			{"POST", "/v2/serverless", endpoint(J{"scaling": J{"type": "QUEUE_DELAY"}}), "queueDelay"},
			{"POST", "/v2/serverless", endpoint(J{"type": "LOAD_BALANCER"}), "REQUEST_COUNT"},
			{"POST", "/v2/serverless", endpoint(J{"workers": J{"idleTimeout": 4000}}), "idleTimeout"},
			{"POST", "/v2/serverless", endpoint(J{"gpu": J{"pools": []string{}}}), "pools"},
			{"PATCH", "/v2/serverless/nosuchendpoint", J{"gpu": J{"excludedTypes": []string{"NVIDIA L4"}}}, "pools"},
			{"GET", "/v2/catalog/gpus?include=STOCK", nil, "include"},
			{"GET", "/v2/catalog/gpus?include=AVAILABILITY&product=POD&cudaVersions=12", nil, "cudaVersions"},
			{"GET", "/v2/billing?lastN=0", nil, "lastN"},
			{"GET", "/v2/pods/" + pod.ID + "/logs?tail=6000", nil, "tail"},
		} {
			e.MustProblem(422, c.method, c.path, c.body, c.word)
		}
		e.Must(204, "DELETE", "/v2/pods/"+pod.ID, nil, nil)
	})

	t.Run("required-one-of and exclusive parameters", func(t *testing.T) {
		e.T = t
		e.MustProblem(400, "POST", "/v2/serverless", endpoint(J{"gpu": nil}), "gpu", "cpu")
		e.MustProblem(400, "POST", "/v2/serverless", endpoint(J{"cpu": []J{{"id": "cpu3c", "vcpuCount": 2}}}), "not both")
		e.MustProblem(400, "POST", "/v2/pods", J{"name": "x", "image": "alpine:3"}, "gpu", "cpu")
		e.MustProblem(400, "POST", "/v2/serverless", endpoint(J{"gpu": J{"pools": []string{"ADA_24"}, "allowedCudaVersions": []string{"12.4"}, "minCudaVersion": "12.1"}}), "mutually exclusive")
		for _, route := range []string{"/v2/billing", "/v2/billing/pods", "/v2/billing/serverless", "/v2/billing/endpoints", "/v2/billing/network-volumes", "/v2/billing/clusters"} {
			e.MustProblem(400, "GET", route+"?lastN=3&startTime=2026-01-01T00:00:00Z", nil, "lastN", "startTime")
			e.MustProblem(400, "GET", route+"?lastN=3&endTime=2026-01-01T00:00:00Z", nil, "lastN", "endTime")
			e.Must(200, "GET", route+"?lastN=3&bucketSize=hour", nil, nil)
		}
		e.MustProblem(400, "GET", "/v2/catalog/gpus?include=AVAILABILITY", nil, "product")
		e.MustProblem(400, "GET", "/v2/catalog/gpus?product=POD", nil, "include=AVAILABILITY")
		e.MustProblem(400, "GET", "/v2/catalog/gpus?count=2", nil, "count")
		e.MustProblem(400, "GET", "/v2/catalog/gpus?include=AVAILABILITY&product=POD&cudaVersions=12.4&minCudaVersion=12", nil, "mutually exclusive")
		e.MustProblem(400, "GET", "/v2/catalog/cpus?vcpuCount=4", nil, "vcpuCount")
	})

	t.Run("DELETE rules", func(t *testing.T) {
		e.T = t
		// An endpoint goes with its own template.
		var ep v2Endpoint
		e.Must(201, "POST", "/v2/serverless", endpoint(J{"templateId": nil, "image": "inline:1"}), &ep)
		e.Must(200, "GET", "/v2/templates/"+ep.TemplateID, nil, nil)
		e.Must(204, "DELETE", "/v2/serverless/"+ep.ID, nil, nil)
		e.MustProblem(404, "GET", "/v2/templates/"+ep.TemplateID, nil, "not found")
		// A registry: a pod pulling with it blocks the delete (400); a
		// template does not (it loses the reference).
		var reg struct{ ID string }
		e.Must(201, "POST", "/v2/registries", J{"name": "hub", "username": "u", "password": "p"}, &reg)
		var tpl v2Template
		e.Must(201, "POST", "/v2/templates", J{"name": "private", "image": "me/private:1", "registry": reg.ID}, &tpl)
		var pod v2Pod
		e.Must(201, "POST", "/v2/pods", J{"name": "puller", "image": "me/private:1", "registry": reg.ID, "cpu": J{"id": "cpu3c", "vcpuCount": 2}}, &pod)
		e.MustProblem(400, "DELETE", "/v2/registries/"+reg.ID, nil, "pod "+pod.ID)
		e.Must(204, "DELETE", "/v2/pods/"+pod.ID, nil, nil)
		e.Must(204, "DELETE", "/v2/registries/"+reg.ID, nil, nil)
		e.Must(200, "GET", "/v2/templates/"+tpl.ID, nil, &tpl)
		if tpl.Registry != nil {
			t.Errorf("the template still names the deleted registry: %v", *tpl.Registry)
		}
		// A template in use: 400, as the document says.
		e.Must(201, "POST", "/v2/pods", J{"name": "user", "templateId": tpl.ID, "cpu": J{"id": "cpu3c", "vcpuCount": 2}}, &pod)
		e.MustProblem(400, "DELETE", "/v2/templates/"+tpl.ID, nil, "in use")
		e.Must(204, "DELETE", "/v2/pods/"+pod.ID, nil, nil)
	})

	t.Run("logs stream until the client leaves", func(t *testing.T) {
		e.T = t
		var pod v2Pod
		e.Must(201, "POST", "/v2/pods", J{"name": "talker", "image": "talker:1", "cpu": J{"id": "cpu3c", "vcpuCount": 2}}, &pod)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", e.Base+"/v2/pods/"+pod.ID+"/logs", nil)
		req.Header.Set("Authorization", "Bearer "+apitest.Key)
		res, err := (&http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 5 * time.Second}}).Do(req)
		if err != nil || res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("GET logs: %v %+v", err, res)
		}
		defer res.Body.Close()
		br := bufio.NewReader(res.Body)
		if got := readEvent(t, br); !strings.Contains(got, `"line":"backlog"`) {
			t.Errorf("first event %q", got)
		}
		talk <- "live\n" // after the backlog: the stream is still open
		if got := readEvent(t, br); !strings.Contains(got, `"line":"live"`) {
			t.Errorf("streamed event %q", got)
		}
		in := e.PodInstance(pod.ID).ID
		if n := e.Fake.Readers(in); n != 1 {
			t.Errorf("%d readers of the container's log while streaming, want 1", n)
		}
		cancel() // the client leaves: Berth stops reading the container's log
		deadline := time.Now().Add(10 * time.Second)
		for e.Fake.Readers(in) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the container's log is still read after the client left")
			}
			time.Sleep(10 * time.Millisecond)
		}
		e.Must(204, "DELETE", "/v2/pods/"+pod.ID, nil, nil)
	})
	e.T = t
	if n := e.Count("/v1/pods"); n != 0 {
		t.Errorf("%d pods left", n)
	}
}

// readEvent reads one SSE event (up to its blank line) within a few
// seconds.
func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		var b strings.Builder
		for {
			line, err := br.ReadString('\n')
			b.WriteString(line)
			if err != nil || line == "\n" {
				ch <- b.String()
				return
			}
		}
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s: the stream is not flushed")
		return ""
	}
}
