// Package kube is Berth's Kubernetes runtime: a runtime.Backend that runs
// workers and pods as Pods of one namespace, with client-go informers
// (watches, not polling) for the Pods, their Services and the cluster's
// nodes.
//
// What Berth makes, all labelled berth.managed=true and berth.instance
// (and the other berth.* labels, which stay the truth after a restart):
//
//   - a worker or pod is a Pod named like its Docker container
//     (berth-<workerId>, berth-pod-<podId>), restartPolicy Never (Berth
//     decides replacements), one container "main" with the same env;
//   - GPUs: the scheduler places, Berth accounts (gpus.go). A GPU Pod
//     requests nvidia.com/gpu: N with required node affinity on the GPU
//     product label (and memory, for a type the catalogue lacks) and a
//     toleration of the nvidia.com/gpu taint; the scheduler picks the
//     node. Devices makes one device per nvidia.com/gpu of each GPU node;
//     who holds them is derived at every change from the Pods that exist
//     (OnCluster: Berth's own, bound or waiting, and every other bound
//     Pod's nvidia.com/gpu requests, from a cluster-wide Pod informer).
//     The slots Berth chose are the annotation berth.gpus (kept where they
//     still fit). A waiting worker Pod bound or pinned to a node that is
//     gone is deleted, so its worker is made anew;
//   - CPU workers request cpu and memory (vcpuCount, the CPU flavour);
//     containerDiskInGb is an ephemeral-storage limit;
//   - a registry login is an image pull Secret berth-registry-<authId>,
//     deleted with the login (RemoveRegistryAuth);
//   - a network volume is a PersistentVolumeClaim berth-vol-<volumeId>
//     (Config.NetworkAccessMode, shared by the workers), a pod's own volume
//     berth-pod-<podId> (ReadWriteOnce); both Config.StorageClass; they are
//     mounted where Docker mounts them and outlive the Pods (a network
//     volume's claim goes with the volume: RemoveVolume);
//   - a pod's ports are a Service (NodePort by default) owned by its Pod;
//   - stop is deletion with the grace; a stopped Pod is not started again
//     (Caps.Restart false): Berth makes it anew, its volumes kept;
//   - a Pod cannot be paused (Caps.Pause false): FlashBoot is off, and the
//     endpoint's status says so;
//   - the operator's Pod template (Config.PodTemplate, package podtemplate)
//     is merged into every Pod: runtime class, priority, tolerations, node
//     selector, labels, security context, extra volumes…; without one,
//     the defaults (seccomp RuntimeDefault, no privilege escalation).
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"berth/gpu"
	"berth/runtime"
	"berth/runtime/kube/podtemplate"
)

// Config is a Backend's configuration.
type Config struct {
	// REST reaches the API server (from --kubeconfig, KUBECONFIG or the
	// in-cluster service account). Required.
	REST *rest.Config
	// Namespace holds every object Berth makes. Required.
	Namespace string
	// Instance identifies this Berth (runtime.LabelDataDir). Required.
	Instance string
	Logger   *slog.Logger
	// StorageClass of the PersistentVolumeClaims ["": the cluster's
	// default].
	StorageClass string
	// NetworkAccessMode of a network volume's claim [ReadWriteMany: the
	// endpoint's workers share it, possibly on several nodes].
	NetworkAccessMode corev1.PersistentVolumeAccessMode
	// NetworkVolumeGB is a network volume's size, its claim's request
	// [10 GB when nil or failing].
	NetworkVolumeGB func(volumeID string) (int, error)
	// ServiceType of a pod's ports [NodePort].
	ServiceType corev1.ServiceType
	// SelfPod and SelfNamespace are Berth's own Pod when it runs in the
	// cluster (POD_NAME, POD_NAMESPACE from the downward API): the
	// StatefulSet controlling it becomes the owner of the worker Pods.
	// "": none (workers have no owner; a restarted Berth adopts them).
	SelfPod, SelfNamespace string
	// PodTemplate is the operator's template merged into every Pod Berth
	// makes (podtemplate.Template.Apply); nil: the defaults only.
	PodTemplate *podtemplate.Template
}

