package kube_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"berth/gpu"
	"berth/internal/kubetest"
	"berth/runtime"
)

// The GPU accounting on Kubernetes: the scheduler places, Berth counts
// what the cluster's Pods hold. Each test takes a node out of play —
// cordoned, deleted, or its GPUs held by another workload — and checks
// that no GPU is given twice (a further worker is placed where GPUs are
// free, or waits throttled with Berth's word why and no Pod), then that
// a restart adopts every worker and deletes none.

// setNode changes a node as an operator would (kubectl cordon, taint).
func (e *kenv) setNode(name string, change func(*corev1.Node)) {
	e.t.Helper()
	nodes := e.c.AdminClient.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = nodes.Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("update node %s: %v", name, err)
	}
}

// gpuSlots is /v1/gpus.
func (e *kenv) gpuSlots() []gpu.Status {
	e.t.Helper()
	var s []gpu.Status
	e.call("GET", "/v1/gpus", nil, 200, &s)
	return s
}

// heldOn is /v1/gpus as node -> the holders of its slots, sorted ("" for
// a free slot).
func (e *kenv) heldOn() map[string][]string {
	out := map[string][]string{}
	for _, s := range e.gpuSlots() {
		out[s.Node] = append(out[s.Node], s.Holder)
	}
	for _, hs := range out {
		slices.Sort(hs)
	}
	return out
}

// waitHeld waits until /v1/gpus shows want.
func (e *kenv) waitHeld(what string, want map[string][]string) {
	e.t.Helper()
	var got map[string][]string
	e.eventually(what, func() bool {
		got = e.heldOn()
		return maps.EqualFunc(got, want, slices.Equal)
	}, func() string { return fmt.Sprintf("/v1/gpus by node %v, want %v", got, want) })
}

func (e *kenv) scale(ep string, n int) {
	e.t.Helper()
	e.call("PATCH", "/v1/endpoints/"+ep, map[string]any{"workersMin": n, "workersMax": n}, 200, nil)
}

// workerOn waits for a new Pod of ep, bound, and checks it is bound to
// node (a Pod waiting Unschedulable would be a GPU given twice); the
// test runs it.
func (e *kenv) workerOn(ep string, seen []string, node string) corev1.Pod {
	e.t.Helper()
	p := e.newPod(ep, seen, true)
	if p.Spec.NodeName != node {
		e.t.Fatalf("pod %s bound to %s, want %s (the node with free GPUs)", p.Name, p.Spec.NodeName, node)
	}
	e.runPod(p.Name)
	return p
}

// waitsForGPUs checks ep wants one more worker than it has and waits
// throttled for GPUs, with Berth's reason and no Pod made for it.
func (e *kenv) waitsForGPUs(ep string, pods int) {
	e.t.Helper()
	var st epStatus
	e.eventually("one worker throttled for GPUs", func() bool {
		st = e.status(ep)
		return st.Workers.Throttled == 1 && strings.Contains(st.Reason, "each worker wants 1 ×")
	}, func() string { return fmt.Sprintf("%+v", st) })
	if ps := e.pods(ep); len(ps) != pods {
		e.t.Fatalf("pods %v, want %d: a Pod made for GPUs that are held", podNames(ps), pods)
	}
}

// restartKeeps restarts Berth and checks it adopts every Pod of ep —
// none deleted, none made — with the same GPUs held.
func (e *kenv) restartKeeps(ep string, idle int, held map[string][]string) {
	e.t.Helper()
	uids := func() []types.UID {
		var out []types.UID
		for _, p := range e.pods(ep) {
			if p.DeletionTimestamp == nil {
				out = append(out, p.UID)
			}
		}
		slices.Sort(out)
		return out
	}
	before := uids()
	e.stop()
	e.start()
	var st epStatus
	e.eventually("the workers adopted and idle", func() bool {
		st = e.status(ep)
		return st.Workers.Idle == idle
	}, func() string { return fmt.Sprintf("%+v", st) })
	if after := uids(); !slices.Equal(after, before) {
		e.t.Fatalf("after a restart the endpoint's Pods are %v, were %v: a worker deleted or made", after, before)
	}
	e.waitHeld("the same GPUs held after a restart", held)
	if st.Attempts != 0 {
		e.t.Errorf("status after the restart: %+v, want no new start", st)
	}
}

func gpuEndpoint(e *kenv) string {
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
	return e.endpoint(map[string]any{"templateId": tpl, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"workersMin": 1, "workersMax": 1})
}

func oneGPU(t *testing.T, e *kenv) *corev1.Node {
	return e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})
}

