package kube

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"berth/runtime"
	"berth/runtime/kube/podtemplate"
)

// The resource and node labels of NVIDIA's device plugin and GPU Feature
// Discovery.
const (
	gpuResource     = corev1.ResourceName("nvidia.com/gpu")
	labelGPUProduct = "nvidia.com/gpu.product"
	labelGPUMemory  = "nvidia.com/gpu.memory" // MiB
)

// container is the name of a Pod's one container.
const container = podtemplate.Container

// annotated are Berth's keys kept as annotations, not labels: their values
// are not label values (a list of device ids with / and ,).
var annotated = []string{runtime.LabelGPUs}

// notFound marks the API's NotFound with runtime.ErrNotFound.
func classify(err error) error {
	if apierrors.IsNotFound(err) {
		return runtime.WithKind(runtime.ErrNotFound, err)
	}
	return err
}

// Create implements runtime.Backend: the pull Secret and volume claims the
// Pod needs, the Pod, and for published ports its Service.
func (b *Backend) Create(ctx context.Context, spec runtime.Spec, _ func(string)) (runtime.Created, error) {
	pod, sec, err := b.podFor(ctx, spec)
	if err != nil {
		return runtime.Created{}, err
	}
	if sec != nil {
		// Made first, so the kubelet finds it; owned by the Pod once the
		// Pod exists (2 requests per worker).
		if sec, err = b.createSecret(ctx, sec); err != nil {
			return runtime.Created{}, err
		}
	}
	made, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if sec != nil {
			b.deleteSecret(ctx, sec.Name)
		}
		return runtime.Created{}, fmt.Errorf("create pod %s: %w", spec.Name, err)
	}
	if sec != nil {
		if err := b.ownSecret(ctx, sec, made); err != nil {
			_ = b.cs.CoreV1().Pods(b.cfg.Namespace).Delete(context.WithoutCancel(ctx), made.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
			b.deleteSecret(ctx, sec.Name)
			return runtime.Created{}, err
		}
	}
	if _, err := b.pods.Pods(b.cfg.Namespace).Get(made.Name); err != nil {
		b.mu.Lock()
		b.fresh[made.Name] = struct{}{}
		b.mu.Unlock()
	}
	if spec.Publish && len(pod.Spec.Containers[0].Ports) > 0 {
		if err := b.createService(ctx, made); err != nil {
			_ = b.cs.CoreV1().Pods(b.cfg.Namespace).Delete(context.WithoutCancel(ctx), made.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
			return runtime.Created{}, err
		}
	}
	return runtime.Created{ID: made.Name}, nil
}

// podFor is the Pod of spec, with what it refers to made first, and the
// Secret of its credentials (nil when it has none), to make before it.
func (b *Backend) podFor(ctx context.Context, spec runtime.Spec) (*corev1.Pod, *corev1.Secret, error) {
	component := componentPod
	if spec.Labels[runtime.LabelKind] == runtime.KindWorker {
		component = componentWorker
	}
	lbls := b.objectLabels(component)
	ann := map[string]string{}
	for k, v := range spec.Labels {
		if slices.Contains(annotated, k) {
			if v != "" {
				ann[k] = v
			}
			continue
		}
		lbls[k] = v
	}
	c := corev1.Container{
		Name: container, Image: spec.Image, Command: spec.Entrypoint, Args: spec.Cmd,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	for _, p := range spec.Ports {
		cp, err := containerPort(p)
		if err != nil {
			return nil, nil, err
		}
		c.Ports = append(c.Ports, cp)
	}
	setResources(&c, spec)
	sec := b.secretEnv(&c, spec)
	grace := int64(math.Ceil(spec.StopGrace.Seconds()))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: b.cfg.Namespace, Labels: lbls, Annotations: ann},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			EnableServiceLinks:            ptr(false),
			AutomountServiceAccountToken:  ptr(false),
		},
	}
	if component == componentWorker && b.owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*b.owner}
	}
	if len(spec.GPUs) > 0 {
		node := spec.GPUs[0].Node
		for _, d := range spec.GPUs {
			if d.Node != node {
				return nil, nil, fmt.Errorf("create pod %s: its GPUs are on nodes %q and %q: an allocation must be on one node", spec.Name, node, d.Node)
			}
		}
		n := *resource.NewQuantity(int64(len(spec.GPUs)), resource.DecimalSI)
		c.Resources.Limits[gpuResource] = n
		nodes, err := b.nodes.List(labels.Everything())
		if err != nil {
			return nil, nil, fmt.Errorf("create pod %s: nodes: %w", spec.Name, err)
		}
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{gpuAffinity(spec.GPUs, nodes)}},
		}}
		pod.Spec.Tolerations = []corev1.Toleration{{Key: string(gpuResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}
	if spec.Auth != nil && spec.AuthID != "" {
		name, err := b.ensurePullSecret(ctx, spec.AuthID, spec.Image, *spec.Auth)
		if err != nil {
			return nil, nil, err
		}
		pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: name}}
	}
	for _, m := range spec.Mounts {
		if m.Kind == runtime.MountModels {
			// The models claim (made by StartModels' passes before any
			// model is complete), read-only: workers never write the cache.
			vol := "vol-" + strconv.Itoa(len(pod.Spec.Volumes))
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ModelsClaim, ReadOnly: true}}})
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: m.Target, ReadOnly: true})
			continue
		}
		claim, err := b.ensureClaim(ctx, m)
		if err != nil {
			return nil, nil, err
		}
		vol := "vol-" + strconv.Itoa(len(pod.Spec.Volumes))
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: m.Target})
	}
	addShm(pod, &c, spec)
	pod.Spec.Containers = []corev1.Container{c}
	if err := b.cfg.PodTemplate.Apply(pod); err != nil {
		return nil, nil, fmt.Errorf("create pod %s: %w", spec.Name, err)
	}
	return pod, sec, nil
}