// Backend runs Berth's workers and pods as Pods: runtime.Backend.
type Backend struct {
	cfg   Config
	cs    kubernetes.Interface
	log   *slog.Logger
	sel   labels.Selector
	pods  corelisters.PodLister
	svcs  corelisters.ServiceLister
	nodes corelisters.NodeLister
	// bound are the cluster's bound, unfinished Pods (slim): the GPUs
	// other workloads hold.
	bound corelisters.PodLister
	// claims and classes: Berth's volume claims, the cluster's storage
	// classes (claims.go).
	claimListers

	cancel context.CancelFunc
	done   sync.WaitGroup

	mu      sync.Mutex
	subs    map[*subscriber]bool
	waiters map[string][]chan struct{} // pod name -> woken on each change
	// fresh are the Pods Create made that the informer has not reported
	// yet: the only ones Inspect asks the API server about on a cache
	// miss (any other miss is a Pod that is gone). An entry goes at the
	// Pod's first change the informer reports, its deletion at the latest.
	fresh map[string]struct{}

	// kick wakes the accounting loop (a node or a GPU Pod changed).
	kick      chan struct{}
	onCluster func([]gpu.Device, []gpu.Use)
	lastKey   string
	// strandedSince is when a Pod was first seen stranded (its node
	// gone): it is deleted once that has lasted strandedGrace, so a node
	// the node informer has not reported yet is not taken for a gone one.
	strandedSince map[string]time.Time
	// owner is the owner reference of worker Pods (Berth's StatefulSet),
	// nil when there is none; set by New.
	owner *metav1.OwnerReference
	// models fills the models claim (StartModels; nil: no model cache).
	models *Models
}

// strandedGrace is how long a worker Pod's node must be missing before
// the Pod is replaced.
var strandedGrace = 10 * time.Second

type subscriber struct {
	ctx context.Context
	c   chan runtime.Event
}

var _ runtime.Backend = (*Backend)(nil)

// New connects to the cluster, starts the informers (Pods and Services of
// this Berth in the namespace; nodes) and waits until they have synced,
// so List and Devices are complete when it returns. Close stops them.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	switch {
	case cfg.REST == nil:
		return nil, errors.New("kubernetes backend: no cluster configuration")
	case cfg.Namespace == "":
		return nil, errors.New("kubernetes backend: Config.Namespace is required")
	case cfg.Instance == "":
		return nil, errors.New("kubernetes backend: Config.Instance is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NetworkAccessMode == "" {
		cfg.NetworkAccessMode = corev1.ReadWriteMany
	}
	if cfg.ServiceType == "" {
		cfg.ServiceType = corev1.ServiceTypeNodePort
	}
	cs, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	b, err := newBackend(ctx, cfg, cs)
	if err != nil {
		return nil, err
	}
	if cfg.PodTemplate != nil {
		b.checkTemplate(ctx)
	}
	return b, nil
}

// newBackend is New on a clientset (tests: a fake one).
func newBackend(ctx context.Context, cfg Config, cs kubernetes.Interface) (*Backend, error) {
	b := &Backend{
		cfg: cfg, cs: cs, log: cfg.Logger,
		sel:     labels.SelectorFromSet(labels.Set{runtime.LabelManaged: "true", runtime.LabelDataDir: cfg.Instance}),
		subs:    map[*subscriber]bool{},
		waiters: map[string][]chan struct{}{},
		fresh:   map[string]struct{}{},
		kick:    make(chan struct{}, 1),

		strandedSince: map[string]time.Time{},
	}
	own := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = b.sel.String() }))
	cluster := informers.NewSharedInformerFactory(cs, 0)
	// Every bound Pod that has not ended, in every namespace: what other
	// workloads hold. Stored slim (the GPU requests and little else).
	boundPods := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
	}))
	podInf := own.Core().V1().Pods()
	svcInf := own.Core().V1().Services()
	nodeInf := cluster.Core().V1().Nodes()
	boundInf := boundPods.Core().V1().Pods()
	if err := boundInf.Informer().SetTransform(slim); err != nil {
		return nil, err
	}
	b.pods, b.svcs, b.nodes, b.bound = podInf.Lister(), svcInf.Lister(), nodeInf.Lister(), boundInf.Lister()
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.podChanged(nil, obj); b.account() },
		UpdateFunc: func(old, obj any) { b.podChanged(old, obj); b.account() },
		DeleteFunc: func(obj any) { b.podDeleted(obj); b.account() },
	}); err != nil {
		return nil, err
	}
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { b.account() }, UpdateFunc: func(_, _ any) { b.account() }, DeleteFunc: func(any) { b.account() },
	}
	if _, err := nodeInf.Informer().AddEventHandler(changed); err != nil {
		return nil, err
	}
	if _, err := boundInf.Informer().AddEventHandler(changed); err != nil {
		return nil, err
	}
	// Every informer is asked for before its factory starts: Start runs
	// only those requested by then.
	claimSynced, err := b.claimInformers(own.Core().V1().PersistentVolumeClaims(), cluster.Storage().V1().StorageClasses())
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	own.Start(ictx.Done())
	cluster.Start(ictx.Done())
	boundPods.Start(ictx.Done())
	b.done.Add(1)
	go func() {
		defer b.done.Done()
		<-ictx.Done()
		own.Shutdown()
		cluster.Shutdown()
		boundPods.Shutdown()
	}()
	synced := map[string]cache.InformerSynced{
		"pods": podInf.Informer().HasSynced, "services": svcInf.Informer().HasSynced, "nodes": nodeInf.Informer().HasSynced,
		"the cluster's bound pods": boundInf.Informer().HasSynced,
	}
	maps.Copy(synced, claimSynced)
	for what, ok := range synced {
		if !cache.WaitForCacheSync(ctx.Done(), ok) {
			b.Close()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("kubernetes backend: %s of namespace %s not listed: %w", what, cfg.Namespace, ctx.Err())
			}
			return nil, fmt.Errorf("kubernetes backend: %s of namespace %s not listed", what, cfg.Namespace)
		}
	}
	if owner, err := b.findOwner(ctx); err != nil {
		b.log.Warn("worker pods have no owner", "err", err)
	} else if b.owner = owner; owner != nil {
		b.log.Info("worker pods are owned by Berth's StatefulSet", "statefulset", b.owner.Name)
	}
	b.done.Add(1)
	go b.accounting(ictx)
	b.account()
	return b, nil
}

