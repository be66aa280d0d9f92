package kubetest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ConfigError is what a kubelet reports as CreateContainerConfigError: the
// container's configuration names what it cannot provide.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

// ContainerEnv is the environment a kubelet gives ctr of Pod p: its env
// values, and each secretKeyRef read from its Secret in p's namespace, as
// "NAME=value". A Secret or key that does not exist (and is not optional)
// is a ConfigError, as the kubelet's `secret "x" not found`; any other
// valueFrom is refused (the test kubelets do not provide it).
func ContainerEnv(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, ctr corev1.Container) ([]string, error) {
	var env []string
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			optional := ref.Optional != nil && *ref.Optional
			sec, err := cs.CoreV1().Secrets(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) && optional:
				continue
			case apierrors.IsNotFound(err):
				return nil, &ConfigError{fmt.Sprintf("secret %q not found", ref.Name)}
			case err != nil:
				return nil, fmt.Errorf("env %s: secret %s: %w", e.Name, ref.Name, err)
			}
			v, ok := sec.Data[ref.Key]
			if !ok && !optional {
				return nil, &ConfigError{fmt.Sprintf("couldn't find key %s in Secret %s/%s", ref.Key, p.Namespace, ref.Name)}
			}
			if ok {
				env = append(env, e.Name+"="+string(v))
			}
		default:
			return nil, fmt.Errorf("env %s: only secretKeyRef is supported by the test kubelet", e.Name)
		}
	}
	return env, nil
}

// CheckRunnable refuses a Pod the test kubelet will not run because a
// real node could not run it safely: a memory-backed emptyDir (a /dev/shm)
// without a sizeLimit, which may take all of the node's memory.
func CheckRunnable(p *corev1.Pod) error {
	for _, v := range p.Spec.Volumes {
		if d := v.EmptyDir; d != nil && d.Medium == corev1.StorageMediumMemory && (d.SizeLimit == nil || d.SizeLimit.IsZero()) {
			return &ConfigError{fmt.Sprintf("volume %s: a memory-backed emptyDir without sizeLimit may take all of the node's memory", v.Name)}
		}
	}
	return nil
}
