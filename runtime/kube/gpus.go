package kube

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/gpu"
	"berth/runtime"
)

// The scheduler places, Berth accounts. A GPU Pod asks for nvidia.com/gpu
// with required node affinity on the GPU product (gpuAffinity); the
// scheduler picks the node. What is held is derived, at every change, from
// the Pods that exist (usesOf): Berth's own, bound (spec.nodeName) or
// waiting, and every other workload's bound Pods' nvidia.com/gpu requests.
// Nothing is remembered across a node's blip, cordon or deletion, or a
// restart, so nothing can be forgotten.

// typeOfNode is the gpuTypeId of a GPU node's slots: its GPU Feature
// Discovery product label, "NVIDIA GPU" without one.
func typeOfNode(n *corev1.Node) string {
	if t := gpu.TypeFromProduct(n.Labels[labelGPUProduct]); t != "" {
		return t
	}
	return "NVIDIA GPU"
}

// gpusOf is a node's allocatable nvidia.com/gpu.
func gpusOf(n *corev1.Node) int {
	q, ok := n.Status.Allocatable[gpuResource]
	if !ok {
		return 0
	}
	return int(q.Value())
}

// devicesOf is one GPU device per nvidia.com/gpu slot of each node,
// typed by its product label; the slot's id is <node>/gpu<k>. A cordoned
// or not Ready node's slots are Unschedulable: counted (its Pods hold
// theirs; it may come back), never given.
func devicesOf(nodes []*corev1.Node) []gpu.Device {
	nodes = slices.Clone(nodes)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	var out []gpu.Device
	for _, n := range nodes {
		typ := typeOfNode(n)
		mem, _ := strconv.ParseUint(n.Labels[labelGPUMemory], 10, 64)
		for k := range gpusOf(n) {
			out = append(out, gpu.Device{Index: len(out), UUID: fmt.Sprintf("%s/gpu%d", n.Name, k), Name: typ, TypeID: typ,
				MemoryMiB: mem, Node: n.Name, Unschedulable: n.Spec.Unschedulable || !nodeReady(n)})
		}
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gpuAffinity is the node selector term of a Pod given devs: a node of
// their type — its product label In the products of that type's nodes
// (DoesNotExist for the type of nodes without one) — and, for a type the
// catalogue does not know (it joined a pool by its memory), of the chosen
// node's GPU memory. No node name: the scheduler places.
func gpuAffinity(devs []gpu.Device, nodes []*corev1.Node) corev1.NodeSelectorTerm {
	typ, mem := devs[0].TypeID, devs[0].MemoryMiB
	var products, mems []string
	for _, n := range nodes {
		if gpusOf(n) == 0 || typeOfNode(n) != typ {
			continue
		}
		if p := n.Labels[labelGPUProduct]; p != "" && !slices.Contains(products, p) {
			products = append(products, p)
		}
		if m := n.Labels[labelGPUMemory]; m != "" && !slices.Contains(mems, m) {
			if v, err := strconv.ParseUint(m, 10, 64); err == nil && v == mem {
				mems = append(mems, m)
			}
		}
	}
	sort.Strings(products)
	sort.Strings(mems)
	var term corev1.NodeSelectorTerm
	if len(products) == 0 {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: labelGPUProduct, Operator: corev1.NodeSelectorOpDoesNotExist})
	} else {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: labelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: products})
	}
	if _, known := gpu.LookupModel(typ); !known && len(mems) > 0 {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: labelGPUMemory, Operator: corev1.NodeSelectorOpIn, Values: mems})
	}
	return term
}

// gpuRequest is a Pod's effective nvidia.com/gpu request, as the
// scheduler counts it: the containers' sum or the largest init
// container's, whichever is more (a limit alone is the request).
func gpuRequest(p *corev1.Pod) int {
	of := func(c corev1.Container) int {
		if q, ok := c.Resources.Requests[gpuResource]; ok {
			return int(q.Value())
		}
		if q, ok := c.Resources.Limits[gpuResource]; ok {
			return int(q.Value())
		}
		return 0
	}
	sum, initMax := 0, 0
	for _, c := range p.Spec.Containers {
		sum += of(c)
	}
	for _, c := range p.Spec.InitContainers {
		initMax = max(initMax, of(c))
	}
	return max(sum, initMax)
}

