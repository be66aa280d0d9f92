package kube

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/runtime"
)

// What a worker Pod asks of its node and what it carries beside its
// container: requests (QoS), /dev/shm, the Secret of its credentials,
// Berth's owner and the app.kubernetes.io labels. GPU placement is
// elsewhere (pods.go).

// The app.kubernetes.io labels on every object Berth makes, beside the
// berth.* labels adoption reads.
const (
	labelAppName      = "app.kubernetes.io/name"
	labelAppInstance  = "app.kubernetes.io/instance"
	labelAppComponent = "app.kubernetes.io/component"
	labelAppManagedBy = "app.kubernetes.io/managed-by"
)

// Components (app.kubernetes.io/component) of what Berth makes.
const (
	componentWorker      = "worker"
	componentPod         = "pod"
	componentCredentials = "worker-credentials"
	componentPullSecret  = "registry-login"
	componentVolume      = "volume"
	componentService     = "pod-ports"
)

// objectLabels are the labels of an object of component: Berth's own
// (berth.managed, berth.instance) and the app.kubernetes.io ones.
func (b *Backend) objectLabels(component string) map[string]string {
	return map[string]string{
		runtime.LabelManaged: "true", runtime.LabelDataDir: b.cfg.Instance,
		labelAppName: "berth", labelAppInstance: b.cfg.Instance, labelAppComponent: component, labelAppManagedBy: "berth",
	}
}

// ephemeralRequestGiB is the most of containerDiskInGb a Pod requests:
// it is limited at containerDiskInGb, but a node need not set all of it
// aside (a 50 GB default on a 100 GB node would fit one worker).
const ephemeralRequestGiB = 10

// setResources sets what the container requests: spec's vCPUs and memory
// (requests without limits: the Pod is Burstable, see docs/kubernetes.md),
// and ephemeral storage requested at min(containerDiskInGb, 10 GiB) and
// limited at containerDiskInGb.
func setResources(c *corev1.Container, spec runtime.Spec) {
	if spec.VCPUs > 0 {
		c.Resources.Requests[corev1.ResourceCPU] = *resource.NewQuantity(int64(spec.VCPUs), resource.DecimalSI)
	}
	if spec.MemoryMiB > 0 {
		c.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(int64(spec.MemoryMiB)<<20, resource.BinarySI)
	}
	if spec.ContainerDiskGB > 0 {
		c.Resources.Limits[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(spec.ContainerDiskGB)<<30, resource.BinarySI)
		c.Resources.Requests[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(min(spec.ContainerDiskGB, ephemeralRequestGiB))<<30, resource.BinarySI)
	}
}

// shmVolume is the name of the /dev/shm volume.
const shmVolume = "dshm"

// addShm mounts a memory-backed emptyDir of spec.ShmMiB at /dev/shm (the
// container runtime's own is 64 MiB). Its sizeLimit caps the tmpfs; what
// is written there counts as the Pod's memory.
func addShm(pod *corev1.Pod, c *corev1.Container, spec runtime.Spec) {
	if spec.ShmMiB <= 0 {
		return
	}
	size := resource.NewQuantity(int64(spec.ShmMiB)<<20, resource.BinarySI)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: shmVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: size}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: shmVolume, MountPath: "/dev/shm"})
}

// secretEnv moves spec's SecretEnv entries out of the container's env
// into a Secret named like the Pod, referred to by secretKeyRef; it
// returns the Secret to create (nil when there is none).
func (b *Backend) secretEnv(c *corev1.Container, spec runtime.Spec) *corev1.Secret {
	var sec *corev1.Secret
	for i := range c.Env {
		e := &c.Env[i]
		if !slices.Contains(spec.SecretEnv, e.Name) {
			continue
		}
		if sec == nil {
			sec = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: b.cfg.Namespace, Labels: b.objectLabels(componentCredentials)},
				Type:       corev1.SecretTypeOpaque,
				Data:       map[string][]byte{},
			}
		}
		sec.Data[e.Name] = []byte(e.Value)
		e.Value, e.ValueFrom = "", &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: spec.Name}, Key: e.Name}}
	}
	return sec
}

