package kube

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	"berth/runtime"
)

// Volume claims that cannot bind. A worker Pod whose claim stays Pending
// never runs, and the scheduler's words do not say why (with a class that
// binds on first use, as k3s's local-path, it says nothing: the Pod waits
// for the provisioner that refuses). Berth follows its own claims and the
// cluster's storage classes (informers) and says it on the worker (so on
// the endpoint: claimWait) and on the volume (VolumeStatus).

// rwoOnly are provisioners whose volumes attach to one node at a time as
// they are installed by default: a ReadWriteMany claim of their class is
// refused (local-path: "Only support ReadWriteOnce access mode").
var rwoOnly = map[string]bool{
	"rancher.io/local-path": true, // k3s, kind
	"openebs.io/local":      true,
	"ebs.csi.aws.com":       true,
	"kubernetes.io/aws-ebs": true,
	"pd.csi.storage.gke.io": true,
	"kubernetes.io/gce-pd":  true,
	"disk.csi.azure.com":    true,
}

// noProvisioner is the provisioner of a class of pre-made volumes only.
const noProvisioner = "kubernetes.io/no-provisioner"

// defaultClassAnnotation marks the cluster's default storage class.
const defaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// claimWait says why claim name (c: the claim, nil when it does not
// exist) keeps a Pod that mounts it from running: "" when it is bound.
// definite: it cannot bind as things are — someone must make a volume, a
// storage class, or change Berth's --storage-class or
// --volume-access-mode; otherwise it may be a provisioner at work.
func claimWait(name string, c *corev1.PersistentVolumeClaim, classes []*storagev1.StorageClass) (reason string, definite bool) {
	if c == nil {
		return fmt.Sprintf("volume claim %s does not exist", name), false
	}
	modes := make([]string, len(c.Spec.AccessModes))
	for i, m := range c.Spec.AccessModes {
		modes[i] = string(m)
	}
	mode := strings.Join(modes, ",")
	switch c.Status.Phase {
	case corev1.ClaimBound:
		return "", false
	case corev1.ClaimLost:
		return fmt.Sprintf("volume claim %s (%s) lost its volume %s", name, mode, c.Spec.VolumeName), true
	}
	var class *storagev1.StorageClass
	className := ""
	if c.Spec.StorageClassName != nil {
		className = *c.Spec.StorageClassName
	}
	for _, sc := range classes {
		if (className == "" && c.Spec.StorageClassName == nil && sc.Annotations[defaultClassAnnotation] == "true") || (className != "" && sc.Name == className) {
			class = sc
			break
		}
	}
	head := fmt.Sprintf("volume claim %s (%s", name, mode)
	if className != "" {
		head += ", storage class " + className
	}
	head += ") is not bound: "
	switch {
	case className != "" && class == nil:
		return head + fmt.Sprintf("storage class %q does not exist (berth serve --storage-class)", className), true
	case class == nil:
		return head + "it names no storage class and the cluster has no default one: it binds only to a PersistentVolume made for it (berth serve --storage-class)", true
	case class.Provisioner == noProvisioner:
		return head + fmt.Sprintf("storage class %s provisions nothing (%s): it binds only to a PersistentVolume made for it", class.Name, noProvisioner), true
	case rwoOnly[class.Provisioner] && slices.ContainsFunc(c.Spec.AccessModes, func(m corev1.PersistentVolumeAccessMode) bool {
		return m == corev1.ReadWriteMany || m == corev1.ReadOnlyMany
	}):
		return head + fmt.Sprintf("storage class %s (%s) makes only ReadWriteOnce volumes: run berth serve with --volume-access-mode ReadWriteOnce, or --storage-class of a class that shares volumes across nodes", class.Name, class.Provisioner), true
	}
	return head + fmt.Sprintf("waiting for storage class %s's provisioner %s", class.Name, class.Provisioner), false
}

