package kube

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"berth/gpu"
	"berth/runtime"
)

func testNode(name string, gpus int64, product, mem string, ready, cordoned bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec: corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ready]}}}}
	if gpus > 0 {
		n.Status.Allocatable[gpuResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	if product != "" {
		n.Labels[labelGPUProduct] = product
	}
	if mem != "" {
		n.Labels[labelGPUMemory] = mem
	}
	return n
}

// TestDevicesOf: every GPU node's slots, typed by the product label; a
// not Ready or cordoned node's are counted but Unschedulable.
func TestDevicesOf(t *testing.T) {
	devs := devicesOf([]*corev1.Node{
		testNode("b-4090", 2, "NVIDIA-GeForce-RTX-4090", "24564", true, false),
		testNode("a-a100", 1, "NVIDIA-A100-SXM4-80GB", "81920", true, false),
		testNode("cpu", 0, "", "", true, false),
		testNode("down", 1, "NVIDIA-L4", "", false, false),
		testNode("cordoned", 1, "NVIDIA-L4", "", true, true),
		testNode("unlabelled", 1, "", "", true, false),
	})
	var got []string
	for _, d := range devs {
		got = append(got, fmt.Sprintf("%s|%s|%s|%v", d.UUID, d.TypeID, d.Node, d.Unschedulable))
	}
	want := []string{
		"a-a100/gpu0|NVIDIA A100-SXM4-80GB|a-a100|false",
		"b-4090/gpu0|NVIDIA GeForce RTX 4090|b-4090|false",
		"b-4090/gpu1|NVIDIA GeForce RTX 4090|b-4090|false",
		"cordoned/gpu0|NVIDIA L4|cordoned|true",
		"down/gpu0|NVIDIA L4|down|true",
		"unlabelled/gpu0|NVIDIA GPU|unlabelled|false",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("devices\n%v\nwant\n%v", got, want)
	}
	if devs[0].MemoryMiB != 81920 || devs[2].Index != 2 {
		t.Fatalf("memory or index: %+v", devs)
	}
}

// TestGPUAffinity: a node of the chosen type, by product (every product
// label of that type), never by name; memory only for a type the
// catalogue lacks.
func TestGPUAffinity(t *testing.T) {
	nodes := []*corev1.Node{
		testNode("n1", 2, "NVIDIA-GeForce-RTX-4090", "24564", true, false),
		testNode("n2", 2, "NVIDIA-GeForce-RTX-4090-SHARED", "24564", true, false),
		testNode("n3", 1, "NVIDIA-A100-SXM4-80GB", "81920", false, false),
		testNode("n4", 1, "Acme-X1", "24576", true, false),
		testNode("n5", 1, "Acme-X1", "49152", true, false),
		testNode("n6", 1, "", "", true, false),
		testNode("cpu", 0, "NVIDIA-GeForce-RTX-4090", "", true, false),
	}
	devs := devicesOf(nodes)
	of := func(node string) []gpu.Device {
		i := slices.IndexFunc(devs, func(d gpu.Device) bool { return d.Node == node })
		return devs[i : i+1]
	}
	req := func(key string, op corev1.NodeSelectorOperator, vals ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: vals}
	}
	tests := []struct {
		name string
		devs []gpu.Device
		want []corev1.NodeSelectorRequirement
	}{
		{"a catalogue type: its products", of("n1"), []corev1.NodeSelectorRequirement{
			req(labelGPUProduct, corev1.NodeSelectorOpIn, "NVIDIA-GeForce-RTX-4090", "NVIDIA-GeForce-RTX-4090-SHARED")}},
		{"a not Ready node's product still", of("n3"), []corev1.NodeSelectorRequirement{
			req(labelGPUProduct, corev1.NodeSelectorOpIn, "NVIDIA-A100-SXM4-80GB")}},
		{"an unknown product: its memory too", of("n5"), []corev1.NodeSelectorRequirement{
			req(labelGPUProduct, corev1.NodeSelectorOpIn, "Acme-X1"), req(labelGPUMemory, corev1.NodeSelectorOpIn, "49152")}},
		{"no product label", of("n6"), []corev1.NodeSelectorRequirement{req(labelGPUProduct, corev1.NodeSelectorOpDoesNotExist)}},
	}
	for _, tc := range tests {
		term := gpuAffinity(tc.devs, nodes)
		if len(term.MatchFields) > 0 {
			t.Errorf("%s: pinned by %+v", tc.name, term.MatchFields)
		}
		if !reflect.DeepEqual(term.MatchExpressions, tc.want) {
			t.Errorf("%s: %+v\nwant %+v", tc.name, term.MatchExpressions, tc.want)
		}
		if typ := wantedType(&corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}}}}}); typ != tc.devs[0].TypeID {
			t.Errorf("%s: the Pod's type read back is %q, want %q", tc.name, typ, tc.devs[0].TypeID)
		}
	}
}

type podOpt func(*corev1.Pod)