// containerPort parses "8888/http", "22/tcp", "53/udp".
func containerPort(s string) (corev1.ContainerPort, error) {
	num, proto, _ := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || n == 0 {
		return corev1.ContainerPort{}, fmt.Errorf("port %q: invalid number", s)
	}
	cp := corev1.ContainerPort{ContainerPort: int32(n), Protocol: corev1.ProtocolTCP, Name: "p" + num}
	switch strings.ToLower(proto) {
	case "", "http", "https", "tcp":
	case "udp":
		cp.Protocol, cp.Name = corev1.ProtocolUDP, "u"+num
	default:
		return corev1.ContainerPort{}, fmt.Errorf("port %q: unknown protocol %q", s, proto)
	}
	return cp, nil
}

// createService publishes a pod's ports: a Service of Config.ServiceType
// selecting it, owned by the Pod so it goes with it.
func (b *Backend) createService(ctx context.Context, p *corev1.Pod) error {
	lbls := maps.Clone(p.Labels)
	lbls[labelAppComponent] = componentService
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: b.cfg.Namespace, Labels: lbls,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}},
		},
		Spec: corev1.ServiceSpec{Type: b.cfg.ServiceType, Selector: map[string]string{
			runtime.LabelManaged: "true", runtime.LabelDataDir: b.cfg.Instance, runtime.LabelPod: p.Labels[runtime.LabelPod],
		}},
	}
	for _, cp := range p.Spec.Containers[0].Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: cp.Name, Protocol: cp.Protocol, Port: cp.ContainerPort,
			TargetPort: intstr.FromInt32(cp.ContainerPort)})
	}
	svcs := b.cs.CoreV1().Services(b.cfg.Namespace)
	_, err := svcs.Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// The Service of an earlier Pod of the same name (a pod stopped
		// and started again) that the garbage collector has not removed
		// yet: it would remove it after this Pod is made, leaving the new
		// Pod without one. Replaced now.
		old, gerr := svcs.Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case gerr != nil && !apierrors.IsNotFound(gerr):
			return fmt.Errorf("service %s: %w", p.Name, gerr)
		case gerr == nil && ownedBy(old.OwnerReferences, p.UID):
			return nil
		case gerr == nil:
			derr := svcs.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}})
			if derr != nil && !apierrors.IsNotFound(derr) && !apierrors.IsConflict(derr) {
				return fmt.Errorf("replace service %s of an earlier pod: %w", p.Name, derr)
			}
		}
		_, err = svcs.Create(ctx, svc, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create service %s: %w", p.Name, err)
	}
	return nil
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == uid })
}