// createSecret makes the Secret of a Pod's credentials before the Pod, so
// the kubelet finds it at once; ownSecret then makes the Pod its owner.
// One left by an earlier attempt is replaced. It returns the Secret made.
func (b *Backend) createSecret(ctx context.Context, sec *corev1.Secret) (*corev1.Secret, error) {
	secrets := b.cs.CoreV1().Secrets(b.cfg.Namespace)
	made, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if derr := secrets.Delete(ctx, sec.Name, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
			return nil, fmt.Errorf("replace secret %s: %w", sec.Name, derr)
		}
		made, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create secret %s: %w", sec.Name, err)
	}
	return made, nil
}

// ownSecret makes the Pod the owner of its Secret (made: as createSecret
// returned it, so no read is needed): the garbage collector deletes the
// Secret with the Pod.
func (b *Backend) ownSecret(ctx context.Context, made *corev1.Secret, pod *corev1.Pod) error {
	made.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
	if _, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Update(ctx, made, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("secret %s: owner: %w", made.Name, err)
	}
	return nil
}

// deleteSecret removes a Secret whose Pod could not be made.
func (b *Backend) deleteSecret(ctx context.Context, name string) {
	err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		b.log.Warn("delete the secret of a pod not made", "secret", name, "err", err)
	}
}

// findOwner is the StatefulSet that owns Berth's own Pod (Config.SelfPod),
// for the owner reference of the Pods Berth makes: deleting it deletes
// them. nil when Berth runs outside the cluster, in another namespace
// (an owner must be in its dependents' namespace), or in a Pod no
// StatefulSet controls.
func (b *Backend) findOwner(ctx context.Context) (*metav1.OwnerReference, error) {
	if b.cfg.SelfPod == "" {
		return nil, nil
	}
	if b.cfg.SelfNamespace != "" && b.cfg.SelfNamespace != b.cfg.Namespace {
		b.log.Info("worker pods have no owner: Berth's own Pod is in another namespace", "pod", b.cfg.SelfPod, "namespace", b.cfg.SelfNamespace)
		return nil, nil
	}
	self, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Get(ctx, b.cfg.SelfPod, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("find the owner of worker pods: own pod %s: %w", b.cfg.SelfPod, err)
	}
	for _, r := range self.OwnerReferences {
		if r.Kind == "StatefulSet" && r.Controller != nil && *r.Controller {
			// Not a controller reference: the StatefulSet controller
			// leaves Pods it does not control alone.
			return &metav1.OwnerReference{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID}, nil
		}
	}
	b.log.Info("worker pods have no owner: Berth's own Pod is not a StatefulSet's", "pod", b.cfg.SelfPod)
	return nil, nil
}

// checkTemplate asks the API server to admit, without storing it
// (dryRun), a Pod with the operator's template merged, so what the
// cluster refuses in it — a RuntimeClass or PriorityClass that does not
// exist, a value its validation rejects — is in the log at start rather
// than first at a worker's start (where the endpoint says it too). Not
// fatal: the class may be made later, and a quota may refuse the probe
// for reasons of the moment.
func (b *Backend) checkTemplate(ctx context.Context) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "berth-pod-template-check", Namespace: b.cfg.Namespace, Labels: b.objectLabels(componentWorker)},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr(false),
			Containers: []corev1.Container{{Name: container, Image: "berth-pod-template-check"}}},
	}
	if err := b.cfg.PodTemplate.Apply(pod); err != nil {
		b.log.Warn("the operator's pod template does not merge into a plain pod", "err", err)
		return
	}
	_, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.log.Warn("the cluster refuses a pod made with the operator's pod template: workers will not start until this is fixed", "err", err)
		return
	}
	b.log.Info("the cluster admits a pod made with the operator's pod template (dry run)")
}
