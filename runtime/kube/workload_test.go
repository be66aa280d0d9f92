package kube

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"berth/runtime"
	"berth/runtime/kube/podtemplate"
)

// fakeBackend is a Backend on a fake clientset holding objs, with empty
// caches: enough for Create's Pod and Secret and for findOwner. The real
// API server's view is e2e/kube's TestWorkerPodSpec.
func fakeBackend(cfg Config, objs ...k8sruntime.Object) (*Backend, *fake.Clientset) {
	cs := fake.NewClientset(objs...)
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	cfg.Namespace, cfg.Instance = "ns", "inst"
	b := &Backend{cfg: cfg, cs: cs, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		pods: corelisters.NewPodLister(idx()), svcs: corelisters.NewServiceLister(idx()), nodes: corelisters.NewNodeLister(idx()),
		fresh: map[string]struct{}{}}
	return b, cs
}

// TestWorkerPodObjects: a worker's Pod carries its requests, a sized
// /dev/shm, its key by secretKeyRef only, Berth's and app.kubernetes.io
// labels and the owner found from Berth's own Pod; the key's Secret is
// owned by the Pod. A pod (not a worker) has no StatefulSet owner.
func TestWorkerPodObjects(t *testing.T) {
	ctx := context.Background()
	yes := true
	self := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "berth-0", Namespace: "ns", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "berth", UID: "sts-uid", Controller: &yes}}}}
	b, cs := fakeBackend(Config{SelfPod: "berth-0", SelfNamespace: "ns"}, self)
	var err error
	if b.owner, err = b.findOwner(ctx); err != nil || b.owner == nil || b.owner.UID != "sts-uid" || b.owner.Controller != nil {
		t.Fatalf("owner %+v, %v: want the StatefulSet, not as controller", b.owner, err)
	}
	spec := runtime.Spec{Name: "berth-w1", Image: "img:1",
		Labels: map[string]string{runtime.LabelKind: runtime.KindWorker, runtime.LabelWorker: "w1"},
		Env:    map[string]string{"RUNPOD_AI_API_KEY": "k-1", "A": "b"}, SecretEnv: []string{"RUNPOD_AI_API_KEY"},
		VCPUs: 2, MemoryMiB: 12 << 10, ShmMiB: 6 << 10, ContainerDiskGB: 50}
	if _, err := b.Create(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods("ns").Get(ctx, "berth-w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	for k, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: "2", corev1.ResourceMemory: "12Gi", corev1.ResourceEphemeralStorage: "10Gi"} {
		if q := c.Resources.Requests[k]; q.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("request %s %s, want %s", k, q.String(), v)
		}
	}
	if q := c.Resources.Limits[corev1.ResourceEphemeralStorage]; q.Cmp(resource.MustParse("50Gi")) != 0 || len(c.Resources.Limits) != 1 {
		t.Errorf("limits %v, want ephemeral-storage 50Gi only", c.Resources.Limits)
	}
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].EmptyDir == nil || pod.Spec.Volumes[0].EmptyDir.Medium != corev1.StorageMediumMemory ||
		pod.Spec.Volumes[0].EmptyDir.SizeLimit.Cmp(resource.MustParse("6Gi")) != 0 ||
		len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/dev/shm" || c.VolumeMounts[0].Name != pod.Spec.Volumes[0].Name {
		t.Errorf("volumes %+v, mounts %+v: want a 6Gi memory emptyDir at /dev/shm", pod.Spec.Volumes, c.VolumeMounts)
	}
	for _, e := range c.Env {
		switch e.Name {
		case "A":
			if e.Value != "b" || e.ValueFrom != nil {
				t.Errorf("env A: %+v", e)
			}
		case "RUNPOD_AI_API_KEY":
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "berth-w1" ||
				e.ValueFrom.SecretKeyRef.Key != "RUNPOD_AI_API_KEY" {
				t.Errorf("env key: %+v, want only a secretKeyRef", e)
			}
		}
	}
	sec, err := cs.CoreV1().Secrets("ns").Get(ctx, "berth-w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["RUNPOD_AI_API_KEY"]) != "k-1" || len(sec.Data) != 1 || len(sec.OwnerReferences) != 1 ||
		sec.OwnerReferences[0].Kind != "Pod" || sec.OwnerReferences[0].Name != "berth-w1" {
		t.Errorf("secret: data %v, owners %+v", sec.Data, sec.OwnerReferences)
	}
	want := map[string]string{"app.kubernetes.io/name": "berth", "app.kubernetes.io/instance": "inst", "app.kubernetes.io/component": "worker",
		"app.kubernetes.io/managed-by": "berth", runtime.LabelManaged: "true", runtime.LabelDataDir: "inst", runtime.LabelWorker: "w1"}
	for k, v := range want {
		if pod.Labels[k] != v {
			t.Errorf("pod label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if sec.Labels["app.kubernetes.io/component"] != "worker-credentials" || sec.Labels[runtime.LabelDataDir] != "inst" {
		t.Errorf("secret labels %v", sec.Labels)
	}
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != "sts-uid" {
		t.Errorf("pod owners %+v, want the StatefulSet", pod.OwnerReferences)
	}

	// A pod: no StatefulSet owner, no Secret, component pod.
	if _, err := b.Create(ctx, runtime.Spec{Name: "berth-pod-p1", Image: "img:1",
		Labels: map[string]string{runtime.LabelKind: runtime.KindPod, runtime.LabelPod: "p1"}}, nil); err != nil {
		t.Fatal(err)
	}
	p2, err := cs.CoreV1().Pods("ns").Get(ctx, "berth-pod-p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.OwnerReferences) != 0 || p2.Labels["app.kubernetes.io/component"] != "pod" || len(p2.Spec.Volumes) != 0 {
		t.Errorf("pod: owners %+v, labels %v, volumes %+v", p2.OwnerReferences, p2.Labels, p2.Spec.Volumes)
	}
}

// TestFindOwner: only a StatefulSet controlling Berth's own Pod in the
// workers' namespace owns them.
func TestFindOwner(t *testing.T) {
	yes, no := true, false
	pod := func(refs ...metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "berth-0", Namespace: "ns", OwnerReferences: refs}}
	}
	sts := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "berth", UID: "u", Controller: &yes}
	notCtl := sts
	notCtl.Controller = &no
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "berth-x", UID: "r", Controller: &yes}
	for _, c := range []struct {
		name         string
		self, selfNS string
		pod          *corev1.Pod
		want         string // the owner's UID, "" none
		wantErr      bool
	}{
		{"outside the cluster", "", "", pod(sts), "", false},
		{"a StatefulSet's Pod", "berth-0", "ns", pod(sts), "u", false},
		{"namespace not said", "berth-0", "", pod(sts), "u", false},
		{"another namespace", "berth-0", "other", pod(sts), "", false},
		{"a Deployment's Pod", "berth-0", "ns", pod(rs), "", false},
		{"not the controller", "berth-0", "ns", pod(notCtl), "", false},
		{"its Pod not found", "berth-9", "ns", pod(sts), "", true},
	} {
		b, _ := fakeBackend(Config{SelfPod: c.self, SelfNamespace: c.selfNS}, c.pod)
		got, err := b.findOwner(context.Background())
		uid := ""
		if got != nil {
			uid = string(got.UID)
		}
		if uid != c.want || (err != nil) != c.wantErr {
			t.Errorf("%s: owner %q, err %v; want %q, error %v", c.name, uid, err, c.want, c.wantErr)
		}
	}
}