func testPod(name string, gpus int64, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "other", UID: types.UID("uid-" + name)},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if gpus > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpuResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{gpuResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func on(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }
func phase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}
func worker(id, instance, slots string) podOpt {
	return func(p *corev1.Pod) {
		p.Namespace = "berth"
		p.Labels = map[string]string{runtime.LabelManaged: "true", runtime.LabelDataDir: instance,
			runtime.LabelKind: runtime.KindWorker, runtime.LabelWorker: id}
		p.Annotations = map[string]string{runtime.LabelGPUs: slots}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: labelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-GeForce-RTX-4090"}}}}}}}}
	}
}
func pinned(node string) podOpt {
	return func(p *corev1.Pod) {
		t := &p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
		t.MatchFields = []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}
	}
}

// TestUsesOf: what holds GPUs is every bound, unfinished Pod's request —
// this Berth's under their holder, others' (another Berth's too) as
// another workload's — and this Berth's waiting Pods; each Pod once.
func TestUsesOf(t *testing.T) {
	const rtx = "NVIDIA GeForce RTX 4090"
	initOnly := testPod("init", 0, on("n1"))
	initOnly.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{gpuResource: resource.MustParse("3")}}}}
	w1 := testPod("berth-w1", 1, worker("w1", "me", "n1/gpu0"), on("n1"))
	w2 := testPod("berth-w2", 2, worker("w2", "me", "n1/gpu0,n1/gpu1"), phase(corev1.PodPending))
	w1unbound := w1.DeepCopy()
	w1unbound.Spec.NodeName = "" // the own informer has not seen the binding yet
	bound := []*corev1.Pod{
		testPod("train", 2, on("n2")),
		testPod("cpu-only", 0, on("n2")),
		testPod("done", 1, on("n2"), phase(corev1.PodSucceeded)),
		testPod("failed", 1, on("n2"), phase(corev1.PodFailed)),
		testPod("theirs", 1, worker("x", "another-berth", "n3/gpu0"), on("n3")),
		initOnly,
		w1,
	}
	own := []*corev1.Pod{w1unbound, w2, testPod("berth-cpu", 0, worker("w3", "me", ""), phase(corev1.PodPending))}
	waiting := testPod("queued", 1, phase(corev1.PodPending)) // another workload's, not placed: holds nothing yet
	got := usesOf(append(bound, waiting), own, "me")
	want := []gpu.Use{
		{Holder: "w2", TypeID: rtx, Count: 2, Slots: []string{"n1/gpu0", "n1/gpu1"}},
		{Node: "n1", Count: 3},
		{Holder: "w1", Node: "n1", TypeID: rtx, Count: 1, Slots: []string{"n1/gpu0"}},
		{Node: "n2", Count: 2},
		{Node: "n3", Count: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("uses\n%+v\nwant\n%+v", got, want)
	}
	// The cluster-wide informer keeps Pods slim: the same uses.
	var slimmed []*corev1.Pod
	for _, p := range append(bound, waiting) {
		s, _ := slim(p)
		slimmed = append(slimmed, s.(*corev1.Pod))
	}
	if got := usesOf(slimmed, own, "me"); !reflect.DeepEqual(got, want) {
		t.Fatalf("uses of slim pods\n%+v\nwant\n%+v", got, want)
	}
}

// TestStranded: a waiting worker Pod bound or pinned to a node that is
// gone is replaced; one the scheduler may still place, a running one, one
// being deleted or a user's pod is not.
func TestStranded(t *testing.T) {
	nodes := []*corev1.Node{testNode("n1", 1, "NVIDIA-GeForce-RTX-4090", "", true, false)}
	pending := phase(corev1.PodPending)
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }
	userPod := func(p *corev1.Pod) { p.Labels[runtime.LabelKind] = runtime.KindPod }
	tests := []struct {
		pod  *corev1.Pod
		want bool
	}{
		{testPod("bound-gone", 1, worker("a", "me", ""), on("gone"), pending), true},
		{testPod("pinned-gone", 1, worker("b", "me", ""), pinned("gone"), pending), true},
		{testPod("bound-here", 1, worker("c", "me", ""), on("n1"), pending), false},
		{testPod("pinned-here", 1, worker("d", "me", ""), pinned("n1"), pending), false},
		{testPod("unplaced", 1, worker("e", "me", ""), pending), false},
		{testPod("running-gone", 1, worker("f", "me", ""), on("gone")), false},
		{testPod("deleting-gone", 1, worker("g", "me", ""), on("gone"), pending, deleting), false},
		{testPod("user-pod-gone", 1, worker("h", "me", ""), on("gone"), pending, userPod), false},
	}
	var own, want []*corev1.Pod
	for _, tc := range tests {
		own = append(own, tc.pod)
		if tc.want {
			want = append(want, tc.pod)
		}
	}
	got := stranded(own, nodes)
	if !slices.Equal(got, want) {
		var names []string
		for _, p := range got {
			names = append(names, p.Name)
		}
		t.Fatalf("stranded %v, want bound-gone and pinned-gone", names)
	}
}
