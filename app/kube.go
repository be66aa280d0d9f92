package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"berth/gpu"
	"berth/runtime/kube"
	"berth/runtime/kube/podtemplate"
	"berth/store"
)

// Kubernetes is the Kubernetes runtime's configuration (berth serve
// --runtime kubernetes and its flags; Config.Backend = OnKubernetes(…)).
type Kubernetes struct {
	// REST reaches the cluster (tests: an impersonated ServiceAccount).
	// nil: from Kubeconfig, else KUBECONFIG or ~/.kube/config, else the
	// in-cluster service account when Berth runs in a Pod.
	REST       *rest.Config
	Kubeconfig string
	// Namespace of Berth's objects; "": the kubeconfig's (in a Pod, its
	// own).
	Namespace string
	// AdvertiseURL is where workers in the cluster reach Berth's worker
	// protocol, e.g. http://berth.berth.svc:8080 (berth serve requires it).
	// "": the API's own URL, right only when the workers run on this host
	// (tests acting as the kubelet).
	AdvertiseURL string
	// WorkerAddr, when set, is a second listener serving only the worker
	// protocol (job-take, job-done, ping …), the one the Service worker
	// Pods reach: the API, management and dashboard stay on Addr, out of
	// the workers' reach (deploy/kubernetes: 0.0.0.0:8081, Service
	// berth-worker). "": workers use the API's listener.
	WorkerAddr string
	// StorageClass and VolumeAccessMode of volume claims, ServiceType of
	// pods' ports: kube.Config's.
	StorageClass     string
	VolumeAccessMode string
	ServiceType      string
	// SelfPod and SelfNamespace are Berth's own Pod in the cluster
	// (POD_NAME and POD_NAMESPACE, set by deploy/kubernetes from the
	// downward API): its StatefulSet owns the worker Pods. "": none.
	SelfPod, SelfNamespace string
	// PodTemplate is the operator's Pod template file (berth serve
	// --kube-pod-template), merged into every Pod Berth makes; a file
	// that does not parse, or sets a field Berth owns, fails the start
	// naming the field. "": the defaults only (docs/kubernetes.md,
	// "Operator Pod template").
	PodTemplate string
	// ModelsImage runs the model download Jobs (Berth's own image); "":
	// Berth's own container's when it runs in the cluster (SelfPod).
	// ModelsStorageClass ("": StorageClass) and ModelsAccessMode ("":
	// ReadWriteMany) are the models claim's (docs/models.md).
	ModelsImage        string
	ModelsStorageClass string
	ModelsAccessMode   string
}

// RESTConfig is the cluster configuration k names: REST, or the kubeconfig
// (Kubeconfig, KUBECONFIG, ~/.kube/config), or the in-cluster one; and
// the namespace (Namespace, or the configuration's).
func (k *Kubernetes) RESTConfig() (*rest.Config, string, error) {
	if k.REST != nil {
		if k.Namespace == "" {
			return nil, "", errors.New("kubernetes: a namespace is required with a REST config")
		}
		return k.REST, k.Namespace, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.Kubeconfig != "" && k.Kubeconfig != os.Getenv("KUBECONFIG") {
		rules.ExplicitPath = k.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("cluster configuration: %w", err)
	}
	ns := k.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("namespace: %w", err)
		}
	}
	return rc, ns, nil
}

// startKubernetes makes the supervisor on the Kubernetes backend: the GPUs
// are the cluster's nodes' slots (followed as nodes come and go), and
// workers reach Berth at the advertised URL, on the API's listener.
func (a *App) startKubernetes(log *slog.Logger, k *Kubernetes) error {
	var tpl *podtemplate.Template
	if k.PodTemplate != "" {
		var err error
		if tpl, err = podtemplate.Load(k.PodTemplate); err != nil {
			return fmt.Errorf("kubernetes runtime: %w", err)
		}
	}
	rc, ns, err := k.RESTConfig()
	if err != nil {
		return fmt.Errorf("kubernetes runtime: %w", err)
	}
	rc = rest.CopyConfig(rc)
	// client-go's default (5 requests/s) would take minutes to scale
	// hundreds of workers; Berth's load is bursts of creates and deletes.
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := a.db
	kb, err := kube.New(ctx, kube.Config{
		REST: rc, Namespace: ns, Instance: a.inst, Logger: log,
		StorageClass: k.StorageClass, NetworkAccessMode: corev1.PersistentVolumeAccessMode(k.VolumeAccessMode),
		ServiceType: corev1.ServiceType(k.ServiceType), SelfPod: k.SelfPod, SelfNamespace: k.SelfNamespace,
		PodTemplate: tpl,
		NetworkVolumeGB: func(id string) (int, error) {
			var v store.NetworkVolume
			err := db.View(func(tx *store.Tx) error { return tx.Get(store.Volumes, id, &v) })
			return v.Size, err
		},
	})
	if err != nil {
		return fmt.Errorf("kubernetes runtime: %w", err)
	}
	a.closers = append(a.closers, kb.Close)
	a.backend, a.volumes = kb, kb
	a.startKubeModels(kb, log) // before the supervisor: Caps.Models
	devs, _ := kb.Devices(ctx)
	a.gpus = gpu.NewAllocator(devs)
	kb.OnCluster(a.gpus.SetCluster)
	if k.WorkerAddr != "" {
		if a.workerLn, err = net.Listen("tcp", k.WorkerAddr); err != nil {
			return fmt.Errorf("kubernetes runtime: worker listener: %w", err)
		}
		a.closers = append(a.closers, func() { a.workerLn.Close() })
	}
	base := strings.TrimRight(k.AdvertiseURL, "/")
	if base == "" {
		base = a.URL()
	}
	log.Info("kubernetes runtime", "namespace", ns, "gpuSlots", len(devs), "advertise", base, "podTemplate", k.PodTemplate)
	return a.newSupervisor(log, base)
}

// startKubeModels fills the models claim with the endpoints' models, one
// Job each (runtime/kube's Models), for the same model sync as Docker's.
func (a *App) startKubeModels(kb *kube.Backend, log *slog.Logger) {
	k, m := a.cfg.Backend.Kubernetes(), a.cfg.Models
	gb := int((m.MaxBytes + 1<<30 - 1) >> 30)
	km := kb.StartModels(kube.ModelsConfig{
		Image: k.ModelsImage, Hub: m.Endpoint, Token: a.hfToken, ClaimGB: gb,
		StorageClass: k.ModelsStorageClass, AccessMode: corev1.PersistentVolumeAccessMode(k.ModelsAccessMode),
		Slots: m.Slots, BytesPerSecond: m.BytesPerSecond, MinBackoff: m.MinBackoff,
	})
	a.closers = append(a.closers, km.Close)
	a.kubeModels = km
	a.newModelSync(km, log)
}
