package kube

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"berth/runtime"
)

// listerBackend is a Backend whose Service lister holds svcs (the
// instance mapping reads published ports from it).
func listerBackend(t *testing.T, svcs ...*corev1.Service) *Backend {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, s := range svcs {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	return &Backend{cfg: Config{Namespace: "ns"}, svcs: corelisters.NewServiceLister(idx)}
}

func TestInstanceFromPod(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	pod := func(mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "berth-w1", Namespace: "ns",
				Labels:      map[string]string{runtime.LabelWorker: "w1", runtime.LabelKind: runtime.KindWorker},
				Annotations: map[string]string{runtime.LabelGPUs: "gpu-1/gpu0,gpu-1/gpu1"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "img:1",
				Env: []corev1.EnvVar{{Name: "PORT", Value: "8080"}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, PodIP: "10.0.0.7", HostIP: "192.0.2.1"},
		}
		mod(p)
		return p
	}
	status := func(s corev1.ContainerState) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: container, State: s}}
			if s.Running != nil {
				p.Status.Phase = corev1.PodRunning
			}
			if s.Terminated != nil {
				p.Status.Phase = corev1.PodFailed
			}
		}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want runtime.Instance // the fields compared below
	}{
		{name: "just made: pending", pod: pod(func(*corev1.Pod) {}), want: runtime.Instance{Pending: true, State: "Pending"}},
		{name: "no node can take it", pod: pod(func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}}
		}), want: runtime.Instance{Pending: true, State: "Pending", Waiting: runtime.WaitingUnschedulable,
			Error: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}},
		{name: "image pull back-off", pod: pod(status(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "ImagePullBackOff", Message: `Back-off pulling image "img:1"`}})),
			want: runtime.Instance{Pending: true, State: "Pending", Waiting: runtime.WaitingImage, Error: `ImagePullBackOff: Back-off pulling image "img:1"`}},
		{name: "creating its container is not a problem", pod: pod(status(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "ContainerCreating"}})), want: runtime.Instance{Pending: true, State: "Pending"}},
		{name: "running", pod: pod(status(corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}})),
			want: runtime.Instance{Running: true, State: "Running", StartedAt: t0.Time}},
		{name: "crashed", pod: pod(status(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", StartedAt: t0, FinishedAt: t1}})),
			want: runtime.Instance{State: "Failed", ExitCode: 1, Error: "Error", StartedAt: t0.Time, FinishedAt: t1.Time}},
		{name: "OOM-killed", pod: pod(status(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 137, Reason: "OOMKilled", StartedAt: t0, FinishedAt: t1}})),
			want: runtime.Instance{State: "Failed", ExitCode: 137, OOMKilled: true, Error: "OOMKilled", StartedAt: t0.Time, FinishedAt: t1.Time}},
		{name: "completed", pod: pod(status(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: "Completed", StartedAt: t0, FinishedAt: t1}})),
			want: runtime.Instance{State: "Failed", StartedAt: t0.Time, FinishedAt: t1.Time}},
		{name: "deleted while running", pod: pod(func(p *corev1.Pod) {
			status(corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}})(p)
			p.DeletionTimestamp = &t1
		}), want: runtime.Instance{Running: true, State: "Terminating", StartedAt: t0.Time}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := listerBackend(t).instance(tc.pod)
			if in.Running != tc.want.Running || in.Pending != tc.want.Pending || in.State != tc.want.State ||
				in.Waiting != tc.want.Waiting || in.Error != tc.want.Error || in.ExitCode != tc.want.ExitCode ||
				in.OOMKilled != tc.want.OOMKilled || !in.StartedAt.Equal(tc.want.StartedAt) || !in.FinishedAt.Equal(tc.want.FinishedAt) {
				t.Fatalf("got %+v\nwant %+v", in, tc.want)
			}
			if in.ID != "berth-w1" || in.IP != "10.0.0.7" || in.PublicIP != "192.0.2.1" || in.Env["PORT"] != "8080" || in.Image != "img:1" {
				t.Fatalf("id, addresses, env or image: %+v", in)
			}
			if !slices.Equal(in.GPUs, []string{"gpu-1/gpu0", "gpu-1/gpu1"}) || in.Labels[runtime.LabelGPUs] != "gpu-1/gpu0,gpu-1/gpu1" || in.Labels[runtime.LabelWorker] != "w1" {
				t.Fatalf("GPUs %v labels %v", in.GPUs, in.Labels)
			}
		})
	}
	// Evicted: ended without a container status.
	ev := pod(func(p *corev1.Pod) {
		p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "low on memory"
	})
	if in := listerBackend(t).instance(ev); in.Alive() || in.ExitCode != -1 || in.Error != "Evicted: low on memory" {
		t.Fatalf("evicted: %+v", in)
	}
	// A pod's published ports are its Service's node ports.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "berth-w1", Namespace: "ns"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Port: 8888, Protocol: corev1.ProtocolTCP, NodePort: 30123}, {Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053}}}}
	in := listerBackend(t, svc).instance(pod(func(*corev1.Pod) {}))
	if in.PublicPorts["8888/tcp"] != 30123 || in.PublicPorts["53/udp"] != 30053 || len(in.PublicPorts) != 2 {
		t.Fatalf("public ports %v", in.PublicPorts)
	}
}

func TestContainerPort(t *testing.T) {
	for in, want := range map[string]corev1.ContainerPort{
		"8888/http": {Name: "p8888", ContainerPort: 8888, Protocol: corev1.ProtocolTCP},
		"22/tcp":    {Name: "p22", ContainerPort: 22, Protocol: corev1.ProtocolTCP},
		"53/udp":    {Name: "u53", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
		"8080":      {Name: "p8080", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
	} {
		if got, err := containerPort(in); err != nil || got != want {
			t.Errorf("containerPort(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"0/tcp", "x", "22/sctp", "70000"} {
		if _, err := containerPort(bad); err == nil {
			t.Errorf("containerPort(%q) accepted", bad)
		}
	}
}
