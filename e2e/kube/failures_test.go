package kube_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"berth/internal/kubetest"
	"berth/queue"
	"berth/runtime"
)

// TestCPUWorkerCrashLoop: a CPU endpoint's Pod requests its vCPUs and
// memory (vcpuCount and the flavour's memory per vCPU) and no GPU. A job
// that kills its worker (exit 1) is handled as on Docker: the container's
// end is a crash, the job goes back to the queue and another Pod is made,
// after the back-off; after the job's attempts it fails naming the exit,
// and the endpoint shows the crash loop on its status and /health.
func TestCPUWorkerCrashLoop(t *testing.T) {
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{CPU: "8", Memory: "32Gi", TestKubelet: true})
	e.start()
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "CPU", "vcpuCount": 2, "workersMax": 1, "idleTimeout": 5})

	job := e.run(ep, map[string]any{"exit": 1})
	var seen []string
	for attempt := 1; attempt <= 3; attempt++ {
		pod := e.newPod(ep, seen, true)
		seen = append(seen, pod.Name)
		if attempt == 1 {
			c := pod.Spec.Containers[0]
			wantReq := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}
			for k, want := range wantReq {
				if got, ok := c.Resources.Requests[k]; !ok || got.Cmp(want) != 0 {
					t.Errorf("request %s = %v, want %v (requests %v)", k, got.String(), want.String(), c.Resources.Requests)
				}
			}
			if _, ok := c.Resources.Limits[kubetest.GPUResource]; ok || pod.Spec.Affinity != nil {
				t.Errorf("a CPU worker with GPU limits %v or affinity %+v", c.Resources.Limits, pod.Spec.Affinity)
			}
			env := map[string]string{}
			for _, v := range c.Env {
				env[v.Name] = v.Value
			}
			if env["RUNPOD_GPU_COUNT"] != "0" || env["RUNPOD_SKIP_GPU_CHECK"] != "true" {
				t.Errorf("CPU worker env: RUNPOD_GPU_COUNT %q, RUNPOD_SKIP_GPU_CHECK %q", env["RUNPOD_GPU_COUNT"], env["RUNPOD_SKIP_GPU_CHECK"])
			}
		}
		w := e.runPod(pod.Name)
		if code := w.exitCode(t); code != 1 {
			t.Fatalf("attempt %d: the worker exited %d, want 1", attempt, code)
		}
	}
	got := e.waitJob(ep, job)
	if got.Status != "FAILED" || !strings.Contains(got.Error, "exited with code 1") {
		t.Errorf("job after 3 crashes: %+v, want FAILED naming exit code 1", got)
	}
	var st epStatus
	e.eventually("the crash loop on the endpoint's status", func() bool {
		st = e.status(ep)
		return st.Unhealthy && st.Crashes >= 3 && strings.Contains(st.Reason, "crash loop")
	}, func() string { return fmt.Sprintf("%+v", st) })
	if !strings.Contains(st.LastError, "exited with code 1") {
		t.Errorf("lastError %q, want the exit code", st.LastError)
	}
	if h := e.health(ep); h.Workers.Unhealthy < 1 || !strings.Contains(h.Reason, "crash loop") || h.Jobs.Failed != 1 {
		t.Errorf("/health: %+v, want an unhealthy worker, the crash loop and the failed job", h)
	}
}

// TestImagePullFailure: a worker whose Pod's image cannot be pulled
// (ErrImagePull, then ImagePullBackOff) is a failed start, as a Docker
// pull failure is: the Pod is deleted and another made after the back-off;
// after three the endpoint is unhealthy, its status, v1 and /health, say
// why in the cluster's words, and the job waits in the queue.
func TestImagePullFailure(t *testing.T) {
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	e.start()
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/missing:1"})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "CPU", "workersMax": 1})
	job := e.run(ep, map[string]any{"echo": 1})

	var seen []string
	var st epStatus
	e.eventually("the endpoint unhealthy", func() bool {
		for _, p := range e.pods(ep) {
			if !slices.Contains(seen, p.Name) && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				seen = append(seen, p.Name)
				e.pullFails(p.Name)
			}
		}
		st = e.status(ep)
		return st.Unhealthy
	}, func() string { return fmt.Sprintf("%+v; pods %v", st, podNames(e.pods(ep))) })
	if len(seen) < 3 || st.Failures < 3 {
		t.Errorf("unhealthy after %d Pods and %d failures, want 3 failed starts", len(seen), st.Failures)
	}
	for what, s := range map[string]string{"reason": st.Reason, "lastError": st.LastError} {
		if !strings.Contains(s, "ImagePullBackOff") && !strings.Contains(s, "ErrImagePull") || !strings.Contains(s, "pull access denied") {
			t.Errorf("status %s %q: want the image pull failure in the cluster's words", what, s)
		}
	}
	h := e.health(ep)
	if h.Workers.Unhealthy < 1 || !strings.Contains(h.Reason, "pull access denied") {
		t.Errorf("/health %+v: want an unhealthy worker and the pull failure", h)
	}
	if j := e.job(ep, job); j.Status != "IN_QUEUE" {
		t.Errorf("job %+v: want it waiting IN_QUEUE", j)
	}
}

