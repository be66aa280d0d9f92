package kube_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/app"
	"berth/gpu"
	"berth/internal/kubetest"
	"berth/mgmt"
	"berth/runtime"
	"berth/worker"
)

const (
	rtx4090      = "NVIDIA GeForce RTX 4090"
	rtx4090Label = "NVIDIA-GeForce-RTX-4090" // GPU Feature Discovery's product label
	a100         = "NVIDIA A100-SXM4-80GB"
	a100Label    = "NVIDIA-A100-SXM4-80GB"
)

// TestGPUWorkerFromZeroAndBack: a GPU endpoint on the kubernetes runtime,
// with a registry login and a network volume, scales from zero when a job
// arrives. The cluster's GPUs are the catalogue (/v1/gpus, /v2/catalog/gpus,
// GraphQL gpuTypes), from node labels and allocatable counts. The Pod is
// what the rules say: restartPolicy Never, Berth's labels, nvidia.com/gpu =
// gpuCount, required affinity to a node of the product the gpuTypeId maps
// to, the GPU toleration, the Docker worker's environment pointing at the
// advertised URL, the network volume's claim mounted where Docker mounts it,
// the registry login as its pull Secret. The test runs the worker as its
// kubelet; the job completes through Berth; the GPU slot is held, then
// freed when the idle worker's Pod is deleted. FlashBoot asked for is said
// to be off.
func TestGPUWorkerFromZeroAndBack(t *testing.T) {
	e := newEnv(t)
	node := e.c.AddNode(t, kubetest.NodeSpec{GPUs: 2, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})
	other := e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: a100Label, GPUMemoryMiB: 81920})
	e.start()

	// The catalogue: one slot per nvidia.com/gpu of each GPU node, typed
	// by its product label.
	var slots []gpu.Status
	e.call("GET", "/v1/gpus", nil, 200, &slots)
	count := map[string]int{}
	for _, s := range slots {
		count[s.TypeID+" on "+s.Node]++
		if s.Holder != "" {
			t.Errorf("GPU %s held by %q before any worker", s.UUID, s.Holder)
		}
	}
	want := map[string]int{rtx4090 + " on " + node.Name: 2, a100 + " on " + other.Name: 1}
	if !maps.Equal(count, want) {
		t.Fatalf("/v1/gpus: %v, want %v (%+v)", count, want, slots)
	}
	var v2gpus struct {
		GPUs []struct {
			ID       string
			Memory   int
			Secure   bool
			Free     int
			MaxCount struct{ Secure int }
		}
	}
	e.call("GET", "/v2/catalog/gpus", nil, 200, &v2gpus)
	for _, g := range v2gpus.GPUs {
		n := map[string]int{rtx4090: 2, a100: 1}[g.ID]
		if g.MaxCount.Secure != n || g.Free != n || g.Secure != (n > 0) {
			t.Errorf("/v2/catalog/gpus %s: %+v, want %d of the cluster's", g.ID, g, n)
		}
	}
	var gql struct {
		Data struct {
			GPUTypes []struct {
				ID          string
				MaxGpuCount int
				SecureCloud bool
			}
		}
		Errors []any
	}
	e.call("POST", "/graphql", map[string]any{"query": `query { gpuTypes { id maxGpuCount secureCloud } }`}, 200, &gql)
	for _, g := range gql.Data.GPUTypes {
		if n := map[string]int{rtx4090: 2, a100: 1}[g.ID]; g.MaxGpuCount != n || g.SecureCloud != (n > 0) {
			t.Errorf("GraphQL gpuTypes %s: %+v, want %d", g.ID, g, n)
		}
	}
	if len(gql.Errors) > 0 || len(gql.Data.GPUTypes) == 0 {
		t.Errorf("GraphQL gpuTypes: %+v", gql)
	}

	var auth idOnly
	e.call("POST", "/v1/containerregistryauth", map[string]any{"name": "team", "username": "robot", "password": "s3cret"}, 200, &auth)
	var vol idOnly
	e.call("POST", "/v1/networkvolumes", map[string]any{"name": "models", "size": 20, "dataCenterId": mgmt.DataCenterID}, 200, &vol)
	const image = "registry.example.com/team/echo:1"
	tpl := e.template(map[string]any{"imageName": image, "env": map[string]string{"GREETING": "hello"},
		"containerRegistryAuthId": auth.ID})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"workersMin": 0, "workersMax": 1, "idleTimeout": 1, "networkVolumeId": vol.ID, "flashboot": true})
	if st := e.status(ep); st.Desired != 0 || len(e.pods(ep)) != 0 {
		t.Fatalf("before any job: %+v, pods %v", st, podNames(e.pods(ep)))
	}

	job := e.run(ep, map[string]any{"env": "GREETING"})
	pod := e.newPod(ep, nil, false)
	wid := pod.Labels[runtime.LabelWorker]

	// The Pod's spec.
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never", pod.Spec.RestartPolicy)
	}
	wantLabels := map[string]string{runtime.LabelManaged: "true", runtime.LabelDataDir: app.Instance(e.dataDir),
		runtime.LabelKind: runtime.KindWorker, runtime.LabelEndpoint: ep}
	for k, v := range wantLabels {
		if pod.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, pod.Labels[k], v, pod.Labels)
		}
	}
	if wid == "" || pod.Name != "berth-"+wid || pod.Labels[runtime.LabelVersion] == "" || pod.Labels[runtime.LabelSpec] == "" {
		t.Errorf("pod %s labels %v: want berth-<worker>, a version and a spec", pod.Name, pod.Labels)
	}
	slot := pod.Annotations[runtime.LabelGPUs]
	if !strings.HasPrefix(slot, node.Name+"/") || strings.Contains(slot, ",") {
		t.Errorf("annotation %s = %q, want one slot of %s", runtime.LabelGPUs, slot, node.Name)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("containers: %+v", pod.Spec.Containers)
	}
	c := pod.Spec.Containers[0]
	if c.Image != image {
		t.Errorf("image %q, want %q", c.Image, image)
	}
	if q := c.Resources.Limits[kubetest.GPUResource]; q.Value() != 1 {
		t.Errorf("limits %v: want nvidia.com/gpu 1", c.Resources.Limits)
	}
	aff := pod.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) != 1 {
		t.Fatalf("affinity %+v: want one required node selector term", aff)
	}
	term := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
	if !hasRequirement(term.MatchExpressions, kubetest.LabelGPUProduct, rtx4090Label) || len(term.MatchFields) > 0 {
		t.Errorf("node selector term %+v: want %s In [%s] and no node named (the scheduler places)", term, kubetest.LabelGPUProduct, rtx4090Label)
	}
	if !slices.ContainsFunc(pod.Spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == string(kubetest.GPUResource) && tl.Operator == corev1.TolerationOpExists && tl.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("tolerations %+v: want nvidia.com/gpu Exists NoSchedule", pod.Spec.Tolerations)
	}

	// The environment: the Docker worker's, reaching Berth at the
	// advertised URL, plus the template's.
	env := map[string]string{}
	cenv, err := kubetest.ContainerEnv(e.ctx, e.c.AdminClient, &pod, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range cenv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	key := env["RUNPOD_AI_API_KEY"]
	if key == "" || key == apiKey {
		t.Errorf("RUNPOD_AI_API_KEY %q: want the worker's own key", key)
	}
	wantEnv := worker.PlatformEnv(e.advertise, ep, wid, key, 2000)
	wantEnv["GREETING"], wantEnv["RUNPOD_GPU_COUNT"], wantEnv["RUNPOD_POD_HOSTNAME"] = "hello", "1", wid
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}

	// The network volume: its claim, mounted where Docker mounts it.
	claim := "berth-vol-" + strings.ToLower(vol.ID)
	if m := mountOf(pod, c, "/runpod-volume"); m != claim {
		t.Errorf("/runpod-volume mounts claim %q, want %q (volumes %+v, mounts %+v)", m, claim, pod.Spec.Volumes, c.VolumeMounts)
	}
	pvc, err := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name).Get(e.ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("20Gi")) != 0 ||
		!slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
		t.Errorf("claim %s: %v %v, want 20Gi ReadWriteMany", claim, pvc.Spec.Resources.Requests, pvc.Spec.AccessModes)
	}

	// The registry login: a pull Secret for the image's registry.
	secret := "berth-registry-" + strings.ToLower(auth.ID)
	if !slices.Equal(pod.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: secret}}) {
		t.Errorf("imagePullSecrets %+v, want [%s]", pod.Spec.ImagePullSecrets, secret)
	}
	sec, err := e.c.AdminClient.CoreV1().Secrets(e.ns.Name).Get(e.ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var dockercfg struct {
		Auths map[string]struct{ Username, Password, Auth string }
	}
	if err := json.Unmarshal(sec.Data[corev1.DockerConfigJsonKey], &dockercfg); err != nil || sec.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("secret %s: type %s, %v", secret, sec.Type, err)
	}
	if a := dockercfg.Auths["registry.example.com"]; a.Username != "robot" || a.Password != "s3cret" ||
		a.Auth != base64.StdEncoding.EncodeToString([]byte("robot:s3cret")) {
		t.Errorf("secret %s auths: %+v, want robot's login for registry.example.com", secret, dockercfg.Auths)
	}

	// Scheduled to the GPU node; the test, its kubelet, runs it.
	w := e.runPod(pod.Name)
	if got := e.waitJob(ep, job); got.Status != "COMPLETED" || string(got.Output) != `"hello"` || got.WorkerID != wid {
		t.Fatalf("job: %+v, want COMPLETED with \"hello\" by %s", got, wid)
	}
	// The worker's log, through Berth from pods/log: its lines of the job.
	// The worker writes its Finished line after posting the result, so
	// the job can be COMPLETED a moment before the line is in the log.
	var logs string
	e.eventually("the worker's log of job "+job+" has its Finished line", func() bool {
		logs = string(e.call("GET", "/v1/endpoints/"+ep+"/workers/"+wid+"/logs?jobId="+job, nil, 200, nil))
		return strings.Contains(logs, "Finished")
	}, func() string { return logs })
	var held []gpu.Status
	e.call("GET", "/v1/gpus", nil, 200, &held)
	for _, s := range held {
		if (s.UUID == slot) != (s.Holder == wid) {
			t.Errorf("GPU %s held by %q; the worker %s holds %s", s.UUID, s.Holder, wid, slot)
		}
	}
	st := e.status(ep)
	if !strings.Contains(st.Warning, "flashboot is not available on the kubernetes runtime") {
		t.Errorf("status warning %q: want FlashBoot said to be off on this runtime", st.Warning)
	}

	// Idle for a second: the Pod is deleted, gracefully (the worker gets
	// SIGTERM and exits 0), and the GPU is free again.
	if err := e.c.WaitPodGone(e.ctx, e.ns.Name, pod.Name, waitLong); err != nil {
		t.Fatalf("%v; endpoint %+v", err, e.status(ep))
	}
	if code := w.exitCode(t); code != 0 {
		t.Errorf("the worker exited %d after its Pod's deletion, want 0 (SIGTERM)", code)
	}
	e.eventually("the GPU freed and no workers", func() bool {
		var after []gpu.Status
		e.call("GET", "/v1/gpus", nil, 200, &after)
		st := e.status(ep)
		return !slices.ContainsFunc(after, func(s gpu.Status) bool { return s.Holder != "" }) &&
			st.Workers.Idle+st.Workers.Running+st.Workers.Initializing+st.Workers.Draining == 0
	}, func() string { return fmt.Sprintf("%+v", e.status(ep)) })
	if _, err := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name).Get(e.ctx, claim, metav1.GetOptions{}); err != nil {
		t.Errorf("the network volume's claim after its worker: %v", err)
	}

	// Deleting the endpoint, then the volume, deletes the volume's claim;
	// deleting the registry login deletes its pull Secret.
	e.call("DELETE", "/v1/endpoints/"+ep, nil, 204, nil)
	e.call("DELETE", "/v1/containerregistryauth/"+auth.ID, nil, 204, nil)
	if _, err := e.c.AdminClient.CoreV1().Secrets(e.ns.Name).Get(e.ctx, secret, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted registry login's pull secret %s: %v, want it gone", secret, err)
	}
	e.call("DELETE", "/v1/networkvolumes/"+vol.ID, nil, 204, nil)
	e.eventually("the network volume's claim deleted", func() bool {
		pvc, err := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name).Get(e.ctx, claim, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && pvc.DeletionTimestamp != nil)
	}, nil)
}

func hasRequirement(rs []corev1.NodeSelectorRequirement, key, value string) bool {
	return slices.ContainsFunc(rs, func(r corev1.NodeSelectorRequirement) bool {
		return r.Key == key && r.Operator == corev1.NodeSelectorOpIn && slices.Equal(r.Values, []string{value})
	})
}

// mountOf is the claim mounted at path in c, "" when none is.
func mountOf(p corev1.Pod, c corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.Name == m.Name && v.PersistentVolumeClaim != nil {
				return v.PersistentVolumeClaim.ClaimName
			}
		}
	}
	return ""
}
