package podtemplate

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// full sets every field a template may set.
const full = `
metadata:
  labels: {team: ml, app.kubernetes.io/part-of: platform}
  annotations: {example.com/cost-center: "42"}
spec:
  runtimeClassName: nvidia
  priorityClassName: gpu-high
  tolerations:
    - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}
  nodeSelector: {pool: gpu}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: zone, operator: In, values: [a]}]
          - matchExpressions: [{key: zone, operator: In, values: [b]}]
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 10
          preference: {matchExpressions: [{key: disk, operator: In, values: [nvme]}]}
  securityContext:
    fsGroup: 1000
  imagePullSecrets: [{name: mirror}]
  volumes:
    - name: cache
      emptyDir: {sizeLimit: 1Gi}
  containers:
    - name: main
      imagePullPolicy: IfNotPresent
      securityContext:
        capabilities: {drop: [NET_RAW]}
      volumeMounts:
        - {name: cache, mountPath: /cache}
`

// TestParse: what a template may say, and each refusal names its field.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, in string
		field    string // "": accepted; else the FieldError's field
		msg      string // part of the message
	}{
		{name: "empty file", in: ""},
		{name: "comments only", in: "# nothing\n"},
		{name: "every allowed field", in: full},
		{name: "JSON", in: `{"spec": {"runtimeClassName": "nvidia", "containers": [{"imagePullPolicy": "Never"}]}}`},
		{name: "the container unnamed", in: "spec: {containers: [{imagePullPolicy: Always}]}"},

		// Strict decoding.
		{name: "misspelt field", in: "spec: {runtimeClass: nvidia}", field: "spec.runtimeClass", msg: "not a field"},
		{name: "case matters", in: "spec: {RuntimeClassName: nvidia}", field: "spec.RuntimeClassName", msg: "not a field"},
		{name: "unknown nested field", in: "spec: {tolerations: [{key: a, effects: NoSchedule}]}", field: "spec.tolerations[0].effects"},
		{name: "wrong type", in: "spec: {tolerations: dedicated}", msg: "spec.tolerations"},
		{name: "not an object", in: "hello", msg: "PodTemplateSpec"},
		{name: "a key twice", in: "spec:\n  runtimeClassName: a\n  runtimeClassName: b\n", msg: "runtimeClassName"},

		// What Berth or the cluster owns.
		{name: "image", in: "spec: {containers: [{image: x}]}", field: "spec.containers[0].image", msg: "not allowed"},
		{name: "command", in: "spec: {containers: [{command: [sh]}]}", field: "spec.containers[0].command"},
		{name: "env", in: "spec: {containers: [{env: [{name: A, value: b}]}]}", field: "spec.containers[0].env"},
		{name: "cpu and memory requests and limits", in: "spec: {containers: [{resources: {requests: {cpu: 4, memory: 16Gi}, limits: {cpu: 8, memory: 16Gi}}}]}"},
		{name: "GPUs are Berth's", in: "spec: {containers: [{resources: {limits: {nvidia.com/gpu: 1}}}]}", field: "spec.containers[0].resources.limits.nvidia.com/gpu", msg: "only cpu and memory"},
		{name: "ephemeral storage is Berth's", in: "spec: {containers: [{resources: {requests: {ephemeral-storage: 1Gi}}}]}", field: "spec.containers[0].resources.requests.ephemeral-storage"},
		{name: "a request above its limit", in: "spec: {containers: [{resources: {requests: {memory: 32Gi}, limits: {memory: 16Gi}}}]}", field: "spec.containers[0].resources.requests.memory", msg: "more than its limit"},
		{name: "a zero request", in: "spec: {containers: [{resources: {requests: {cpu: 0}}}]}", field: "spec.containers[0].resources.requests.cpu", msg: "more than 0"},
		{name: "resource claims", in: "spec: {containers: [{resources: {claims: [{name: x}]}}]}", field: "spec.containers[0].resources.claims"},
		{name: "restartPolicy", in: "spec: {restartPolicy: Always}", field: "spec.restartPolicy"},
		{name: "nodeName", in: "spec: {nodeName: n1}", field: "spec.nodeName"},
		{name: "hostNetwork even false", in: "spec: {hostNetwork: false}", field: "spec.hostNetwork"},
		{name: "serviceAccountName", in: "spec: {serviceAccountName: admin}", field: "spec.serviceAccountName"},
		{name: "metadata.name", in: "metadata: {name: x}", field: "metadata.name"},
		{name: "a second container", in: "spec: {containers: [{name: main}, {name: sidecar}]}", field: "spec.containers", msg: "one container"},
		{name: "another container's name", in: "spec: {containers: [{name: worker}]}", field: "spec.containers[0].name"},
		{name: "initContainers", in: "spec: {initContainers: [{name: init}]}", field: "spec.initContainers"},

		// Berth's labels, volumes and paths.
		{name: "a berth label", in: "metadata: {labels: {berth.endpoint: x}}", field: "metadata.labels.berth.endpoint", msg: "Berth sets"},
		{name: "Berth's app label", in: "metadata: {labels: {app.kubernetes.io/managed-by: helm}}", field: "metadata.labels.app.kubernetes.io/managed-by"},
		{name: "a berth annotation", in: "metadata: {annotations: {berth.gpus: x}}", field: "metadata.annotations.berth.gpus"},
		{name: "bad label value", in: "metadata: {labels: {team: 'a b'}}", field: "metadata.labels.team", msg: "label value"},
		{name: "bad label key", in: "metadata: {labels: {'a b': x}}", field: "metadata.labels.a b"},
		{name: "bad nodeSelector", in: "spec: {nodeSelector: {pool: 'x y'}}", field: "spec.nodeSelector.pool"},
		{name: "bad runtime class", in: "spec: {runtimeClassName: NVIDIA}", field: "spec.runtimeClassName"},
		{name: "volume dshm", in: "spec: {volumes: [{name: dshm, emptyDir: {}}]}", field: "spec.volumes[0].name", msg: "Berth makes"},
		{name: "volume vol-0", in: "spec: {volumes: [{name: vol-0, emptyDir: {}}]}", field: "spec.volumes[0].name"},
		{name: "volume twice", in: "spec: {volumes: [{name: a, emptyDir: {}}, {name: a, emptyDir: {}}]}", field: "spec.volumes[1].name"},
		{name: "bad volume name", in: "spec: {volumes: [{name: A_B, emptyDir: {}}]}", field: "spec.volumes[0].name"},
		{name: "mount of no volume", in: "spec: {containers: [{volumeMounts: [{name: x, mountPath: /x}]}]}", field: "spec.containers[0].volumeMounts[0].name"},
		{name: "mount at /dev/shm", in: "spec: {volumes: [{name: a, emptyDir: {}}], containers: [{volumeMounts: [{name: a, mountPath: /dev/shm}]}]}",
			field: "spec.containers[0].volumeMounts[0].mountPath", msg: "/dev/shm"},
		{name: "mount in /runpod-volume", in: "spec: {volumes: [{name: a, emptyDir: {}}], containers: [{volumeMounts: [{name: a, mountPath: /runpod-volume/x}]}]}",
			field: "spec.containers[0].volumeMounts[0].mountPath"},
		{name: "mount over /dev", in: "spec: {volumes: [{name: a, emptyDir: {}}], containers: [{volumeMounts: [{name: a, mountPath: /dev}]}]}",
			field: "spec.containers[0].volumeMounts[0].mountPath"},
		{name: "mount at /", in: "spec: {volumes: [{name: a, emptyDir: {}}], containers: [{volumeMounts: [{name: a, mountPath: /}]}]}",
			field: "spec.containers[0].volumeMounts[0].mountPath"},
		{name: "relative mount", in: "spec: {volumes: [{name: a, emptyDir: {}}], containers: [{volumeMounts: [{name: a, mountPath: cache}]}]}",
			field: "spec.containers[0].volumeMounts[0].mountPath", msg: "absolute"},
		{name: "bad pull policy", in: "spec: {containers: [{imagePullPolicy: Sometimes}]}", field: "spec.containers[0].imagePullPolicy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tpl, err := Parse([]byte(c.in))
			if c.field == "" && c.msg == "" {
				if err != nil || tpl == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want refused (%s)", c.field)
			}
			var fe *FieldError
			if c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field) {
				t.Errorf("error %q (%T), want one naming %s", err, err, c.field)
			}
			if !strings.Contains(err.Error(), c.msg) || !strings.HasPrefix(err.Error(), "pod template: ") {
				t.Errorf("error %q, want it to start with \"pod template: \" and say %q", err, c.msg)
			}
		})
	}
}

