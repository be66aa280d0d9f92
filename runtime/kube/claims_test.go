package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	"berth/runtime"
)

func class(name, provisioner string, isDefault bool) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner}
	if isDefault {
		sc.Annotations = map[string]string{defaultClassAnnotation: "true"}
	}
	return sc
}

func claim(className *string, phase corev1.PersistentVolumeClaimPhase, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "berth-vol-v1", Namespace: "ns"},
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: modes, StorageClassName: className, VolumeName: "pv-1"},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: phase},
	}
}

// TestClaimWait: the reason a claim keeps its Pods waiting names the
// claim, its access mode and class, and what is wrong; definite when it
// cannot bind as things are.
func TestClaimWait(t *testing.T) {
	localPath := class("local-path", "rancher.io/local-path", true)
	nfs := class("nfs", "nfs.csi.k8s.io", false)
	static := class("manual", noProvisioner, false)
	rwx, rwo := corev1.ReadWriteMany, corev1.ReadWriteOnce
	for _, tc := range []struct {
		name     string
		claim    *corev1.PersistentVolumeClaim
		classes  []*storagev1.StorageClass
		want     []string // in the reason, in order; none: no reason
		definite bool
	}{
		{name: "bound", claim: claim(ptr("local-path"), corev1.ClaimBound, rwx), classes: []*storagev1.StorageClass{localPath}},
		{name: "missing", claim: nil, want: []string{"volume claim berth-vol-v1 does not exist"}},
		{name: "lost", claim: claim(nil, corev1.ClaimLost, rwo), definite: true,
			want: []string{"volume claim berth-vol-v1 (ReadWriteOnce) lost its volume pv-1"}},
		{name: "k3s local-path, ReadWriteMany", claim: claim(ptr("local-path"), corev1.ClaimPending, rwx),
			classes: []*storagev1.StorageClass{localPath, nfs}, definite: true,
			want: []string{"volume claim berth-vol-v1 (ReadWriteMany, storage class local-path) is not bound: ",
				"storage class local-path (rancher.io/local-path) makes only ReadWriteOnce volumes", "--volume-access-mode ReadWriteOnce"}},
		{name: "the default class local-path, ReadWriteMany", claim: claim(nil, corev1.ClaimPending, rwx),
			classes: []*storagev1.StorageClass{nfs, localPath}, definite: true,
			want: []string{"volume claim berth-vol-v1 (ReadWriteMany) is not bound: ", "local-path (rancher.io/local-path) makes only ReadWriteOnce"}},
		{name: "local-path, ReadWriteOnce: its provisioner at work", claim: claim(ptr("local-path"), corev1.ClaimPending, rwo),
			classes: []*storagev1.StorageClass{localPath},
			want:    []string{"(ReadWriteOnce, storage class local-path) is not bound: waiting for storage class local-path's provisioner rancher.io/local-path"}},
		{name: "a class that shares, ReadWriteMany", claim: claim(ptr("nfs"), "", rwx), classes: []*storagev1.StorageClass{localPath, nfs},
			want: []string{"waiting for storage class nfs's provisioner nfs.csi.k8s.io"}},
		{name: "no such class", claim: claim(ptr("fast"), corev1.ClaimPending, rwx), classes: []*storagev1.StorageClass{localPath}, definite: true,
			want: []string{"(ReadWriteMany, storage class fast) is not bound: ", `storage class "fast" does not exist (berth serve --storage-class)`}},
		{name: "no class, no default", claim: claim(nil, corev1.ClaimPending, rwx), classes: []*storagev1.StorageClass{nfs}, definite: true,
			want: []string{"(ReadWriteMany) is not bound: it names no storage class and the cluster has no default one", "PersistentVolume made for it"}},
		{name: "a class of pre-made volumes", claim: claim(ptr("manual"), corev1.ClaimPending, rwo), classes: []*storagev1.StorageClass{static}, definite: true,
			want: []string{"storage class manual provisions nothing (kubernetes.io/no-provisioner)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, definite := claimWait("berth-vol-v1", tc.claim, tc.classes)
			if len(tc.want) == 0 {
				if got != "" || definite {
					t.Fatalf("claimWait = %q, %v; want none", got, definite)
				}
				return
			}
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("claimWait = %q; want %q in it (in order)", got, w)
				}
				rest = rest[i+len(w):]
			}
			if definite != tc.definite {
				t.Errorf("claimWait(%q) definite = %v, want %v", got, definite, tc.definite)
			}
		})
	}
}