// claimInformers follows Berth's claims (label-selected in the namespace)
// and the cluster's storage classes, their changes re-telling why the Pods
// that mount a claim wait. It returns what to wait for before the caches
// are complete.
func (b *Backend) claimInformers(claimInf coreinformers.PersistentVolumeClaimInformer, classInf storageinformers.StorageClassInformer) (map[string]cache.InformerSynced, error) {
	b.claims, b.classes = claimInf.Lister(), classInf.Lister()
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { b.claimsChanged() }, UpdateFunc: func(_, _ any) { b.claimsChanged() }, DeleteFunc: func(any) { b.claimsChanged() },
	}
	if _, err := claimInf.Informer().AddEventHandler(changed); err != nil {
		return nil, err
	}
	if _, err := classInf.Informer().AddEventHandler(changed); err != nil {
		return nil, err
	}
	return map[string]cache.InformerSynced{
		"persistentvolumeclaims": claimInf.Informer().HasSynced, "storage classes": classInf.Informer().HasSynced,
	}, nil
}

// claimsChanged tells, for every Pending Pod that mounts a claim, why it
// waits now (an EventUpdate): a claim or a storage class changed, which
// the Pod's own changes do not show. Rare: a claim's creation and binding.
func (b *Backend) claimsChanged() {
	if b.claims == nil {
		return
	}
	own, _ := b.pods.Pods(b.cfg.Namespace).List(labels.Everything())
	for _, p := range own {
		if len(claimsOf(p)) == 0 || p.DeletionTimestamp != nil {
			continue
		}
		in := b.instance(p)
		if !in.Pending {
			continue
		}
		b.emit(runtime.Event{Action: runtime.EventUpdate, ID: p.Name, Labels: in.Labels, Waiting: in.Waiting, Reason: in.Error})
	}
}

// claimsOf are the names of Berth's claims a Pod mounts (claimName's;
// not those of the operator's Pod template, which the informer does not
// follow).
func claimsOf(p *corev1.Pod) []string {
	var out []string
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && strings.HasPrefix(v.PersistentVolumeClaim.ClaimName, "berth-") {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// podClaimWait is claimWait of the first of p's claims that is not bound,
// from the informers' caches ("" when all are bound, or without them).
func (b *Backend) podClaimWait(p *corev1.Pod) (string, bool) {
	if b.claims == nil {
		return "", false
	}
	classes, _ := b.classes.List(labels.Everything())
	for _, name := range claimsOf(p) {
		c, err := b.claims.PersistentVolumeClaims(b.cfg.Namespace).Get(name)
		if err != nil && !apierrors.IsNotFound(err) {
			continue
		}
		if why, definite := claimWait(name, c, classes); why != "" {
			return why, definite
		}
	}
	return "", false
}

// waitOnClaims adds to a Pending Pod's instance why its claims keep it:
// a claim that cannot bind (definite), or one not bound while the
// scheduler refuses the Pod, makes it wait unschedulable with the claim's
// reason (the scheduler's words after it); one a provisioner may still
// bind is only said (the reason a late start gives).
func (b *Backend) waitOnClaims(p *corev1.Pod, in *runtime.Instance) {
	if in.Waiting == runtime.WaitingImage {
		return
	}
	why, definite := b.podClaimWait(p)
	if why == "" {
		return
	}
	sched := ""
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			sched = strings.TrimSpace(c.Message)
		}
	}
	switch {
	case definite || sched != "":
		if sched != "" {
			why += "; the scheduler: " + sched
		}
		in.Waiting, in.Error = runtime.WaitingUnschedulable, why
	case in.Waiting == "":
		in.Error = why
	}
}

// VolumeStatus implements runtime.Volumes: the volume's claim, from the
// informer's cache; none when it was never mounted. Its bytes are the
// cluster's to measure: none here.
func (b *Backend) VolumeStatus(volumeID string) runtime.VolumeStatus {
	if b.claims == nil {
		return runtime.VolumeStatus{}
	}
	name := claimName(runtime.Mount{Kind: runtime.MountNetwork, ID: volumeID})
	c, err := b.claims.PersistentVolumeClaims(b.cfg.Namespace).Get(name)
	if err != nil {
		return runtime.VolumeStatus{}
	}
	classes, _ := b.classes.List(labels.Everything())
	why, _ := claimWait(name, c, classes)
	phase := c.Status.Phase
	if phase == "" {
		phase = corev1.ClaimPending // not seen by the volume controller yet
	}
	return runtime.VolumeStatus{Claim: &runtime.ClaimStatus{Name: name, Phase: string(phase), Reason: why}}
}

// Listers of the claim informers (claimInformers).
type claimListers struct {
	claims  corelisters.PersistentVolumeClaimLister
	classes storagelisters.StorageClassLister
}