// berthPod is a Pod as runtime/kube makes it for a GPU worker.
func berthPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "berth-w1",
			Labels:      map[string]string{"berth.managed": "true", "app.kubernetes.io/name": "berth"},
			Annotations: map[string]string{"berth.gpus": "n1/gpu0"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-GeForce-RTX-4090"}}}}}}}},
			Tolerations:      []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "berth-registry-r1"}},
			Volumes: []corev1.Volume{
				{Name: "vol-0", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "berth-vol-v1"}}},
				{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			},
			Containers: []corev1.Container{{Name: Container, Image: "img:1", VolumeMounts: []corev1.VolumeMount{
				{Name: "vol-0", MountPath: "/runpod-volume"}, {Name: "dshm", MountPath: "/dev/shm"}}}},
		},
	}
}

func mustParse(t *testing.T, s string) *Template {
	t.Helper()
	tpl, err := Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// TestApply: the merge of a template into Berth's Pod, field by field.
func TestApply(t *testing.T) {
	no, yes := false, true
	gpuTerm := berthPod().Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
	zone := func(z string) corev1.NodeSelectorTerm {
		x := *gpuTerm.DeepCopy()
		x.MatchExpressions = append(x.MatchExpressions, corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{z}})
		return x
	}
	for _, c := range []struct {
		name  string
		tpl   *Template
		pod   func(*corev1.Pod)
		want  func(*corev1.Pod) // Berth's Pod changed as the merge should
		field string            // an error naming it
	}{
		{name: "no template: the defaults", tpl: nil, want: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no}
		}},
		{name: "an empty template: the defaults", tpl: mustParse(t, ""), want: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no}
		}},
		{name: "every field", tpl: mustParse(t, full), want: func(p *corev1.Pod) {
			p.Labels["team"], p.Labels["app.kubernetes.io/part-of"] = "ml", "platform"
			p.Annotations["example.com/cost-center"] = "42"
			p.Spec.RuntimeClassName, p.Spec.PriorityClassName = ptr("nvidia"), "gpu-high"
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
			p.Spec.NodeSelector = map[string]string{"pool": "gpu"}
			na := p.Spec.Affinity.NodeAffinity
			na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = []corev1.NodeSelectorTerm{zone("a"), zone("b")}
			na.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"nvme"}}}}}}
			p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr(int64(1000)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
			p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: "mirror"})
			size := resource.MustParse("1Gi")
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}})
			ctr := &p.Spec.Containers[0]
			ctr.ImagePullPolicy = corev1.PullIfNotPresent
			ctr.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}, AllowPrivilegeEscalation: &no}
			ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "cache", MountPath: "/cache"})
		}},
		{name: "a CPU Pod takes the template's affinity as is",
			tpl: mustParse(t, "spec: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]}}}}"),
			pod: func(p *corev1.Pod) { p.Spec.Affinity = nil },
			want: func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}}
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no}
			}},
		{name: "the operator overrides the defaults",
			tpl: mustParse(t, "spec: {securityContext: {seccompProfile: {type: Unconfined}}, containers: [{securityContext: {allowPrivilegeEscalation: true}}]}"),
			want: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &yes}
			}},
		{name: "a privileged container is not denied escalation",
			tpl: mustParse(t, "spec: {containers: [{securityContext: {privileged: true}}]}"),
			want: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
			}},
		{name: "nor one adding SYS_ADMIN",
			tpl: mustParse(t, "spec: {containers: [{securityContext: {capabilities: {add: [CAP_SYS_ADMIN]}}}]}"),
			want: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_SYS_ADMIN"}}}
			}},
		{name: "requests replace Berth's, limits are added",
			tpl: mustParse(t, "spec: {containers: [{resources: {requests: {cpu: 4}, limits: {cpu: 8, memory: 8Gi}}}]}"),
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("12Gi")},
					Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}
			},
			want: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no}
				// memory: Berth's 12Gi request lowered to the 8Gi limit.
				p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
					Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("8Gi")}}
			}},
		{name: "a toleration Berth has is not repeated",
			tpl: mustParse(t, "spec: {tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]}"),
			want: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no}
			}},

		// Conflicts with what Berth set on this Pod.
		{name: "a label Berth set otherwise", tpl: mustParse(t, "metadata: {labels: {team: b}}"),
			pod: func(p *corev1.Pod) { p.Labels["team"] = "a" }, field: "metadata.labels.team"},
		{name: "a nodeSelector key Berth set otherwise", tpl: mustParse(t, "spec: {nodeSelector: {pool: b}}"),
			pod: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "a"} }, field: "spec.nodeSelector.pool"},
		{name: "a volume name of this Pod", tpl: mustParse(t, "spec: {volumes: [{name: cache, emptyDir: {}}]}"),
			pod: func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "cache"}) }, field: "spec.volumes[0].name"},
		{name: "a mount path of this Pod (a pod's own volume path)",
			tpl: mustParse(t, "spec: {volumes: [{name: cache, emptyDir: {}}], containers: [{volumeMounts: [{name: cache, mountPath: /data/cache}]}]}"),
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "vol-1", MountPath: "/data"})
			}, field: "spec.containers[0].volumeMounts[0].mountPath"},
		{name: "a runtime class Berth set otherwise", tpl: mustParse(t, "spec: {runtimeClassName: nvidia}"),
			pod: func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr("kata") }, field: "spec.runtimeClassName"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := berthPod()
			if c.pod != nil {
				c.pod(got)
			}
			want := got.DeepCopy()
			err := c.tpl.Apply(got)
			if c.field != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != c.field {
					t.Fatalf("error %v, want one naming %s", err, c.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("merged\n%+v\nwant\n%+v", got.Spec, want.Spec)
			}
			if !reflect.DeepEqual(got.ObjectMeta, want.ObjectMeta) {
				t.Errorf("metadata\n%+v\nwant\n%+v", got.ObjectMeta, want.ObjectMeta)
			}
		})
	}
}

