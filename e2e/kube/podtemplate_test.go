package kube_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/gpu"
	"berth/internal/kubetest"
	"berth/worker"
)

// TestOperatorPodTemplate: Berth started with an operator's Pod template
// (--kube-pod-template) makes its GPU worker's Pod with each of the
// template's points, as the API server stored and admitted it:
//
//   - runtimeClassName nvidia (the RuntimeClass exists: admission checks);
//   - priorityClassName, resolved by the Priority admission to its value;
//   - a toleration of dedicated=gpu:NoSchedule beside Berth's own
//     nvidia.com/gpu one, and nodeSelector pool=gpu-dedicated: of two
//     RTX 4090 nodes the scheduler binds it to the one so tainted and
//     labelled (Berth's GPU node affinity still required), and /v1/gpus
//     lists the other node's slot unschedulable (the selector rules it
//     out);
//   - labels and annotations beside Berth's;
//   - imagePullPolicy IfNotPresent;
//   - an extra volume (an emptyDir with a size limit) mounted at /cache
//     beside Berth's /dev/shm;
//   - the security context: the template's runAsGroup, and the defaults it
//     leaves unset (seccomp RuntimeDefault, allowPrivilegeEscalation
//     false; no runAsNonRoot: RunPod images run as root).
//
// The worker then runs (the test kubelet, which refuses what a node could
// not run) and completes a job.
func TestOperatorPodTemplate(t *testing.T) {
	e := newEnv(t)
	admin := e.c.AdminClient
	suffix := e.ns.Name // cluster-scoped objects: one per test namespace

	rc, err := admin.NodeV1().RuntimeClasses().Create(e.ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-" + suffix}, Handler: "nvidia"}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := admin.SchedulingV1().PriorityClasses().Create(e.ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-high-" + suffix}, Value: 100000}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin.NodeV1().RuntimeClasses().Delete(e.ctx, rc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete runtime class: %v", err)
		}
		if err := admin.SchedulingV1().PriorityClasses().Delete(e.ctx, pc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete priority class: %v", err)
		}
	})
	dedicated := e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true,
		Labels: map[string]string{"pool": "gpu-dedicated"},
		Taints: []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}})
	other := e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})

	e.podTemplate = filepath.Join(t.TempDir(), "pod-template.yaml")
	tpl := fmt.Sprintf(`
metadata:
  labels:
    team: ml
  annotations:
    example.com/cost-center: "42"
spec:
  runtimeClassName: %s
  priorityClassName: %s
  tolerations:
    - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}
  nodeSelector:
    pool: gpu-dedicated
  securityContext:
    runAsGroup: 0
  volumes:
    - name: cache
      emptyDir: {sizeLimit: 2Gi}
  containers:
    - name: main
      imagePullPolicy: IfNotPresent
      resources:
        requests: {cpu: 3}
        limits: {memory: 10Gi}
      volumeMounts:
        - {name: cache, mountPath: /cache}
`, rc.Name, pc.Name)
	if err := os.WriteFile(e.podTemplate, []byte(tpl), 0o600); err != nil {
		t.Fatal(err)
	}
	e.logs = &logBuffer{}
	e.start()
	if l := e.logs.String(); !strings.Contains(l, "the cluster admits a pod made with the operator's pod template") {
		t.Errorf("the start's log does not say the template's dry-run Pod was admitted:\n%s", l)
	}

	// The node the template's selector rules out gives no GPU: its slot
	// is listed unschedulable, as a cordoned node's.
	var slots []gpu.Status
	e.eventually("the other node's slot unschedulable on /v1/gpus", func() bool {
		slots = e.gpuSlots()
		return len(slots) == 2 && slices.ContainsFunc(slots, func(s gpu.Status) bool { return s.Node == other.Name && s.Unschedulable }) &&
			slices.ContainsFunc(slots, func(s gpu.Status) bool { return s.Node == dedicated.Name && !s.Unschedulable })
	}, func() string { return fmt.Sprintf("%+v", slots) })

	tplID := e.template(map[string]any{"imageName": "example.com/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tplID, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"workersMax": 1, "idleTimeout": 60})
	job := e.run(ep, map[string]any{"env": worker.EnvAPIKey})
	pod := e.newPod(ep, nil, true)
	spec := pod.Spec
	ctr := spec.Containers[0]

	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != rc.Name {
		t.Errorf("runtimeClassName %v, want %s", spec.RuntimeClassName, rc.Name)
	}
	if spec.PriorityClassName != pc.Name || spec.Priority == nil || *spec.Priority != pc.Value {
		t.Errorf("priorityClassName %q, priority %v; want %s resolved to %d", spec.PriorityClassName, spec.Priority, pc.Name, pc.Value)
	}
	for _, want := range []corev1.Toleration{
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	} {
		if !slices.ContainsFunc(spec.Tolerations, func(x corev1.Toleration) bool { return x.MatchToleration(&want) }) {
			t.Errorf("tolerations %+v lack %+v", spec.Tolerations, want)
		}
	}
	if spec.NodeSelector["pool"] != "gpu-dedicated" {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if spec.NodeName != dedicated.Name {
		t.Errorf("bound to %s, want the tainted, labelled node %s", spec.NodeName, dedicated.Name)
	}
	req := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) != 1 || !slices.ContainsFunc(req.NodeSelectorTerms[0].MatchExpressions,
		func(r corev1.NodeSelectorRequirement) bool { return r.Key == "nvidia.com/gpu.product" }) {
		t.Errorf("node affinity %+v, want Berth's GPU product term", req)
	}
	if pod.Labels["team"] != "ml" || pod.Labels["berth.managed"] != "true" || pod.Labels["app.kubernetes.io/managed-by"] != "berth" {
		t.Errorf("labels %v, want team=ml beside Berth's", pod.Labels)
	}
	if pod.Annotations["example.com/cost-center"] != "42" {
		t.Errorf("annotations %v", pod.Annotations)
	}
	if ctr.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy %q, want IfNotPresent", ctr.ImagePullPolicy)
	}
	// The template's cpu request replaces Berth's 2; its memory limit caps
	// Berth's 12Gi request for one RTX 4090.
	for _, c := range []struct {
		what string
		got  resource.Quantity
		want string
	}{
		{"cpu request", ctr.Resources.Requests[corev1.ResourceCPU], "3"},
		{"memory request", ctr.Resources.Requests[corev1.ResourceMemory], "10Gi"},
		{"memory limit", ctr.Resources.Limits[corev1.ResourceMemory], "10Gi"},
	} {
		if c.got.Cmp(resource.MustParse(c.want)) != 0 {
			t.Errorf("%s %s, want %s (resources %+v)", c.what, c.got.String(), c.want, ctr.Resources)
		}
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	var cache *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == mounts["/cache"] {
			cache = &spec.Volumes[i]
		}
	}
	if cache == nil || cache.Name != "cache" || cache.EmptyDir == nil || cache.EmptyDir.SizeLimit.Cmp(resource.MustParse("2Gi")) != 0 || mounts["/dev/shm"] == "" {
		t.Errorf("volumes %+v, mounts %v: want the template's cache at /cache beside Berth's /dev/shm", spec.Volumes, mounts)
	}
	psc, csc := spec.SecurityContext, ctr.SecurityContext
	if psc == nil || psc.RunAsGroup == nil || *psc.RunAsGroup != 0 || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		psc.RunAsNonRoot != nil {
		t.Errorf("pod securityContext %+v, want the template's runAsGroup and seccomp RuntimeDefault, root allowed", psc)
	}
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.RunAsNonRoot != nil {
		t.Errorf("container securityContext %+v, want allowPrivilegeEscalation false, root allowed", csc)
	}

	e.runPod(pod.Name)
	if got := e.waitJob(ep, job); got.Status != "COMPLETED" {
		t.Errorf("job on the templated worker: %+v", got)
	}
}