// TestCreateMergesThePodTemplate: Create merges Config.PodTemplate into
// the Pod it makes (the merge itself: package podtemplate's tests); a Pod
// the template conflicts with (a pod whose own volume path holds the
// template's mount) is refused and not made. Without a template the Pod
// has the defaults.
func TestCreateMergesThePodTemplate(t *testing.T) {
	ctx := context.Background()
	b, cs := fakeBackend(Config{})
	if _, err := b.Create(ctx, runtime.Spec{Name: "berth-w0", Image: "img:1", Labels: map[string]string{runtime.LabelKind: runtime.KindWorker}}, nil); err != nil {
		t.Fatal(err)
	}
	p0, err := cs.CoreV1().Pods("ns").Get(ctx, "berth-w0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc := p0.Spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v, want seccomp RuntimeDefault", sc)
	}
	if sc := p0.Spec.Containers[0].SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.RunAsNonRoot != nil || sc.RunAsUser != nil {
		t.Errorf("container securityContext %+v, want allowPrivilegeEscalation false, root allowed", sc)
	}

	tpl, err := podtemplate.Parse([]byte(`
metadata: {labels: {team: ml}}
spec:
  runtimeClassName: nvidia
  volumes: [{name: cache, emptyDir: {}}]
  containers: [{volumeMounts: [{name: cache, mountPath: /data/cache}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	b, cs = fakeBackend(Config{PodTemplate: tpl})
	if _, err := b.Create(ctx, runtime.Spec{Name: "berth-w1", Image: "img:1", Labels: map[string]string{runtime.LabelKind: runtime.KindWorker}}, nil); err != nil {
		t.Fatal(err)
	}
	p1, err := cs.CoreV1().Pods("ns").Get(ctx, "berth-w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p1.Labels["team"] != "ml" || p1.Spec.RuntimeClassName == nil || *p1.Spec.RuntimeClassName != "nvidia" ||
		len(p1.Spec.Containers[0].VolumeMounts) != 1 || p1.Spec.Containers[0].VolumeMounts[0].MountPath != "/data/cache" {
		t.Errorf("pod %+v: the template is not merged", p1)
	}
	_, err = b.Create(ctx, runtime.Spec{Name: "berth-pod-p1", Image: "img:1", Labels: map[string]string{runtime.LabelKind: runtime.KindPod},
		Mounts: []runtime.Mount{{Kind: runtime.MountPod, ID: "p1", SizeGB: 1, Target: "/data"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "spec.containers[0].volumeMounts[0].mountPath") {
		t.Errorf("a pod whose volume holds the template's mount: %v, want an error naming the mount", err)
	}
	if _, err := cs.CoreV1().Pods("ns").Get(ctx, "berth-pod-p1", metav1.GetOptions{}); err == nil {
		t.Error("the refused pod was made")
	}
}
