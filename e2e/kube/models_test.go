package kube_test

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/app"
	"berth/internal/hubtest"
	"berth/internal/kubetest"
	"berth/runtime"
	"berth/runtime/kube"
)

// TestModelsOnKubernetes: an endpoint names a gated model (the local Hub
// stand-in). Berth makes the claim berth-models and a download Job whose
// Pod — run here by the test as its kubelet: the built berth binary,
// `berth models-fetch` with the Job's args, in a private mount namespace
// with the claim's directory bind-mounted at the Pod's mountPath — gets
// the stored token by secretKeyRef only (in no spec), downloads into the
// claim and writes its progress to its log: the endpoint says
// "downloading acme/tiny-model: 1 MB of 3 MB" (v1 status and models,
// /health), the job waits IN_QUEUE and no worker Pod exists. Released,
// the Job completes; then the worker Pod is made with the claim mounted
// read-only at /runpod-volume/huggingface-cache/hub and HF_HOME,
// HF_HUB_CACHE set, and the job's handler reads the model's file from the
// snapshot through that read-only mount. Then, every model complete,
// Berth's passes over the Jobs send the API server nothing (the audit
// log, over three passes: the Jobs and their Pods come from informers).
func TestModelsOnKubernetes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test kubelet bind-mounts claims in a private mount namespace: needs root")
	}
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	hub := hubtest.New(t)
	weights := make([]byte, 3_000_000)
	if _, err := rand.Read(weights); err != nil {
		t.Fatal(err)
	}
	config := `{"model_type":"tiny"}`
	repo := hub.Add(hubtest.Repo{ID: "acme/tiny-model", Gated: true, Files: []hubtest.File{
		{Path: "config.json", Data: []byte(config)},
		{Path: "model.safetensors", Data: weights, LFS: true},
	}})
	reached, release := hub.Hold(weights, 1_000_000)
	defer release()
	berth := build(t, "berth")
	e.models = &app.Models{Endpoint: hub.URL}
	e.modelsImage = "registry.example.com/berth:test"
	e.claimDirs = map[string]string{kube.ModelsClaim: t.TempDir()}
	e.start()
	e.call("PUT", "/v2/account/huggingface-token", map[string]any{"token": hub.Token}, 200, nil)

	tpl := e.template(map[string]any{"imageName": "example.com/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "CPU", "vcpuCount": 2, "cpuFlavorIds": []string{"cpu3m"},
		"workersMax": 1, "idleTimeout": 60, "modelReferences": []string{"https://huggingface.co/acme/tiny-model"}})
	snapshot := runtime.ModelsTarget + "/models--acme--tiny-model/snapshots/" + repo.Commit
	jobID := e.run(ep, map[string]any{"read_file": snapshot + "/config.json"})

	jobs := e.c.AdminClient.BatchV1().Jobs(e.ns.Name)
	var job batchv1.Job
	e.eventually("the model's download Job", func() bool {
		l, err := jobs.List(e.ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 1 {
			job = l.Items[0]
			return true
		}
		return false
	}, func() string { return e.status(ep).Reason })
	raw, _ := json.Marshal(job)
	if strings.Contains(string(raw), hub.Token) {
		t.Fatalf("the token is in the Job's spec: %s", raw)
	}
	ctr := job.Spec.Template.Spec.Containers[0]
	if ctr.Image != e.modelsImage || len(ctr.Env) != 1 || ctr.Env[0].ValueFrom == nil || ctr.Env[0].ValueFrom.SecretKeyRef == nil {
		t.Fatalf("download container %s env %+v: want Berth's image and HF_TOKEN by secretKeyRef", ctr.Image, ctr.Env)
	}
	claim, err := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name).Get(e.ctx, kube.ModelsClaim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m := claim.Spec.AccessModes; len(m) != 1 || m[0] != corev1.ReadWriteMany {
		t.Errorf("models claim access modes %v, want ReadWriteMany", m)
	}

	var fetch corev1.Pod
	e.eventually("the download Job's Pod on a node", func() bool {
		l, err := e.c.AdminClient.CoreV1().Pods(e.ns.Name).List(e.ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
		if err == nil && len(l.Items) == 1 && l.Items[0].Spec.NodeName != "" {
			fetch = l.Items[0]
			return true
		}
		return false
	}, func() string { return e.status(ep).Reason })
	fw := e.runPodWith(fetch.Name, berth, "127.0.0.1")
	select {
	case <-reached:
	case <-t.Context().Done():
		t.Fatal("the download never reached the held byte")
	}
	e.eventually("the endpoint's status shows the download's progress", func() bool {
		return strings.Contains(e.status(ep).Reason, "downloading acme/tiny-model: 1 MB of 3 MB")
	}, func() string { return e.status(ep).Reason })
	if h := e.health(ep); !strings.Contains(h.Reason, "downloading acme/tiny-model: ") {
		t.Errorf("/health reason %q does not show the download", h.Reason)
	}
	var view struct {
		Models []struct {
			State      string
			BytesTotal int64
		}
	}
	e.call("GET", "/v1/endpoints/"+ep, nil, 200, &view)
	if len(view.Models) != 1 || view.Models[0].State != "downloading" || view.Models[0].BytesTotal < 3_000_000 {
		t.Errorf("v1 models %+v, want one downloading", view.Models)
	}
	if st := e.job(ep, jobID).Status; st != "IN_QUEUE" {
		t.Fatalf("job %s while the model downloads; want IN_QUEUE", st)
	}
	if ps := e.pods(ep); len(ps) != 0 {
		t.Fatalf("a worker Pod before its model was complete: %v", podNames(ps))
	}

	release()
	if code := fw.exitCode(t); code != 0 {
		t.Fatalf("models-fetch exited %d", code)
	}
	wp := e.newPod(ep, nil, true)
	env := map[string]string{}
	for _, v := range wp.Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	if env["HF_HOME"] != runtime.ModelsHome || env["HF_HUB_CACHE"] != runtime.ModelsTarget {
		t.Errorf("worker env HF_HOME=%q HF_HUB_CACHE=%q", env["HF_HOME"], env["HF_HUB_CACHE"])
	}
	ro := false
	for _, m := range wp.Spec.Containers[0].VolumeMounts {
		for _, v := range wp.Spec.Volumes {
			if v.Name == m.Name && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == kube.ModelsClaim {
				ro = m.ReadOnly && v.PersistentVolumeClaim.ReadOnly && m.MountPath == runtime.ModelsTarget
			}
		}
	}
	if !ro {
		t.Errorf("worker Pod mounts %+v volumes %+v: want claim %s read-only at %s", wp.Spec.Containers[0].VolumeMounts, wp.Spec.Volumes, kube.ModelsClaim, runtime.ModelsTarget)
	}
	e.runPod(wp.Name)
	if j := e.waitJob(ep, jobID); j.Status != "COMPLETED" || string(j.Output) != mustJSON(config) {
		t.Fatalf("job %+v; want the model's config.json %q", j, config)
	}
	if r := e.status(ep).Reason; strings.Contains(r, "downloading") {
		t.Errorf("status still says %q", r)
	}

	// Steady state: the model complete, Berth reads its Job from the
	// informer. Over three passes (ticks, and kicks: the token stored
	// again), Berth's requests on Jobs and the download Pods are none.
	km := e.app.KubeModels()
	waitPasses := func(n uint64) {
		from := km.Passes()
		e.eventually(fmt.Sprintf("%d more model passes", n), func() bool { return km.Passes() >= from+n }, nil)
	}
	waitPasses(1) // a pass under way when the window opens is a whole one
	skip := len(e.berthRequests())
	for range 2 {
		e.call("PUT", "/v2/account/huggingface-token", map[string]any{"token": hub.Token}, 200, nil)
	}
	waitPasses(3)
	var onJobs []string
	window := e.berthRequests()[skip:]
	kinds := map[string]int{}
	for _, q := range window {
		kinds[q.Kind()]++
	}
	t.Logf("steady state, 3 model passes: Berth's requests: %d %v", len(window), kinds)
	for _, q := range window {
		if q.Resource == "jobs" && q.Verb != "watch" || q.Resource == "pods" && strings.Contains(q.URI, "model-download") {
			onJobs = append(onJobs, q.Verb+" "+q.URI)
		}
	}
	if len(onJobs) > 0 {
		t.Errorf("in steady state, over 3 model passes Berth sent %d requests on Jobs or download Pods: %v", len(onJobs), onJobs)
	}
}

// berthRequests are the requests Berth (the namespace's ServiceAccount)
// sent the API server, from its audit log.
func (e *kenv) berthRequests() []kubetest.Request {
	e.t.Helper()
	reqs, err := e.c.Requests()
	if err != nil {
		e.t.Fatal(err)
	}
	return kubetest.By(reqs, e.ns.ServiceAccountUser())
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