// Close stops the informers.
func (b *Backend) Close() {
	b.cancel()
	b.done.Wait()
}

// Name implements runtime.Backend.
func (b *Backend) Name() string { return "kubernetes" }

// Caps implements runtime.Backend.
func (b *Backend) Caps() runtime.Caps {
	b.mu.Lock()
	models := b.models != nil
	b.mu.Unlock()
	return runtime.Caps{Pause: false, Restart: false, NetworkVolumes: true, Models: models, Place: "the cluster"}
}

// Ping implements runtime.Backend: the API server's /version.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("kubernetes API server: %w", err)
	}
	return nil
}

// Namespace is the namespace Berth's objects are in.
func (b *Backend) Namespace() string { return b.cfg.Namespace }

// Client is the clientset, for what the interface does not cover (tests).
func (b *Backend) Client() kubernetes.Interface { return b.cs }

// wake signals the waiters on a pod (it changed or went).
func (b *Backend) wake(name string) {
	b.mu.Lock()
	ws := b.waiters[name]
	delete(b.waiters, name)
	delete(b.fresh, name)
	b.mu.Unlock()
	for _, c := range ws {
		close(c)
	}
}

// changed returns a channel closed at the pod's next change.
func (b *Backend) changed(name string) <-chan struct{} {
	c := make(chan struct{})
	b.mu.Lock()
	b.waiters[name] = append(b.waiters[name], c)
	b.mu.Unlock()
	return c
}

