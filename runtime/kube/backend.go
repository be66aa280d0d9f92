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
//   - GPUs: the allocator gives a worker slots of one node (Devices makes
//     one device per nvidia.com/gpu of each Ready node, typed by its
//     nvidia.com/gpu.product label); the Pod requests nvidia.com/gpu: N and
//     is pinned to that node (required node affinity on metadata.name and
//     the product label) with a toleration of the nvidia.com/gpu taint;
//     the slots it holds are the annotation berth.gpus;
//   - CPU workers request cpu and memory (vcpuCount, the CPU flavour);
//     containerDiskInGb is an ephemeral-storage limit;
//   - a registry login is an image pull Secret berth-registry-<authId>,
//     deleted with the login (RemovePullSecret);
//   - a network volume is a PersistentVolumeClaim berth-vol-<volumeId>
//     (Config.NetworkAccessMode, shared by the workers), a pod's own volume
//     berth-pod-<podId> (ReadWriteOnce); both Config.StorageClass; they are
//     mounted where Docker mounts them and outlive the Pods (a network
//     volume's claim goes with the volume: RemoveNetworkVolume);
//   - a pod's ports are a Service (NodePort by default) owned by its Pod;
//   - stop is deletion with the grace; a stopped Pod is not started again
//     (Caps.Restart false): Berth makes it anew, its volumes kept;
//   - a Pod cannot be paused (Caps.Pause false): FlashBoot is off, and the
//     endpoint's status says so.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

	cancel context.CancelFunc
	done   sync.WaitGroup

	mu      sync.Mutex
	subs    map[*subscriber]bool
	waiters map[string][]chan struct{} // pod name -> woken on each change
	// fresh are the Pods Create made that the informer has not reported
	// yet: the only ones Inspect asks the API server about on a cache
	// miss (any other miss is a Pod that is gone). An entry goes at the
	// Pod's first change the informer reports, its deletion at the latest.
	fresh    map[string]struct{}
	devs     []gpu.Device
	onDevs   func([]gpu.Device)
	lastDevs string
}

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
	b := &Backend{
		cfg: cfg, cs: cs, log: cfg.Logger,
		sel:     labels.SelectorFromSet(labels.Set{runtime.LabelManaged: "true", runtime.LabelDataDir: cfg.Instance}),
		subs:    map[*subscriber]bool{},
		waiters: map[string][]chan struct{}{},
		fresh:   map[string]struct{}{},
	}
	own := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = b.sel.String() }))
	cluster := informers.NewSharedInformerFactory(cs, 0)
	podInf := own.Core().V1().Pods()
	svcInf := own.Core().V1().Services()
	nodeInf := cluster.Core().V1().Nodes()
	b.pods, b.svcs, b.nodes = podInf.Lister(), svcInf.Lister(), nodeInf.Lister()
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.podChanged(nil, obj) },
		UpdateFunc: func(old, obj any) { b.podChanged(old, obj) },
		DeleteFunc: b.podDeleted,
	}); err != nil {
		return nil, err
	}
	nodeChanged := func(any) { b.refreshDevices() }
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: nodeChanged, UpdateFunc: func(_, n any) { nodeChanged(n) }, DeleteFunc: nodeChanged,
	}); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	own.Start(ictx.Done())
	cluster.Start(ictx.Done())
	b.done.Add(1)
	go func() {
		defer b.done.Done()
		<-ictx.Done()
		own.Shutdown()
		cluster.Shutdown()
	}()
	synced := map[string]cache.InformerSynced{
		"pods": podInf.Informer().HasSynced, "services": svcInf.Informer().HasSynced, "nodes": nodeInf.Informer().HasSynced,
	}
	for what, ok := range synced {
		if !cache.WaitForCacheSync(ctx.Done(), ok) {
			b.Close()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("kubernetes backend: %s of namespace %s not listed: %w", what, cfg.Namespace, ctx.Err())
			}
			return nil, fmt.Errorf("kubernetes backend: %s of namespace %s not listed", what, cfg.Namespace)
		}
	}
	b.refreshDevices()
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
	return runtime.Caps{Pause: false, Restart: false, NetworkVolumes: true, Place: "the cluster"}
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

// OnDevices makes f hear the cluster's GPU slots whenever nodes change
// (the allocator's SetDevices).
func (b *Backend) OnDevices(f func([]gpu.Device)) {
	b.mu.Lock()
	b.onDevs = f
	b.mu.Unlock()
}

// Devices implements runtime.Backend: one device per nvidia.com/gpu slot
// of each Ready, schedulable node.
func (b *Backend) Devices(context.Context) ([]gpu.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.devs), nil
}

func (b *Backend) refreshDevices() {
	nodes, err := b.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	devs := devicesOf(nodes)
	key := fmt.Sprint(devs)
	b.mu.Lock()
	if key == b.lastDevs {
		b.mu.Unlock()
		return
	}
	b.devs, b.lastDevs = devs, key
	f := b.onDevs
	b.mu.Unlock()
	b.log.Info("cluster GPUs", "slots", len(devs))
	if f != nil {
		f(slices.Clone(devs))
	}
}