// ensurePullSecret keeps the registry login authID as an image pull Secret
// berth-registry-<authID> for the image's registry, and returns its name.
func (b *Backend) ensurePullSecret(ctx context.Context, authID, image string, auth runtime.RegistryAuth) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	server := reference.Domain(named)
	if server == "docker.io" {
		server = "https://index.docker.io/v1/"
	}
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{server: map[string]string{
		"username": auth.Username, "password": auth.Password,
		"auth": base64.StdEncoding.EncodeToString([]byte(auth.Username + ":" + auth.Password)),
	}}})
	name := pullSecretName(authID)
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.cfg.Namespace, Labels: b.objectLabels(componentPullSecret)},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
	secrets := b.cs.CoreV1().Secrets(b.cfg.Namespace)
	got, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := secrets.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create pull secret %s: %w", name, err)
		}
	case err != nil:
		return "", fmt.Errorf("pull secret %s: %w", name, err)
	case string(got.Data[corev1.DockerConfigJsonKey]) != string(cfg) || got.Type != want.Type:
		got.Type, got.Data = want.Type, want.Data
		if _, err := secrets.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			return "", fmt.Errorf("update pull secret %s: %w", name, err)
		}
	}
	return name, nil
}

// claimName is the PersistentVolumeClaim of a mount.
func claimName(m runtime.Mount) string {
	if m.Kind == runtime.MountPod {
		return "berth-pod-" + m.ID
	}
	return "berth-vol-" + strings.ToLower(m.ID)
}

// ensureClaim makes the mount's PersistentVolumeClaim if it is missing.
func (b *Backend) ensureClaim(ctx context.Context, m runtime.Mount) (string, error) {
	name := claimName(m)
	if b.claims != nil {
		if _, err := b.claims.PersistentVolumeClaims(b.cfg.Namespace).Get(name); err == nil {
			return name, nil // the informer has it: no request
		}
	}
	claims := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace)
	if _, err := claims.Get(ctx, name, metav1.GetOptions{}); err == nil {
		return name, nil
	} else if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("volume claim %s: %w", name, err)
	}
	size, mode := m.SizeGB, corev1.ReadWriteOnce
	if m.Kind == runtime.MountNetwork {
		mode, size = b.cfg.NetworkAccessMode, 0
		if b.cfg.NetworkVolumeGB != nil {
			size, _ = b.cfg.NetworkVolumeGB(m.ID)
		}
	}
	if size <= 0 {
		size = 10
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.cfg.Namespace, Labels: b.objectLabels(componentVolume)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(int64(size)<<30, resource.BinarySI)}},
		},
	}
	if b.cfg.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr(b.cfg.StorageClass)
	}
	if _, err := claims.Create(ctx, pvc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create volume claim %s: %w", name, err)
	}
	return name, nil
}

// Start implements runtime.Backend: a created Pod starts by itself, so
// this only says whether it runs yet (an EventStart follows otherwise).
func (b *Backend) Start(ctx context.Context, id string) (bool, error) {
	// The Pod Create just made reaches the informer's cache a moment
	// later: wait for it there rather than ask the API server (a GET per
	// new worker was a third of a scale-up's requests). Inspect reads the
	// API should the watch be slower than this.
	var deleting bool
	b.waitPod(ctx, id, 5*time.Second, func(p *corev1.Pod) bool {
		deleting = p != nil && p.DeletionTimestamp != nil
		return p != nil
	})
	in, err := b.Inspect(ctx, id)
	if err != nil {
		return false, err
	}
	if !in.Alive() {
		if deleting || in.StartedAt.IsZero() && in.FinishedAt.IsZero() {
			return false, fmt.Errorf("start pod %s: it ended (%s); a Pod is not started again: make it anew", id, in.State)
		}
		// It started by itself and already ended (a program that exits
		// at once): its die event says how, as for any exit.
		return false, nil
	}
	return in.Running, nil
}