// TestPodWaitsOnItsClaim: a Pending worker Pod whose claim cannot bind
// waits unschedulable with the claim's reason (the scheduler's words
// after it); one whose claim a provisioner may still bind only says it;
// a bound claim adds nothing.
func TestPodWaitsOnItsClaim(t *testing.T) {
	idx := func(objs ...any) cache.Indexer {
		i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := i.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return i
	}
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "berth-w1", Namespace: "ns", Labels: map[string]string{runtime.LabelKind: runtime.KindWorker}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container}}, Volumes: []corev1.Volume{{Name: "vol-0",
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "berth-vol-v1"}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: conds},
		}
	}
	withVolume := func(p *corev1.Pod, claim string) *corev1.Pod {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "models",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		return p
	}
	unsched := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."}
	localPath := class("local-path", "rancher.io/local-path", true)
	for _, tc := range []struct {
		name        string
		claim       *corev1.PersistentVolumeClaim
		pod         *corev1.Pod
		wantWaiting string
		wantError   []string
	}{
		{name: "ReadWriteMany on local-path", claim: claim(ptr("local-path"), corev1.ClaimPending, corev1.ReadWriteMany), pod: pod(),
			wantWaiting: runtime.WaitingUnschedulable, wantError: []string{"volume claim berth-vol-v1 (ReadWriteMany, storage class local-path) is not bound", "--volume-access-mode ReadWriteOnce"}},
		{name: "the scheduler refuses, the claim says why", claim: claim(ptr("missing"), corev1.ClaimPending, corev1.ReadWriteMany), pod: pod(unsched),
			wantWaiting: runtime.WaitingUnschedulable, wantError: []string{`storage class "missing" does not exist`, "; the scheduler: 0/2 nodes are available: pod has unbound immediate"}},
		{name: "a provisioner at work", claim: claim(ptr("local-path"), corev1.ClaimPending, corev1.ReadWriteOnce), pod: pod(),
			wantWaiting: "", wantError: []string{"waiting for storage class local-path's provisioner"}},
		{name: "bound", claim: claim(ptr("local-path"), corev1.ClaimBound, corev1.ReadWriteOnce), pod: pod(), wantWaiting: ""},
		{name: "bound, and a claim of the operator's template (not followed)", claim: claim(ptr("local-path"), corev1.ClaimBound, corev1.ReadWriteOnce),
			pod: withVolume(pod(), "models"), wantWaiting: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Backend{cfg: Config{Namespace: "ns"}, svcs: corelisters.NewServiceLister(idx())}
			b.claims = corelisters.NewPersistentVolumeClaimLister(idx(tc.claim))
			b.classes = storagelisters.NewStorageClassLister(idx(localPath))
			in := b.instance(tc.pod)
			if in.Waiting != tc.wantWaiting {
				t.Errorf("waiting %q, want %q (error %q)", in.Waiting, tc.wantWaiting, in.Error)
			}
			if len(tc.wantError) == 0 && in.Error != "" {
				t.Errorf("error %q, want none", in.Error)
			}
			for _, w := range tc.wantError {
				if !strings.Contains(in.Error, w) {
					t.Errorf("error %q, want %q in it", in.Error, w)
				}
			}
			st := b.VolumeStatus("v1").Claim
			if st == nil || st.Name != "berth-vol-v1" || st.Phase != string(tc.claim.Status.Phase) {
				t.Fatalf("VolumeStatus claim = %+v; want claim berth-vol-v1, %s", st, tc.claim.Status.Phase)
			}
			if (st.Reason == "") != (tc.claim.Status.Phase == corev1.ClaimBound) {
				t.Errorf("VolumeStatus claim reason %q for a %s claim", st.Reason, tc.claim.Status.Phase)
			}
		})
	}
}