// waitPod waits until cond holds for the pod (nil: it is gone) or the
// timeout or ctx ends, on the informer's notifications.
func (b *Backend) waitPod(ctx context.Context, name string, timeout time.Duration, cond func(*corev1.Pod) bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		ch := b.changed(name)
		p, err := b.pods.Pods(b.cfg.Namespace).Get(name)
		if apierrors.IsNotFound(err) {
			p = nil
		}
		if cond(p) {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// emit sends ev to every subscriber.
func (b *Backend) emit(ev runtime.Event) {
	b.mu.Lock()
	subs := make([]*subscriber, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		select {
		case s.c <- ev:
		case <-s.ctx.Done():
		}
	}
}

// Events implements runtime.Backend. The informers re-list and re-watch
// by themselves, so the stream ends only with ctx.
func (b *Backend) Events(ctx context.Context) (<-chan runtime.Event, <-chan error) {
	s := &subscriber{ctx: ctx, c: make(chan runtime.Event, 256)}
	errc := make(chan error)
	b.mu.Lock()
	b.subs[s] = true
	b.mu.Unlock()
	out := make(chan runtime.Event, 256)
	go func() {
		defer close(out)
		defer close(errc)
		defer func() {
			b.mu.Lock()
			delete(b.subs, s)
			b.mu.Unlock()
		}()
		for {
			select {
			case ev := <-s.c:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc
}

// podChanged turns a Pod's change into events: it started, it ended (OOM
// first when so), or why it waits changed.
func (b *Backend) podChanged(oldObj, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	defer b.wake(p.Name)
	now := b.instance(p)
	var was runtime.Instance
	if o, ok := oldObj.(*corev1.Pod); ok {
		was = b.instance(o)
	} else {
		was = runtime.Instance{Pending: true}
	}
	base := runtime.Event{ID: p.Name, Labels: now.Labels}
	switch {
	case now.Running && !was.Running:
		ev := base
		ev.Action, ev.Time = runtime.EventStart, now.StartedAt
		b.emit(ev)
	case !now.Alive() && was.Alive():
		if now.OOMKilled {
			ev := base
			ev.Action = runtime.EventOOM
			b.emit(ev)
		}
		ev := base
		ev.Action, ev.ExitCode, ev.Time = runtime.EventDie, now.ExitCode, now.FinishedAt
		b.emit(ev)
	case now.Pending && (now.Waiting != was.Waiting || now.Error != was.Error):
		ev := base
		ev.Action, ev.Waiting, ev.Reason = runtime.EventUpdate, now.Waiting, now.Error
		b.emit(ev)
	}
}

func (b *Backend) podDeleted(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		if t, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
			p, ok = t.Obj.(*corev1.Pod)
		}
		if !ok {
			return
		}
	}
	b.wake(p.Name)
	b.emit(runtime.Event{Action: runtime.EventDestroy, ID: p.Name, Labels: b.instance(p).Labels})
}

// OnCluster makes f hear the cluster's GPU slots and who holds them (the
// allocator's SetCluster): now, and at every change after.
func (b *Backend) OnCluster(f func([]gpu.Device, []gpu.Use)) {
	devs, uses := b.Cluster()
	b.mu.Lock()
	b.onCluster, b.lastKey = f, fmt.Sprint(devs, uses)
	b.mu.Unlock()
	f(devs, uses)
	b.account()
}

// Devices implements runtime.Backend: one device per nvidia.com/gpu slot
// of each GPU node (those of a cordoned or not Ready one, or one the
// operator's Pod template keeps Pods off, Unschedulable).
func (b *Backend) Devices(context.Context) ([]gpu.Device, error) {
	devs, _ := b.Cluster()
	return devs, nil
}

// Cluster is the GPU slots of the cluster's nodes and the Pods that hold
// or wait for them, from the informers' caches.
func (b *Backend) Cluster() ([]gpu.Device, []gpu.Use) {
	nodes, _ := b.nodes.List(labels.Everything())
	bound, _ := b.bound.List(labels.Everything())
	own, _ := b.pods.Pods(b.cfg.Namespace).List(labels.Everything())
	devs := devicesOf(nodes)
	if b.cfg.PodTemplate != nil {
		// A node the template's selector or affinity rules out is as a
		// cordoned one: its Pods keep their slots, no new one is given.
		out := map[string]bool{}
		for _, n := range nodes {
			out[n.Name] = !b.cfg.PodTemplate.Admits(n)
		}
		for i := range devs {
			devs[i].Unschedulable = devs[i].Unschedulable || out[devs[i].Node]
		}
	}
	return devs, usesOf(bound, own, b.cfg.Instance)
}

// account wakes the accounting loop.
func (b *Backend) account() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// accounting is the loop that follows the cluster: at each change it
// tells OnCluster's f what is held (when that changed), and replaces the
// worker Pods stranded on a node that is gone.
func (b *Backend) accounting(ctx context.Context) {
	defer b.done.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-t.C:
		}
		devs, uses := b.Cluster()
		key := fmt.Sprint(devs, uses)
		b.mu.Lock()
		f := b.onCluster
		same := key == b.lastKey
		if f != nil {
			b.lastKey = key
		}
		b.mu.Unlock()
		if f != nil && !same {
			b.log.Debug("cluster GPUs", "slots", len(devs), "uses", len(uses))
			f(devs, uses)
		}
		if next := b.replaceStranded(ctx); next > 0 {
			t.Reset(next)
		}
	}
}

// replaceStranded deletes the worker Pods whose node has been gone for
// strandedGrace, and returns when to look again (0: nothing waits).
func (b *Backend) replaceStranded(ctx context.Context) time.Duration {
	own, _ := b.pods.Pods(b.cfg.Namespace).List(labels.Everything())
	nodes, _ := b.nodes.List(labels.Everything())
	now := time.Now()
	var next time.Duration
	still := map[string]time.Time{}
	for _, p := range stranded(own, nodes) {
		since, ok := b.strandedSince[string(p.UID)]
		if !ok {
			since = now
		}
		if wait := strandedGrace - now.Sub(since); wait > 0 {
			still[string(p.UID)] = since
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		b.log.Warn("replacing a worker pod whose node is gone", "pod", p.Name, "node", pinnedNodes(p))
		err := b.cs.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr(int64(0)), Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
			b.log.Error("delete a stranded worker pod", "pod", p.Name, "err", err)
			still[string(p.UID)] = since
			next = strandedGrace
		}
	}
	b.strandedSince = still
	return next
}