// TestApplyLeavesTheTemplate: Pods merged from one template share nothing
// with it or each other.
func TestApplyLeavesTheTemplate(t *testing.T) {
	tpl := mustParse(t, full)
	a, b := berthPod(), berthPod()
	if err := tpl.Apply(a); err != nil {
		t.Fatal(err)
	}
	a.Labels["team"] = "changed"
	a.Spec.Tolerations[1].Value = "changed"
	a.Spec.Volumes[2].EmptyDir.SizeLimit = nil
	a.Spec.Containers[0].SecurityContext.Capabilities.Drop[0] = "changed"
	a.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[1].Values[0] = "changed"
	a.Spec.SecurityContext.FSGroup = nil
	if err := tpl.Apply(b); err != nil {
		t.Fatal(err)
	}
	if b.Labels["team"] != "ml" || b.Spec.Tolerations[1].Value != "gpu" || b.Spec.Volumes[2].EmptyDir.SizeLimit == nil ||
		b.Spec.Containers[0].SecurityContext.Capabilities.Drop[0] != "NET_RAW" || b.Spec.SecurityContext.FSGroup == nil ||
		b.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[1].Values[0] != "a" {
		t.Errorf("a change to one merged Pod reached the template: %+v", b.Spec)
	}
}

// TestLoad: the file's name leads the error.
func TestLoad(t *testing.T) {
	f := filepath.Join(t.TempDir(), "tpl.yaml")
	if err := os.WriteFile(f, []byte("spec: {nodeName: n1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(f)
	var fe *FieldError
	if err == nil || !strings.HasPrefix(err.Error(), f+": pod template: spec.nodeName: ") || !errors.As(err, &fe) {
		t.Errorf("error %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestAdmits: the nodes a template lets its Pods onto, as the scheduler
// reads nodeSelector and required node affinity.
func TestAdmits(t *testing.T) {
	node := func(name string, lbls map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	}
	aff := func(terms string) *Template {
		return mustParse(t, "spec: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "+terms+"}}}}")
	}
	gpuPool := node("n1", map[string]string{"pool": "gpu", "zone": "a", "gen": "4"})
	other := node("n2", map[string]string{"pool": "cpu", "zone": "b"})
	for _, c := range []struct {
		name   string
		tpl    *Template
		n      *corev1.Node
		admits bool
	}{
		{"no template", nil, other, true},
		{"a template without placement", mustParse(t, full[:strings.Index(full, "spec:")]), other, true},
		{"nodeSelector matches", mustParse(t, "spec: {nodeSelector: {pool: gpu}}"), gpuPool, true},
		{"nodeSelector value differs", mustParse(t, "spec: {nodeSelector: {pool: gpu}}"), other, false},
		{"nodeSelector key missing", mustParse(t, "spec: {nodeSelector: {rack: r1}}"), gpuPool, false},
		{"In", aff("[{matchExpressions: [{key: zone, operator: In, values: [a, c]}]}]"), gpuPool, true},
		{"In, not", aff("[{matchExpressions: [{key: zone, operator: In, values: [a, c]}]}]"), other, false},
		{"NotIn", aff("[{matchExpressions: [{key: zone, operator: NotIn, values: [a]}]}]"), other, true},
		{"Exists", aff("[{matchExpressions: [{key: gen, operator: Exists}]}]"), other, false},
		{"DoesNotExist", aff("[{matchExpressions: [{key: gen, operator: DoesNotExist}]}]"), other, true},
		{"Gt", aff("[{matchExpressions: [{key: gen, operator: Gt, values: ['3']}]}]"), gpuPool, true},
		{"Lt", aff("[{matchExpressions: [{key: gen, operator: Lt, values: ['3']}]}]"), gpuPool, false},
		{"terms are ORed", aff("[{matchExpressions: [{key: zone, operator: In, values: [x]}]}, {matchExpressions: [{key: zone, operator: In, values: [b]}]}]"), other, true},
		{"requirements ANDed", aff("[{matchExpressions: [{key: zone, operator: In, values: [a]}, {key: pool, operator: In, values: [cpu]}]}]"), gpuPool, false},
		{"matchFields name", aff("[{matchFields: [{key: metadata.name, operator: In, values: [n2]}]}]"), other, true},
		{"an empty term matches nothing", aff("[{}]"), gpuPool, false},
	} {
		if got := c.tpl.Admits(c.n); got != c.admits {
			t.Errorf("%s: admits %s: %v, want %v", c.name, c.n.Name, got, c.admits)
		}
	}
}
