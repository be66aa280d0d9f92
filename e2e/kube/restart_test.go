package kube_test

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/app"
	"berth/gpu"
	"berth/internal/kubetest"
	"berth/runtime"
)

// TestRestartAdoptsPods: Berth stops (its worker Pod keeps running) and a
// new Berth starts on the same bbolt file. It adopts the Pod from its
// labels — no second Pod for the endpoint, the GPU slot held by the same
// worker again — and removes a Pod labelled as its own that no endpoint
// owns. The worker, which kept retrying, takes the next job.
func TestRestartAdoptsPods(t *testing.T) {
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{GPUs: 2, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})
	e.start()
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"workersMin": 1, "workersMax": 1})
	pod := e.newPod(ep, nil, true)
	wid := pod.Labels[runtime.LabelWorker]
	slot := pod.Annotations[runtime.LabelGPUs]
	e.runPod(pod.Name)
	e.eventually("the worker idle", func() bool { return e.status(ep).Workers.Idle == 1 },
		func() string { return fmt.Sprintf("%+v", e.status(ep)) })

	e.stop()
	// While Berth is down: a Pod with its labels whose endpoint does not
	// exist (left by a run whose record of it was lost).
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "berth-orphan1", Labels: map[string]string{
			runtime.LabelManaged: "true", runtime.LabelDataDir: app.Instance(e.dataDir), runtime.LabelKind: runtime.KindWorker,
			runtime.LabelEndpoint: "noendpoint", runtime.LabelWorker: "orphan1", runtime.LabelVersion: "1",
		}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: container, Image: "registry.example.com/team/echo:1"}}},
	}
	if _, err := e.c.AdminClient.CoreV1().Pods(e.ns.Name).Create(e.ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitPod(e.ctx, e.ns.Name, orphan.Name, waitLong, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kl.Running(e.ctx, e.ns.Name, orphan.Name, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}

	e.start()
	if err := e.c.WaitPodGone(e.ctx, e.ns.Name, orphan.Name, waitLong); err != nil {
		t.Fatalf("the orphan Pod: %v", err)
	}
	var held []gpu.Status
	e.eventually("the worker's GPU slot held again", func() bool {
		e.call("GET", "/v1/gpus", nil, 200, &held)
		return slices.ContainsFunc(held, func(s gpu.Status) bool { return s.UUID == slot && s.Holder == wid })
	}, func() string { return fmt.Sprintf("%+v", held) })
	for _, s := range held {
		if s.UUID != slot && s.Holder != "" {
			t.Errorf("GPU %s held by %q: only the adopted worker's slot %s should be", s.UUID, s.Holder, slot)
		}
	}
	job := e.run(ep, map[string]any{"echo": "after restart"})
	if got := e.waitJob(ep, job); got.Status != "COMPLETED" || got.WorkerID != wid || string(got.Output) != `"after restart"` {
		t.Fatalf("job after the restart: %+v, want COMPLETED by the adopted worker %s", got, wid)
	}
	if ps := e.pods(ep); len(ps) != 1 || ps[0].Name != pod.Name {
		t.Errorf("the endpoint's Pods after the restart: %v, want only %s", podNames(ps), pod.Name)
	}
	var st epStatus
	e.eventually("the adopted worker idle again", func() bool {
		st = e.status(ep)
		return st.Workers.Idle == 1
	}, func() string { return fmt.Sprintf("%+v", st) })
	if st.Attempts != 0 {
		t.Errorf("status after the restart: %+v, want no new start", st)
	}
}
