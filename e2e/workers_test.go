package e2e_test

import (
	"context"
	"testing"
	"time"

	"berth/internal/dockertest"
	"berth/runtime"
)

// TestWorkerFieldsOnEverySurface reads a real worker container through
// every surface that shows an endpoint's workers — v1 includeWorkers (on
// the endpoint and as pods), v2 …/workers and GraphQL's pods of an
// endpoint — and checks each field against the Docker daemon's own view of
// the container (its id, image, start time) and the endpoint (vCPUs,
// version). The start time is the moment Berth started the container (the
// daemon's own record after a restart of Berth): within a second of the
// daemon's, and the same on every surface.
func TestWorkerFieldsOnEverySurface(t *testing.T) {
	s := newStack(t)
	image := dockertest.BuildGoImage(t, "berth/testdata/echoworker")
	ep := s.endpoint(image, nil, map[string]any{"workersMin": 1, "workersMax": 1, "vcpuCount": 2})
	var done struct{ Status, WorkerID string }
	s.call("POST", "/v2/"+ep.ID+"/runsync?wait=90000", map[string]any{"input": map[string]any{"echo": 1}}, 200, &done)
	if done.Status != "COMPLETED" || done.WorkerID == "" {
		t.Fatalf("job: %+v", done)
	}

	// The daemon's truth about the worker's container.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	infos, err := s.app.Docker().List(ctx, s.app.Instance())
	if err != nil {
		t.Fatal(err)
	}
	var started time.Time
	var ctrImage string
	for _, in := range infos {
		if in.Labels[runtime.LabelWorker] == done.WorkerID {
			started, ctrImage = in.StartedAt, in.Image
		}
	}
	if started.IsZero() || ctrImage != image {
		t.Fatalf("worker %s's container: started %v, image %q (want %q); containers %+v", done.WorkerID, started, ctrImage, image, infos)
	}
	wid := done.WorkerID
	var shown time.Time // the start time the first surface shows; the others must agree
	sameStart := func(what string, at time.Time) bool {
		if d := at.Sub(started); d < -time.Second || d > time.Second {
			t.Errorf("%s: started %v, the daemon says %v", what, at, started)
		}
		if shown.IsZero() {
			shown = at
		}
		return at.Equal(shown)
	}

	// v1: GET /v1/endpoints/{id}?includeWorkers=true.
	type v1Worker struct {
		ID, Name, DesiredStatus, EndpointID, State, Image, ImageName string
		SlsVersion, GPUCount, VCPUCount                              int
		LastStartedAt                                                time.Time
	}
	var v1ep struct{ Workers []v1Worker }
	s.call("GET", "/v1/endpoints/"+ep.ID+"?includeWorkers=true", nil, 200, &v1ep)
	var v1pods []v1Worker
	s.call("GET", "/v1/pods?includeWorkers=true&endpointId="+ep.ID, nil, 200, &v1pods)
	for what, list := range map[string][]v1Worker{"v1 endpoint includeWorkers": v1ep.Workers, "v1 pods includeWorkers": v1pods} {
		if len(list) != 1 {
			t.Errorf("%s: %d workers, want 1: %+v", what, len(list), list)
			continue
		}
		w := list[0]
		if w.ID != wid || w.EndpointID != ep.ID || w.DesiredStatus != "RUNNING" || w.State != "idle" ||
			w.Image != image || w.ImageName != image || !sameStart(what, w.LastStartedAt) ||
			w.SlsVersion != ep.Version || w.VCPUCount != 2 || w.GPUCount != 0 {
			t.Errorf("%s: %+v\nwant id %s, image %s, started %v, version %d, 2 vCPUs, idle", what, w, wid, image, started, ep.Version)
		}
	}

	// v2: GET /v2/serverless/{id}/workers.
	var v2 struct {
		Workers []struct {
			ID, Status             string
			IsStale                bool
			Version, UptimeSeconds *int
			Image, GPUTypeID       *string
			DataCenterID           *string
			StartedAt              *time.Time
			GPUCount               int
		}
		Summary struct{ Idle, Running, Total int }
	}
	before := time.Now()
	s.call("GET", "/v2/serverless/"+ep.ID+"/workers", nil, 200, &v2)
	if len(v2.Workers) != 1 || v2.Summary.Total != 1 || v2.Summary.Idle != 1 {
		t.Fatalf("v2 workers: %+v", v2)
	}
	w2 := v2.Workers[0]
	maxUptime := int(time.Since(started).Seconds()) + 1
	minUptime := int(before.Sub(started).Seconds()) - 1
	if w2.ID != wid || w2.Status != "IDLE" || w2.IsStale || w2.Version == nil || *w2.Version != ep.Version ||
		w2.Image == nil || *w2.Image != image || w2.StartedAt == nil || !sameStart("v2", *w2.StartedAt) ||
		w2.UptimeSeconds == nil || *w2.UptimeSeconds < minUptime || *w2.UptimeSeconds > maxUptime ||
		w2.GPUTypeID != nil || w2.GPUCount != 0 || w2.DataCenterID == nil {
		t.Errorf("v2 worker: %+v (image %v, startedAt %v, uptime %v)\nwant id %s, image %s, started %v, uptime %d..%d s",
			w2, deref(w2.Image), deref(w2.StartedAt), deref(w2.UptimeSeconds), wid, image, started, minUptime, maxUptime)
	}

	// GraphQL: the endpoint's pods, as runpod-python's get_endpoints reads
	// them.
	var gql struct {
		Data struct {
			Myself struct {
				Endpoints []struct {
					ID   string
					Pods []struct {
						ID, DesiredStatus, State, ImageName, LastStartedAt string
						GPUCount, VCPUCount, Version                       int
					}
				}
			}
		}
		Errors []any
	}
	s.call("POST", "/graphql", map[string]any{"query": `query { myself { endpoints { id pods { id desiredStatus state imageName lastStartedAt gpuCount vcpuCount version } } } }`}, 200, &gql)
	var found bool
	for _, e := range gql.Data.Myself.Endpoints {
		if e.ID != ep.ID {
			continue
		}
		found = true
		if len(e.Pods) != 1 {
			t.Errorf("GraphQL pods: %+v", e.Pods)
			break
		}
		p := e.Pods[0]
		at, err := time.Parse(time.RFC3339, p.LastStartedAt)
		if p.ID != wid || p.DesiredStatus != "RUNNING" || p.State != "idle" || p.ImageName != image || err != nil ||
			!at.Equal(shown.Truncate(time.Second)) || p.VCPUCount != 2 || p.GPUCount != 0 || p.Version != ep.Version {
			t.Errorf("GraphQL pod: %+v\nwant id %s, image %s, lastStartedAt %s, 2 vCPUs, version %d", p, wid, image,
				shown.UTC().Format(time.RFC3339), ep.Version)
		}
	}
	if !found || len(gql.Errors) > 0 {
		t.Errorf("GraphQL: endpoint found %v, errors %v", found, gql.Errors)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestPodFieldsOnEverySurface reads a real pod container through v1, v2
// and GraphQL: its start time (the daemon's, within a second, the same
// everywhere), the host port its HTTP port is published on, the address it
// is reachable at, and its memory (no limit on Berth: the host's).
func TestPodFieldsOnEverySurface(t *testing.T) {
	s := newStack(t)
	image := dockertest.BuildGoImage(t, "berth/runtime/testdata/testprog")
	var pod struct {
		ID, DesiredStatus, PublicIP string
		PortMappings                map[string]int
		MemoryInGb                  float64
		LastStartedAt               time.Time
	}
	s.call("POST", "/v1/pods", map[string]any{"name": "web", "imageName": image, "dockerStartCmd": []string{"serve"},
		"ports": []string{"8888/http"}, "computeType": "CPU"}, 201, &pod)
	s.call("GET", "/v1/pods/"+pod.ID, nil, 200, &pod)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	infos, err := s.app.Docker().List(ctx, s.app.Instance())
	if err != nil {
		t.Fatal(err)
	}
	var started time.Time
	for _, in := range infos {
		if in.Labels[runtime.LabelPod] == pod.ID {
			started = in.StartedAt
		}
	}
	if d := pod.LastStartedAt.Sub(started); started.IsZero() || d < -time.Second || d > time.Second {
		t.Errorf("v1 lastStartedAt %v, the daemon says %v", pod.LastStartedAt, started)
	}
	if pod.DesiredStatus != "RUNNING" || pod.PublicIP == "" || pod.PortMappings["8888"] == 0 || pod.MemoryInGb <= 0 {
		t.Errorf("v1 pod: %+v", pod)
	}

	var v2 struct {
		StartedAt *time.Time
		Runtime   *struct {
			Ports []struct {
				Private int
				Public  *int
				IP      *string
			}
		}
	}
	s.call("GET", "/v2/pods/"+pod.ID, nil, 200, &v2)
	if v2.StartedAt == nil || !v2.StartedAt.Equal(pod.LastStartedAt) || v2.Runtime == nil || len(v2.Runtime.Ports) != 1 ||
		v2.Runtime.Ports[0].Private != 8888 || v2.Runtime.Ports[0].Public == nil || *v2.Runtime.Ports[0].Public != pod.PortMappings["8888"] ||
		v2.Runtime.Ports[0].IP == nil || *v2.Runtime.Ports[0].IP != pod.PublicIP {
		t.Errorf("v2 pod: %+v (runtime %+v), v1 started %v and published 8888 on %d", v2, v2.Runtime, pod.LastStartedAt, pod.PortMappings["8888"])
	}

	var gql struct {
		Data struct {
			Pod struct {
				ID         string
				MemoryInGb int
				Runtime    struct {
					Ports []struct{ PrivatePort, PublicPort int }
				}
			}
		}
		Errors []any
	}
	s.call("POST", "/graphql", map[string]any{"query": `query { pod(input: {podId: "` + pod.ID + `"}) { id memoryInGb runtime { ports { privatePort publicPort } } } }`}, 200, &gql)
	p := gql.Data.Pod
	if len(gql.Errors) > 0 || p.ID != pod.ID || p.MemoryInGb != int(pod.MemoryInGb+0.5) || len(p.Runtime.Ports) != 1 ||
		p.Runtime.Ports[0].PublicPort != pod.PortMappings["8888"] {
		t.Errorf("GraphQL pod: %+v %v; v1 %+v", p, gql.Errors, pod)
	}
	s.call("DELETE", "/v1/pods/"+pod.ID, nil, 204, nil)
}