// Stop implements runtime.Backend: the Pod is deleted with the grace (its
// volumes stay), and Stop waits until its container has ended or the Pod
// is gone (at most the grace and a minute).
func (b *Backend) Stop(ctx context.Context, id string, grace time.Duration) error {
	secs := int64(math.Ceil(grace.Seconds()))
	err := b.cs.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &secs})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", id, err)
	}
	b.waitPod(ctx, id, grace+time.Minute, func(p *corev1.Pod) bool { return p == nil || !b.instance(p).Alive() })
	return nil
}

// Remove implements runtime.Backend: the Pod is deleted at once.
func (b *Backend) Remove(ctx context.Context, id string) error {
	err := b.cs.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", id, err)
	}
	return nil
}

// Inspect implements runtime.Backend, from the informer's cache (a Pod
// just made that the cache has not seen yet is read from the API; any
// other Pod the cache lacks is gone).
func (b *Backend) Inspect(ctx context.Context, id string) (runtime.Instance, error) {
	p, err := b.pods.Pods(b.cfg.Namespace).Get(id)
	b.mu.Lock()
	_, fresh := b.fresh[id]
	b.mu.Unlock()
	if apierrors.IsNotFound(err) && fresh {
		p, err = b.cs.CoreV1().Pods(b.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
		if err == nil && !b.sel.Matches(labels.Set(p.Labels)) {
			err = apierrors.NewNotFound(corev1.Resource("pods"), id) // not this Berth's
		}
	}
	if err != nil {
		return runtime.Instance{}, classify(err)
	}
	return b.instance(p), nil
}

// List implements runtime.Backend, from the informer's cache.
func (b *Backend) List(context.Context) ([]runtime.Instance, error) {
	ps, err := b.pods.Pods(b.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	out := make([]runtime.Instance, len(ps))
	for i, p := range ps {
		out[i] = b.instance(p)
	}
	return out, nil
}

// Logs implements runtime.Backend: pods/log, follow included.
func (b *Backend) Logs(ctx context.Context, id string, follow bool, tail int) (io.ReadCloser, error) {
	opts := &corev1.PodLogOptions{Container: container, Follow: follow}
	if tail > 0 {
		opts.TailLines = ptr(int64(tail))
	}
	rc, err := b.cs.CoreV1().Pods(b.cfg.Namespace).GetLogs(id, opts).Stream(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("logs of pod %s: %w", id, err))
	}
	return rc, nil
}

// errNoPause: FlashBoot is off where Caps.Pause is false, so these are
// never called.
var errNoPause = errors.New("a Kubernetes Pod cannot be paused")

// Pause implements runtime.Backend: a Pod cannot be paused.
func (b *Backend) Pause(context.Context, string) error { return errNoPause }

// Unpause implements runtime.Backend: a Pod cannot be paused.
func (b *Backend) Unpause(context.Context, string) error { return errNoPause }

// RemovePodVolume implements runtime.Backend: the pod's claim is deleted.
func (b *Backend) RemovePodVolume(ctx context.Context, podID string) error {
	name := claimName(runtime.Mount{Kind: runtime.MountPod, ID: podID})
	err := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete volume claim %s: %w", name, err)
	}
	return nil
}

// RemoveRegistryAuth implements runtime.Backend: a deleted registry
// login's pull Secret goes (Pods that name it already have their image).
// One that does not exist is not an error.
func (b *Backend) RemoveRegistryAuth(ctx context.Context, authID string) error {
	name := pullSecretName(authID)
	err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pull secret %s: %w", name, err)
	}
	return nil
}

// pullSecretName is the pull Secret of a registry login.
func pullSecretName(authID string) string { return "berth-registry-" + strings.ToLower(authID) }

// CreateVolume implements runtime.Volumes: nothing yet. A network
// volume's claim is made when a worker or pod first mounts it
// (ensureClaim), at the volume's size then.
func (b *Backend) CreateVolume(context.Context, string, int) (runtime.VolumeStatus, error) {
	return runtime.VolumeStatus{}, nil
}

