package kubetest

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Kubelet writes pod status as a node's kubelet would, with the admin
// identity. kwok leaves a pod alone — and its status is what the test
// writes — when the pod is bound to a NodeSpec.TestKubelet node or carries
// KubeletAnnotation (TakeOver adds it). On kwok's own pods kwok may write
// after the test.
type Kubelet struct {
	client kubernetes.Interface
	logs   *kubeletServer
}

// Kubelet returns the cluster's kubelet stand-in.
func (c *Cluster) Kubelet() *Kubelet { return &Kubelet{client: c.AdminClient, logs: c.kubelet} }

// TakeOver marks a pod as the test's to run (KubeletAnnotation), so kwok
// stops writing its status. A pod bound to a kwok node may already have
// been marked Running by kwok; set the status wanted after this.
func (k *Kubelet) TakeOver(ctx context.Context, namespace, name string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"test"}}}`, KubeletAnnotation)
	_, err := k.client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// UpdateStatus reads the pod, lets mutate change its status and writes it
// (pods/status), retrying on conflicts.
func (k *Kubelet) UpdateStatus(ctx context.Context, namespace, name string, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	var out *corev1.Pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(p)
		out, err = k.client.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s status: %w", namespace, name, err)
	}
	return out, nil
}

// Running reports every container running and the pod Ready, with podIP
// (e.g. 127.0.0.1 where the test runs the worker itself; "" keeps the
// pod's IP) and, as a kubelet does, its node's InternalIP as the host IP.
func (k *Kubelet) Running(ctx context.Context, namespace, name, podIP string) (*corev1.Pod, error) {
	return k.UpdateStatus(ctx, namespace, name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		if podIP != "" {
			p.Status.PodIP, p.Status.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
		}
		if p.Status.HostIP == "" && p.Spec.NodeName != "" {
			if n, err := k.client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{}); err == nil {
				for _, a := range n.Status.Addresses {
					if a.Type == corev1.NodeInternalIP {
						p.Status.HostIP, p.Status.HostIPs = a.Address, []corev1.HostIP{{IP: a.Address}}
						break
					}
				}
			}
		}
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		p.Status.ContainerStatuses = containerStatuses(p, func(cs *corev1.ContainerStatus) {
			cs.Ready, cs.Started = true, ptrTo(true)
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		})
		setConditions(p, corev1.ConditionTrue, "", now)
	})
}

// Waiting reports every container waiting with reason and message, as the
// kubelet does for an image it cannot pull ("ErrImagePull", then
// "ImagePullBackOff") or a bad configuration ("CreateContainerConfigError").
// The pod stays Pending.
func (k *Kubelet) Waiting(ctx context.Context, namespace, name, reason, message string) (*corev1.Pod, error) {
	return k.UpdateStatus(ctx, namespace, name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodPending
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		p.Status.ContainerStatuses = containerStatuses(p, func(cs *corev1.ContainerStatus) {
			cs.Ready, cs.Started = false, ptrTo(false)
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
		})
		setConditions(p, corev1.ConditionFalse, "ContainersNotReady", now)
	})
}

// Terminated reports every container terminated with exitCode and reason
// ("Error", "OOMKilled", "Completed"); with restartPolicy Never the pod is
// then Failed (exit code ≠ 0) or Succeeded.
func (k *Kubelet) Terminated(ctx context.Context, namespace, name string, exitCode int32, reason, message string) (*corev1.Pod, error) {
	return k.UpdateStatus(ctx, namespace, name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		if exitCode != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.ContainerStatuses = containerStatuses(p, func(cs *corev1.ContainerStatus) {
			started := now
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			cs.Ready, cs.Started = false, ptrTo(false)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCode, Reason: reason, Message: message, StartedAt: started, FinishedAt: now,
			}}
		})
		setConditions(p, corev1.ConditionFalse, "PodCompleted", now)
	})
}

// FinishDeletion removes a pod whose deletion was requested, as the
// kubelet does once its containers have stopped (grace period 0).
func (k *Kubelet) FinishDeletion(ctx context.Context, namespace, name string) error {
	zero := int64(0)
	return k.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// containerStatuses returns one status per container of the spec, each
// from the pod's current one (restart count, image, id kept) changed by set.
func containerStatuses(p *corev1.Pod, set func(*corev1.ContainerStatus)) []corev1.ContainerStatus {
	old := map[string]corev1.ContainerStatus{}
	for _, cs := range p.Status.ContainerStatuses {
		old[cs.Name] = cs
	}
	var out []corev1.ContainerStatus
	for _, c := range p.Spec.Containers {
		cs, ok := old[c.Name]
		if !ok {
			cs = corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "", ContainerID: ""}
		}
		set(&cs)
		out = append(out, cs)
	}
	return out
}

// setConditions sets Initialized, Ready and ContainersReady (PodScheduled is
// the scheduler's).
func setConditions(p *corev1.Pod, ready corev1.ConditionStatus, reason string, now metav1.Time) {
	set := func(t corev1.PodConditionType, s corev1.ConditionStatus, reason string) {
		for i := range p.Status.Conditions {
			c := &p.Status.Conditions[i]
			if c.Type == t {
				if c.Status != s {
					c.LastTransitionTime = now
				}
				c.Status, c.Reason = s, reason
				return
			}
		}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now})
	}
	set(corev1.PodInitialized, corev1.ConditionTrue, "")
	set(corev1.ContainersReady, ready, reason)
	set(corev1.PodReady, ready, reason)
}

// Condition returns the pod's condition of type t, or nil.
func Condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// WaitPod polls the pod (admin) until cond holds or the timeout ends, and
// returns it: a condition with a deadline for tests.
func (c *Cluster) WaitPod(ctx context.Context, namespace, name string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *corev1.Pod
	err := waitFor(ctx, fmt.Sprintf("pod %s/%s", namespace, name), func(ctx context.Context) (bool, error) {
		p, err := c.AdminClient.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return cond(p), nil
	})
	if err != nil && last != nil {
		return last, fmt.Errorf("%w; its status: phase %s, conditions %v, containers %v", err, last.Status.Phase, last.Status.Conditions, last.Status.ContainerStatuses)
	}
	return last, err
}

// WaitPodGone polls until the pod no longer exists or the timeout ends.
func (c *Cluster) WaitPodGone(ctx context.Context, namespace, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return waitFor(ctx, fmt.Sprintf("pod %s/%s to be gone", namespace, name), func(ctx context.Context) (bool, error) {
		_, err := c.AdminClient.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