// TestOperatorPodTemplateRefused: a template that sets what Berth owns,
// or misspells a field, fails the start with the file and the field
// named; nothing is made.
func TestOperatorPodTemplateRefused(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ body, field string }{
		{"spec:\n  containers:\n    - name: main\n      image: evil:1\n", "spec.containers[0].image"},
		{"spec:\n  runtimeClass: nvidia\n", "spec.runtimeClass"},
		{"metadata:\n  labels:\n    berth.instance: other\n", "metadata.labels.berth.instance"},
		{"spec:\n  volumes:\n    - name: shm\n      emptyDir: {}\n  containers:\n    - volumeMounts:\n        - {name: shm, mountPath: /dev/shm}\n",
			"spec.containers[0].volumeMounts[0].mountPath"},
	} {
		e.podTemplate = filepath.Join(t.TempDir(), "pod-template.yaml")
		if err := os.WriteFile(e.podTemplate, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		err := e.tryStart()
		if err == nil {
			e.stop()
			t.Errorf("started with %q", c.body)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, e.podTemplate+": pod template: "+c.field+": ") {
			t.Errorf("start error %q, want it to name %s and %s", msg, e.podTemplate, c.field)
		}
	}
	if ps := e.pods(""); len(ps) != 0 {
		t.Errorf("pods made: %v", podNames(ps))
	}
}

// TestOperatorPodTemplateMissingClass: a template naming a RuntimeClass
// the cluster lacks starts (the class may come later), and the endpoint
// says why no worker starts, with the API server's words; once the class
// exists a worker starts.
func TestOperatorPodTemplateMissingClass(t *testing.T) {
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})
	class := "absent-" + e.ns.Name
	e.podTemplate = filepath.Join(t.TempDir(), "pod-template.yaml")
	if err := os.WriteFile(e.podTemplate, []byte("spec: {runtimeClassName: "+class+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.logs = &logBuffer{}
	e.start()
	// Said at start (a dry-run Pod), before any endpoint.
	if l := e.logs.String(); !strings.Contains(l, "the cluster refuses a pod made with the operator's pod template") ||
		!strings.Contains(l, `RuntimeClass \"`+class+`\" not found`) {
		t.Errorf("the start's log does not say the class is missing:\n%s", l)
	}
	tplID := e.template(map[string]any{"imageName": "example.com/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tplID, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"workersMax": 1, "idleTimeout": 60})
	job := e.run(ep, map[string]any{"echo": "late"})
	var st epStatus
	e.eventually("the endpoint to say the runtime class is missing", func() bool {
		st = e.status(ep)
		return strings.Contains(st.LastError, `RuntimeClass "`+class+`" not found`)
	}, func() string { return fmt.Sprintf("%+v", st) })

	if _, err := e.c.AdminClient.NodeV1().RuntimeClasses().Create(e.ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Handler: "nvidia"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.AdminClient.NodeV1().RuntimeClasses().Delete(e.ctx, class, metav1.DeleteOptions{}) })
	pod := e.newPod(ep, nil, true)
	e.runPod(pod.Name)
	if got := e.waitJob(ep, job); got.Status != "COMPLETED" {
		t.Errorf("job once the class exists: %+v", got)
	}
}