// TestUnschedulableWorkerIsThrottled: the scheduler refuses what Berth
// counted free (the GPU node has a taint the worker Pods do not tolerate):
// the worker's Pod is Unschedulable, so it counts as throttled — not
// failed, not unhealthy — with the scheduler's words, and the job waits;
// once the taint is lifted the scheduler binds the Pod, it runs and the
// job completes (after a restart too: the queue's start-up sighting of
// the adopted Pod, which it counts lost before the Pod could run, is no
// contact, so the Pod is not killed for silence the moment it runs).
func TestUnschedulableWorkerIsThrottled(t *testing.T) {
	e := newEnv(t)
	taint := corev1.Taint{Key: "dedicated", Value: "training", Effect: corev1.TaintEffectNoSchedule}
	node := e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true,
		Taints: []corev1.Taint{taint}})
	e.start()
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"workersMax": 1, "idleTimeout": 5})
	job := e.run(ep, map[string]any{"echo": "scheduled"})

	pod := e.newPod(ep, nil, false)
	if _, err := e.c.WaitPod(e.ctx, e.ns.Name, pod.Name, waitLong, func(p *corev1.Pod) bool {
		c := kubetest.Condition(p, corev1.PodScheduled)
		return c != nil && c.Reason == corev1.PodReasonUnschedulable
	}); err != nil {
		t.Fatal(err)
	}
	var h health
	e.eventually("the worker throttled on /health", func() bool {
		h = e.health(ep)
		return h.Workers.Throttled == 1
	}, func() string { return fmt.Sprintf("%+v; status %+v", h, e.status(ep)) })
	if !strings.Contains(h.Reason, "untolerated taint") || h.Workers.Unhealthy != 0 || h.Workers.Initializing != 0 || h.Jobs.InQueue != 1 {
		t.Errorf("/health %+v: want the job in the queue, one throttled worker and the scheduler's reason", h)
	}
	if st := e.status(ep); st.Unhealthy || st.Workers.Throttled != 1 || st.Failures != 0 {
		t.Errorf("status %+v: want one throttled worker, healthy", st)
	}

	// A restart adopts the waiting Pod: still the one Pod, still
	// throttled, nothing made anew.
	e.stop()
	e.start()
	e.eventually("the worker throttled on /health after a restart", func() bool {
		h = e.health(ep)
		return h.Workers.Throttled == 1
	}, func() string { return fmt.Sprintf("%+v; status %+v", h, e.status(ep)) })
	// The queue gives every worker it loads at a start the worker timeout
	// to be heard from; this one cannot be (it has not run): once the
	// queue counts it lost, it is still the one Pod, not replaced.
	wid := pod.Labels[runtime.LabelWorker]
	e.eventually("the queue to count the waiting worker lost", func() bool {
		return slices.ContainsFunc(e.app.Queue().Workers(ep), func(l queue.WorkerLoad) bool { return l.WorkerID == wid && l.Lost })
	}, func() string { return fmt.Sprintf("%+v", e.app.Queue().Workers(ep)) })
	e.eventually("the worker still throttled", func() bool { return e.health(ep).Workers.Throttled == 1 }, nil)
	if ps := e.pods(ep); len(ps) != 1 || ps[0].UID != pod.UID || ps[0].DeletionTimestamp != nil {
		t.Fatalf("after a restart the endpoint's Pods are %v, want only %s (adopted); status %+v", podNames(ps), pod.Name, e.status(ep))
	}

	// The taint is lifted: the scheduler binds the Pod, which runs.
	e.setNode(node.Name, func(n *corev1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == taint.Key })
	})
	e.runPod(pod.Name)
	if got := e.waitJob(ep, job); got.Status != "COMPLETED" || string(got.Output) != `"scheduled"` {
		t.Errorf("job: %+v", got)
	}
	// The reason is the supervisor's last pass's: a pass just before the
	// job ended still saw it waiting; the next one clears it.
	e.eventually("/health clear after the Pod ran", func() bool {
		h = e.health(ep)
		return h.Workers.Throttled == 0 && h.Reason == ""
	}, func() string { return fmt.Sprintf("%+v", h) })
}

// TestWorkerOOMKilled: a worker Pod whose container the kernel killed for
// memory (the kubelet's OOMKilled) is handled as on Docker: the endpoint's
// status names the OOM and its exit code, and another Pod is made.
func TestWorkerOOMKilled(t *testing.T) {
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	e.start()
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "CPU", "workersMin": 1, "workersMax": 1})
	pod := e.newPod(ep, nil, true)
	e.runQuiet(pod.Name)
	if _, err := e.kl.Terminated(e.ctx, e.ns.Name, pod.Name, 137, "OOMKilled", ""); err != nil {
		t.Fatal(err)
	}
	var st epStatus
	e.eventually("the OOM on the endpoint's status", func() bool {
		st = e.status(ep)
		return strings.Contains(st.LastError, "lack of memory (OOM, exit code 137)")
	}, func() string { return fmt.Sprintf("%+v", st) })
	e.newPod(ep, []string{pod.Name}, false)
}