// GrowVolume implements runtime.Volumes: one merge patch of the claim's
// spec.resources.requests.storage; the storage class's driver grows the
// volume. A volume never mounted has no claim yet: nothing to grow. The
// API server's refusal (a class without allowVolumeExpansion, a claim not
// bound, a smaller size) matches runtime.ErrRefused.
func (b *Backend) GrowVolume(ctx context.Context, volumeID string, sizeGB int) error {
	name := claimName(runtime.Mount{Kind: runtime.MountNetwork, ID: volumeID})
	q := resource.NewQuantity(int64(sizeGB)<<30, resource.BinarySI)
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, q.String())
	_, err := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	switch {
	case err == nil || apierrors.IsNotFound(err):
		return nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return runtime.WithKind(runtime.ErrRefused, fmt.Errorf("the cluster refuses to grow volume claim %s to %s: %w", name, q, err))
	}
	return fmt.Errorf("grow volume claim %s to %s: %w", name, q, err)
}

// SetAsideVolume implements runtime.Volumes: the claim stays until the
// deletion is stored (RemoveVolume).
func (b *Backend) SetAsideVolume(string) error { return nil }

// RestoreVolume implements runtime.Volumes: nothing was set aside.
func (b *Backend) RestoreVolume(string) error { return nil }

// RemoveVolume implements runtime.Volumes: the claim is deleted (its data
// go with it, as the Docker runtime's directory does). One that does not
// exist is not an error.
func (b *Backend) RemoveVolume(ctx context.Context, volumeID string) error {
	name := claimName(runtime.Mount{Kind: runtime.MountNetwork, ID: volumeID})
	err := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete volume claim %s: %w", name, err)
	}
	return nil
}

// instance is a Pod as Berth sees it.
func (b *Backend) instance(p *corev1.Pod) runtime.Instance {
	in := runtime.Instance{ID: p.Name, Name: p.Name, Labels: maps.Clone(p.Labels), State: string(p.Status.Phase),
		IP: p.Status.PodIP, PublicIP: p.Status.HostIP, Env: map[string]string{}}
	if in.Labels == nil {
		in.Labels = map[string]string{}
	}
	for _, k := range annotated {
		if v := p.Annotations[k]; v != "" {
			in.Labels[k] = v
		}
	}
	if g := in.Labels[runtime.LabelGPUs]; g != "" {
		in.GPUs = strings.Split(g, ",")
	}
	if len(p.Spec.Containers) > 0 {
		in.Image = p.Spec.Containers[0].Image
		for _, e := range p.Spec.Containers[0].Env {
			in.Env[e.Name] = e.Value
		}
	}
	var cs *corev1.ContainerStatus
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == container {
			cs = &p.Status.ContainerStatuses[i]
		}
	}
	switch {
	case cs != nil && cs.State.Terminated != nil:
		t := cs.State.Terminated
		in.ExitCode, in.OOMKilled = int(t.ExitCode), t.Reason == "OOMKilled"
		in.StartedAt, in.FinishedAt = t.StartedAt.Time, t.FinishedAt.Time
		if t.ExitCode != 0 || t.Reason != "Completed" {
			in.Error = strings.TrimSpace(t.Reason + " " + t.Message)
		}
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		// Ended without a container status (evicted, its node lost).
		in.ExitCode, in.Error = -1, strings.TrimSpace(p.Status.Reason+": "+p.Status.Message)
		in.FinishedAt = time.Now()
	case cs != nil && cs.State.Running != nil:
		in.Running, in.StartedAt = true, cs.State.Running.StartedAt.Time
	default:
		in.Pending = true
		if cs != nil && cs.State.Waiting != nil {
			switch w := cs.State.Waiting; w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
				"CreateContainerConfigError", "CreateContainerError":
				in.Waiting, in.Error = runtime.WaitingImage, strings.TrimSpace(w.Reason+": "+w.Message)
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				in.Waiting, in.Error = runtime.WaitingUnschedulable, c.Message
			}
		}
		b.waitOnClaims(p, &in)
	}
	if p.DeletionTimestamp != nil {
		in.State = "Terminating"
	}
	if svc, err := b.svcs.Services(b.cfg.Namespace).Get(p.Name); err == nil {
		in.PublicPorts = map[string]int{}
		for _, sp := range svc.Spec.Ports {
			port := int(sp.Port)
			if sp.NodePort > 0 {
				port = int(sp.NodePort)
			}
			in.PublicPorts[strconv.Itoa(int(sp.Port))+"/"+strings.ToLower(string(sp.Protocol))] = port
		}
	}
	return in
}

func ptr[T any](v T) *T { return &v }
