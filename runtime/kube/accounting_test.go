package kube

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"berth/gpu"
)

// TestAccountingFollowsTheCluster runs the backend's informers and its
// accounting loop on a fake clientset: OnCluster hears every change of the
// nodes and Pods (a cordon marks a node's slots unschedulable, its Pod
// still holding one; another workload's Pod holds its GPU), and a waiting
// worker Pod bound to a node that is deleted is deleted, while a running
// one on the same node is not. The real API server's version of this is
// e2e/kube's TestGPUAccounting*.
func TestAccountingFollowsTheCluster(t *testing.T) {
	defer func(g time.Duration) { strandedGrace = g }(strandedGrace)
	strandedGrace = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := fake.NewClientset(
		testNode("a", 1, "NVIDIA-GeForce-RTX-4090", "24564", true, false),
		testNode("b", 2, "NVIDIA-GeForce-RTX-4090", "24564", true, false),
		testPod("berth-w1", 1, worker("w1", "me", "a/gpu0"), on("a")),
		testPod("train", 1, on("b")),
	)
	b, err := newBackend(ctx, Config{Namespace: "berth", Instance: "me", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	alloc := gpu.NewAllocator(nil)
	heard := make(chan map[string]string, 100)
	b.OnCluster(func(devs []gpu.Device, uses []gpu.Use) {
		alloc.SetCluster(devs, uses)
		held := map[string]string{}
		for _, s := range alloc.Snapshot() {
			v := s.Holder
			if s.Unschedulable {
				v += " (unschedulable)"
			}
			held[s.UUID] = v
		}
		heard <- held
	})
	await := func(what string, want map[string]string) {
		t.Helper()
		var last map[string]string
		for {
			select {
			case last = <-heard:
				if maps.Equal(last, want) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("%s: last heard %v, want %v", what, last, want)
			}
		}
	}
	await("at start", map[string]string{"a/gpu0": "w1", "b/gpu0": gpu.HolderOther, "b/gpu1": ""})

	nodes := cs.CoreV1().Nodes()
	a, err := nodes.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Spec.Unschedulable = true
	if _, err := nodes.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await("a cordoned", map[string]string{"a/gpu0": "w1 (unschedulable)", "b/gpu0": gpu.HolderOther, "b/gpu1": ""})

	// A second worker's Pod, bound to a but not started, and a deleted.
	w2 := testPod("berth-w2", 1, worker("w2", "me", "b/gpu1"), on("a"), phase(corev1.PodPending))
	if _, err := cs.CoreV1().Pods("berth").Create(ctx, w2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nodes.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !b.waitPod(ctx, w2.Name, time.Minute, func(p *corev1.Pod) bool { return p == nil }) {
		t.Fatalf("the waiting Pod %s on the deleted node a was not deleted", w2.Name)
	}
	await("a deleted", map[string]string{"b/gpu0": gpu.HolderOther, "b/gpu1": ""})
	if _, err := cs.CoreV1().Pods("berth").Get(ctx, "berth-w1", metav1.GetOptions{}); err != nil {
		t.Fatalf("the running Pod on the deleted node: %v, want it left alone", err)
	}
}
