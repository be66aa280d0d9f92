package kubetest

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeLeaseSeconds is the duration of the Leases kwok renews for its
// nodes (a quarter of it apart): the nodes' heartbeat.
const NodeLeaseSeconds = 40

// GPUResource is what NVIDIA's device plugin makes allocatable.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// The labels NVIDIA's GPU Feature Discovery puts on a GPU node.
const (
	LabelGPUProduct = "nvidia.com/gpu.product" // e.g. NVIDIA-GeForce-RTX-4090 (spaces as dashes)
	LabelGPUMemory  = "nvidia.com/gpu.memory"  // MiB per GPU, e.g. 24564
	LabelGPUCount   = "nvidia.com/gpu.count"
	LabelGPUPresent = "nvidia.com/gpu.present"
)

// NodeSpec describes a fake node. The zero value is a CPU-only node with
// 32 CPUs and 128 GiB managed by kwok.
type NodeSpec struct {
	// Name defaults to gpu-N or cpu-N (testkubelet-… with TestKubelet).
	Name string
	// GPUs is the node's allocatable nvidia.com/gpu; 0 for a CPU-only node.
	GPUs int
	// GPUProduct and GPUMemoryMiB become the nvidia.com/gpu.product and
	// nvidia.com/gpu.memory labels of a GPU node.
	GPUProduct   string
	GPUMemoryMiB int
	// CPU, Memory, Disk (ephemeral-storage) and Pods are allocatable
	// quantities (defaults 32, 128Gi, 128Gi, 110: a homelab GPU box's, so
	// a worker reserving a whole 50 GB container disk would show).
	CPU, Memory, Disk string
	Pods              int
	// Labels and Taints are added to the node.
	Labels map[string]string
	Taints []corev1.Taint
	// TestKubelet makes the test the kubelet of the pods bound to this node:
	// kwok keeps the node Ready but leaves those pods' status and deletion
	// to the test (see Kubelet). The name then starts with testkubelet-.
	TestKubelet bool
}

// AddNode creates a node, waits until it is Ready and schedulable, and
// deletes it when the test ends.
func (c *Cluster) AddNode(tb testing.TB, spec NodeSpec) *corev1.Node {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := c.CreateNode(ctx, spec)
	if err != nil {
		tb.Fatalf("kubetest: add node: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := c.AdminClient.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			tb.Errorf("kubetest: delete node %s: %v", n.Name, err)
		}
	})
	return n
}

// CreateNode creates a node and waits until it is Ready and schedulable;
// the caller deletes it. Most tests use AddNode.
func (c *Cluster) CreateNode(ctx context.Context, spec NodeSpec) (*corev1.Node, error) {
	seq := c.seq.Add(1)
	name := spec.Name
	if name == "" {
		kind := "cpu"
		if spec.GPUs > 0 {
			kind = "gpu"
		}
		name = fmt.Sprintf("%s-%d", kind, seq)
	}
	if spec.TestKubelet {
		name = TestKubeletPrefix + name
	}
	cpu, mem, disk, pods := spec.CPU, spec.Memory, spec.Disk, spec.Pods
	if cpu == "" {
		cpu = "32"
	}
	if mem == "" {
		mem = "128Gi"
	}
	if disk == "" {
		disk = "128Gi"
	}
	if pods == 0 {
		pods = 110
	}
	alloc := corev1.ResourceList{}
	for k, v := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, corev1.ResourcePods: strconv.Itoa(pods),
		corev1.ResourceEphemeralStorage: disk,
	} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("node %s: %s %q: %w", name, k, v, err)
		}
		alloc[k] = q
	}
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
	}
	if spec.GPUs > 0 {
		alloc[GPUResource] = *resource.NewQuantity(int64(spec.GPUs), resource.DecimalSI)
		labels[LabelGPUPresent] = "true"
		labels[LabelGPUCount] = strconv.Itoa(spec.GPUs)
		if spec.GPUProduct != "" {
			labels[LabelGPUProduct] = spec.GPUProduct
		}
		if spec.GPUMemoryMiB > 0 {
			labels[LabelGPUMemory] = strconv.Itoa(spec.GPUMemoryMiB)
		}
	}
	maps.Copy(labels, spec.Labels)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Spec: corev1.NodeSpec{Taints: spec.Taints},
		Status: corev1.NodeStatus{
			Capacity: alloc, Allocatable: alloc.DeepCopy(),
			// pods/log reaches the kit's kubelet log server (kwok adds
			// the InternalIP, 127.0.0.1).
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(c.kubelet.port)}},
		},
	}
	if _, err := c.AdminClient.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create node %s: %w", name, err)
	}
	// kwok marks it Ready; the node lifecycle controller then lifts the
	// not-ready taint that admission put on the new node.
	var got *corev1.Node
	err := waitFor(ctx, "node "+name+" Ready and schedulable", func(ctx context.Context) (bool, error) {
		n, err := c.AdminClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = n
		return nodeReady(n) && !hasTaint(n, corev1.TaintNodeNotReady), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w; kwok log ends:\n%s", err, c.proc("kwok").tail(20))
	}
	return got, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