// TestGPUAccountingThroughCordon: a worker runs on node a; a is cordoned
// (its GPU still held, shown unschedulable); a second worker goes to b;
// a is uncordoned: a third worker waits for GPUs — a's GPU is the first
// worker's still — and a restart keeps both workers.
func TestGPUAccountingThroughCordon(t *testing.T) {
	e := newEnv(t)
	a := oneGPU(t, e)
	e.start()
	ep := gpuEndpoint(e)
	p1 := e.workerOn(ep, nil, a.Name)
	w1 := p1.Labels[runtime.LabelWorker]
	b := oneGPU(t, e)

	e.setNode(a.Name, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	e.eventually("a's GPU shown unschedulable, still the first worker's", func() bool {
		return slices.ContainsFunc(e.gpuSlots(), func(s gpu.Status) bool { return s.Node == a.Name && s.Unschedulable && s.Holder == w1 })
	}, func() string { return fmt.Sprintf("%+v", e.gpuSlots()) })
	e.scale(ep, 2)
	p2 := e.workerOn(ep, []string{p1.Name}, b.Name)
	w2 := p2.Labels[runtime.LabelWorker]

	e.setNode(a.Name, func(n *corev1.Node) { n.Spec.Unschedulable = false })
	held := map[string][]string{a.Name: {w1}, b.Name: {w2}}
	e.waitHeld("each GPU its worker's after the uncordon", held)
	e.scale(ep, 3)
	e.waitsForGPUs(ep, 2)
	e.restartKeeps(ep, 2, held)
}

// TestGPUAccountingNodeDeletedAndReadded: a worker runs on node a; a is
// deleted (its GPU no longer listed) and a second worker is asked for;
// a is added again (its Pod still bound to it: re-added within the pod
// garbage collector's 40 s, as a kubelet re-registering would): its GPU
// is the first worker's again, the second worker goes to b, a third
// waits, and a restart keeps both.
func TestGPUAccountingNodeDeletedAndReadded(t *testing.T) {
	e := newEnv(t)
	a := oneGPU(t, e)
	e.start()
	ep := gpuEndpoint(e)
	p1 := e.workerOn(ep, nil, a.Name)
	w1 := p1.Labels[runtime.LabelWorker]
	b := oneGPU(t, e)

	if err := e.c.AdminClient.CoreV1().Nodes().Delete(e.ctx, a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHeld("a's GPU no longer listed", map[string][]string{b.Name: {""}})
	e.scale(ep, 2)
	ctx, cancel := context.WithTimeout(e.ctx, waitLong)
	defer cancel()
	if _, err := e.c.CreateNode(ctx, kubetest.NodeSpec{Name: strings.TrimPrefix(a.Name, kubetest.TestKubeletPrefix), GPUs: 1,
		GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true}); err != nil {
		t.Fatal(err)
	}
	p2 := e.workerOn(ep, []string{p1.Name}, b.Name)
	w2 := p2.Labels[runtime.LabelWorker]
	held := map[string][]string{a.Name: {w1}, b.Name: {w2}}
	e.waitHeld("a's GPU the first worker's again", held)
	e.scale(ep, 3)
	e.waitsForGPUs(ep, 2)
	e.restartKeeps(ep, 2, held)
}

// TestGPUAccountingOtherWorkload: another workload's Pod holds both GPUs
// of node a; Berth's worker goes to node b, where a GPU is free (not to a,
// where it would wait Unschedulable); a second worker waits for GPUs; a
// restart keeps the worker; once the other Pod is gone the second worker
// goes to a.
func TestGPUAccountingOtherWorkload(t *testing.T) {
	e := newEnv(t)
	a := e.c.AddNode(t, kubetest.NodeSpec{GPUs: 2, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})
	b := oneGPU(t, e)
	other := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "training"},
		Spec: corev1.PodSpec{
			NodeName: a.Name, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/training:1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{kubetest.GPUResource: resource.MustParse("2")}}}},
		},
	}
	if _, err := e.c.AdminClient.CoreV1().Pods(e.ns.Name).Create(e.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kl.Running(e.ctx, e.ns.Name, other.Name, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitHeld("a's GPUs held by the other workload", map[string][]string{a.Name: {gpu.HolderOther, gpu.HolderOther}, b.Name: {""}})
	ep := gpuEndpoint(e)
	p1 := e.workerOn(ep, nil, b.Name)
	w1 := p1.Labels[runtime.LabelWorker]
	held := map[string][]string{a.Name: {gpu.HolderOther, gpu.HolderOther}, b.Name: {w1}}
	e.waitHeld("b's GPU the worker's", held)
	e.scale(ep, 2)
	e.waitsForGPUs(ep, 1)
	e.restartKeeps(ep, 1, held)

	if err := e.c.AdminClient.CoreV1().Pods(e.ns.Name).Delete(e.ctx, other.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	p2 := e.workerOn(ep, []string{p1.Name}, a.Name)
	e.waitHeld("a's GPU the second worker's", map[string][]string{a.Name: {"", p2.Labels[runtime.LabelWorker]}, b.Name: {w1}})
}

// TestPendingPodOnAGoneNodeIsReplaced: a worker's Pod bound to node a
// has not started when a is deleted: Berth deletes it and the worker is
// made anew, on b. The controller-manager's pod garbage collector would
// delete it only after 40 s; Berth does within about 10 s.
func TestPendingPodOnAGoneNodeIsReplaced(t *testing.T) {
	e := newEnv(t)
	a := oneGPU(t, e)
	e.start()
	ep := gpuEndpoint(e)
	p1 := e.newPod(ep, nil, true) // bound to a; its kubelet (the test) never starts it
	if p1.Spec.NodeName != a.Name {
		t.Fatalf("pod bound to %s, want %s", p1.Spec.NodeName, a.Name)
	}
	b := oneGPU(t, e)
	deleted := time.Now()
	if err := e.c.AdminClient.CoreV1().Nodes().Delete(e.ctx, a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.WaitPodGone(e.ctx, e.ns.Name, p1.Name, waitLong); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(deleted); took > 35*time.Second {
		t.Errorf("the stranded Pod went %s after its node: the pod garbage collector's doing, not Berth's", took)
	}
	p2 := e.workerOn(ep, []string{p1.Name}, b.Name)
	e.waitHeld("the new worker holds b's GPU", map[string][]string{b.Name: {p2.Labels[runtime.LabelWorker]}})
}