// ended: a Pod whose containers are done holds nothing.
func ended(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// holderOf is the allocator holder of one of this Berth's Pods (its worker
// or pod id), "" for any other Pod (another Berth's included).
func holderOf(p *corev1.Pod, instance string) string {
	if p.Labels[runtime.LabelManaged] != "true" || p.Labels[runtime.LabelDataDir] != instance {
		return ""
	}
	if w := p.Labels[runtime.LabelWorker]; w != "" {
		return w
	}
	return p.Labels[runtime.LabelPod]
}

// wantedType is the gpuTypeId a Pod's GPU affinity asks for ("" when it
// has none).
func wantedType(p *corev1.Pod) string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range t.MatchExpressions {
			switch {
			case r.Key != labelGPUProduct:
			case r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0:
				return gpu.TypeFromProduct(r.Values[0])
			case r.Operator == corev1.NodeSelectorOpDoesNotExist:
				return "NVIDIA GPU"
			}
		}
	}
	return ""
}

// usesOf is what holds or waits for GPUs: every bound Pod still running
// (or starting, or terminating) that requests nvidia.com/gpu — this
// Berth's under their holder, any other as another workload's — and this
// Berth's Pods still waiting for a node. bound are the cluster's bound
// Pods, own this Berth's (bound or not); a Pod in both counts once.
func usesOf(bound, own []*corev1.Pod, instance string) []gpu.Use {
	seen := map[string]bool{}
	var out []gpu.Use
	add := func(p *corev1.Pod) {
		key := string(p.UID)
		if key == "" {
			key = p.Namespace + "/" + p.Name
		}
		n := gpuRequest(p)
		if seen[key] || n == 0 || ended(p) {
			return
		}
		h := holderOf(p, instance)
		if p.Spec.NodeName == "" && h == "" {
			return // another workload's Pod the scheduler has not placed
		}
		seen[key] = true
		u := gpu.Use{Holder: h, Node: p.Spec.NodeName, Count: n}
		if h != "" {
			u.TypeID = wantedType(p)
			if s := p.Annotations[runtime.LabelGPUs]; s != "" {
				u.Slots = strings.Split(s, ",")
			}
		}
		out = append(out, u)
	}
	// Bound first: the own informer may not have seen a binding yet.
	for _, p := range bound {
		if p.Spec.NodeName != "" {
			add(p)
		}
	}
	for _, p := range own {
		add(p)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Holder < out[j].Holder
	})
	return out
}

// pinnedNodes are the node names a Pod is bound or pinned to (an earlier
// Berth pinned Pods with matchFields metadata.name), nil when the
// scheduler may place it anywhere.
func pinnedNodes(p *corev1.Pod) []string {
	if p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []string
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		var term []string
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn {
				term = append(term, f.Values...)
			}
		}
		if len(term) == 0 {
			return nil // a term that any node may satisfy
		}
		out = append(out, term...)
	}
	return out
}

// stranded are this Berth's worker Pods that wait (Pending, not being
// deleted) for a node that no longer exists: bound to it, or pinned to
// it by an earlier Berth. They never run; replaced, their worker is made
// anew where the scheduler finds room. A pod (kind pod) is the user's and
// is left alone.
func stranded(own []*corev1.Pod, nodes []*corev1.Node) []*corev1.Pod {
	exists := map[string]bool{}
	for _, n := range nodes {
		exists[n.Name] = true
	}
	var out []*corev1.Pod
	for _, p := range own {
		if p.Labels[runtime.LabelKind] != runtime.KindWorker || p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
			continue
		}
		pins := pinnedNodes(p)
		if len(pins) > 0 && !slices.ContainsFunc(pins, func(n string) bool { return exists[n] }) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// slim keeps of a cluster Pod only what usesOf reads: the cluster-wide
// informer holds every bound Pod of the cluster.
func slim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	if p.Labels[runtime.LabelManaged] == "true" {
		out.Labels = p.Labels
		if s := p.Annotations[runtime.LabelGPUs]; s != "" {
			out.Annotations = map[string]string{runtime.LabelGPUs: s}
		}
		out.Spec.Affinity = p.Spec.Affinity
	}
	keep := func(cs []corev1.Container) []corev1.Container {
		var o []corev1.Container
		for _, c := range cs {
			r := corev1.ResourceRequirements{}
			if q, ok := c.Resources.Requests[gpuResource]; ok {
				r.Requests = corev1.ResourceList{gpuResource: q}
			}
			if q, ok := c.Resources.Limits[gpuResource]; ok {
				r.Limits = corev1.ResourceList{gpuResource: q}
			}
			o = append(o, corev1.Container{Name: c.Name, Resources: r})
		}
		return o
	}
	out.Spec.Containers, out.Spec.InitContainers = keep(p.Spec.Containers), keep(p.Spec.InitContainers)
	return out, nil
}
