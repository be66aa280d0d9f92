package kube_test

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/app"
	"berth/internal/kubetest"
	"berth/runtime"
	"berth/worker"
)

// TestWorkerPodSpec: Berth runs "in the cluster" — its own Pod berth-0 is
// made by a StatefulSet, named to Berth as POD_NAME is — and makes a GPU
// and a CPU worker. Each Pod says what the rules say:
//
//   - /dev/shm: a memory-backed emptyDir with a sizeLimit of half the
//     worker's memory (the test kubelet refuses one without);
//   - requests: per GPU 2 vCPUs and half the GPU's memory (an RTX 4090: 12
//     GiB); a CPU worker its flavour's; ephemeral storage requested at
//     10 GiB and limited at containerDiskInGb; no cpu or memory limit
//     (Burstable);
//   - the worker's API key only by secretKeyRef, to a Secret named like
//     the Pod and owned by it (the test kubelet refuses a Pod whose Secret
//     is missing); the job completes, so the key reached the worker;
//   - the app.kubernetes.io labels beside Berth's, on the Pod and Secret;
//   - an owner reference to the StatefulSet (not a controller one).
//
// Deleting a Pod deletes its Secret (garbage collector); deleting the
// StatefulSet deletes the worker Pods left.
func TestWorkerPodSpec(t *testing.T) {
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})
	e.c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})

	// Berth's StatefulSet and its Pod, as deploy/kubernetes makes them.
	sel := map[string]string{"app.kubernetes.io/name": "berth", "app.kubernetes.io/component": "control-plane"}
	sts, err := e.c.AdminClient.AppsV1().StatefulSets(e.ns.Name).Create(e.ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "berth"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptrTo(int32(1)), ServiceName: "berth-worker",
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "berth", Image: "berth"}},
					// Not on a test kubelet's node: nothing runs it here.
					NodeSelector: map[string]string{"berth.test/none": "none"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitPod(e.ctx, e.ns.Name, "berth-0", waitLong, func(*corev1.Pod) bool { return true }); err != nil {
		t.Fatal(err)
	}
	e.selfPod = "berth-0"
	e.start()

	tpl := e.template(map[string]any{"imageName": "example.com/echo:1", "containerDiskInGb": 40})
	gpuEP := e.endpoint(map[string]any{"templateId": tpl, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"workersMax": 1, "idleTimeout": 60})
	cpuEP := e.endpoint(map[string]any{"templateId": tpl, "computeType": "CPU", "vcpuCount": 2, "cpuFlavorIds": []string{"cpu3m"},
		"workersMax": 1, "idleTimeout": 60})
	type want struct {
		cpu, mem, shm string
	}
	inst := app.Instance(e.dataDir)
	var pods []corev1.Pod
	for _, c := range []struct {
		ep string
		want
	}{
		{gpuEP, want{"2", "12Gi", "6Gi"}},
		{cpuEP, want{"2", "16Gi", "8Gi"}},
	} {
		job := e.run(c.ep, map[string]any{"env": worker.EnvAPIKey})
		pod := e.newPod(c.ep, nil, true)
		pods = append(pods, pod)
		ctr := pod.Spec.Containers[0]

		// Requests; no cpu or memory limit (Burstable).
		for k, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: c.cpu, corev1.ResourceMemory: c.mem, corev1.ResourceEphemeralStorage: "10Gi"} {
			if got := ctr.Resources.Requests[k]; got.Cmp(resource.MustParse(v)) != 0 {
				t.Errorf("%s: request %s = %s, want %s", pod.Name, k, got.String(), v)
			}
		}
		if got := ctr.Resources.Limits[corev1.ResourceEphemeralStorage]; got.Cmp(resource.MustParse("40Gi")) != 0 {
			t.Errorf("%s: ephemeral-storage limit %s, want 40Gi (containerDiskInGb)", pod.Name, got.String())
		}
		for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := ctr.Resources.Limits[k]; ok {
				t.Errorf("%s: a %s limit %s: workers are Burstable", pod.Name, k, q.String())
			}
		}
		if pod.Status.QOSClass != corev1.PodQOSBurstable {
			t.Errorf("%s: QoS class %s, want Burstable", pod.Name, pod.Status.QOSClass)
		}

		// /dev/shm.
		shm := ""
		for _, m := range ctr.VolumeMounts {
			if m.MountPath != "/dev/shm" {
				continue
			}
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && v.EmptyDir.SizeLimit != nil {
					shm = v.EmptyDir.SizeLimit.String()
				}
			}
		}
		if shm != c.shm {
			t.Errorf("%s: /dev/shm a memory emptyDir of %q, want %s (volumes %+v)", pod.Name, shm, c.shm, pod.Spec.Volumes)
		}

		// The key: a secretKeyRef to the Pod's own Secret, never a value.
		var ref *corev1.SecretKeySelector
		for _, v := range ctr.Env {
			if v.Name == worker.EnvAPIKey {
				if v.Value != "" || v.ValueFrom == nil || v.ValueFrom.SecretKeyRef == nil {
					t.Fatalf("%s: %s is %+v, want only a secretKeyRef", pod.Name, v.Name, v)
				}
				ref = v.ValueFrom.SecretKeyRef
			}
		}
		if ref == nil || ref.Name != pod.Name || ref.Key != worker.EnvAPIKey {
			t.Fatalf("%s: key reference %+v, want Secret %s key %s", pod.Name, ref, pod.Name, worker.EnvAPIKey)
		}
		sec, err := e.c.AdminClient.CoreV1().Secrets(e.ns.Name).Get(e.ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		key := string(sec.Data[worker.EnvAPIKey])
		if key == "" || key == apiKey || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Kind != "Pod" ||
			sec.OwnerReferences[0].UID != pod.UID {
			t.Errorf("secret %s: key set %v (not the operator's: %v), owners %+v; want the Pod %s (uid %s)",
				sec.Name, key != "", key != apiKey, sec.OwnerReferences, pod.Name, pod.UID)
		}

		// Labels, and the owner.
		wantLabels := map[string]string{"app.kubernetes.io/name": "berth", "app.kubernetes.io/instance": inst,
			"app.kubernetes.io/component": "worker", "app.kubernetes.io/managed-by": "berth",
			runtime.LabelManaged: "true", runtime.LabelDataDir: inst, runtime.LabelKind: runtime.KindWorker}
		for k, v := range wantLabels {
			if pod.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", pod.Name, k, pod.Labels[k], v)
			}
		}
		if sec.Labels["app.kubernetes.io/component"] != "worker-credentials" || sec.Labels[runtime.LabelManaged] != "true" {
			t.Errorf("secret %s labels %v", sec.Name, sec.Labels)
		}
		if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "StatefulSet" || pod.OwnerReferences[0].UID != sts.UID ||
			pod.OwnerReferences[0].Controller != nil && *pod.OwnerReferences[0].Controller {
			t.Errorf("%s: owners %+v, want the StatefulSet %s (uid %s), not as controller", pod.Name, pod.OwnerReferences, sts.Name, sts.UID)
		}

		// The test kubelet runs it with the key from the Secret: the job
		// reads it, and the worker's calls carried it.
		e.runPod(pod.Name)
		if got := e.waitJob(c.ep, job); got.Status != "COMPLETED" || string(got.Output) != fmt.Sprintf("%q", key) {
			t.Errorf("job on %s: %+v, want COMPLETED with the Secret's key", pod.Name, got)
		}
	}

	// The GPU worker's Pod deleted (scaled to zero): its Secret goes.
	e.call("POST", "/v1/endpoints/"+gpuEP+"/update", map[string]any{"workersMax": 0}, 200, nil)
	if err := e.c.WaitPodGone(e.ctx, e.ns.Name, pods[0].Name, waitLong); err != nil {
		t.Fatal(err)
	}
	e.eventually("the secret of "+pods[0].Name+" collected", func() bool {
		_, err := e.c.AdminClient.CoreV1().Secrets(e.ns.Name).Get(e.ctx, pods[0].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, nil)

	// Berth's StatefulSet deleted: the CPU worker's Pod goes with it.
	e.stop()
	if err := e.c.AdminClient.AppsV1().StatefulSets(e.ns.Name).Delete(e.ctx, sts.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("the worker pod deleted with the StatefulSet", func() bool {
		p, err := e.c.AdminClient.CoreV1().Pods(e.ns.Name).Get(e.ctx, pods[1].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	}, func() string { return strings.Join(podNames(e.pods("")), " ") })
}

func ptrTo[T any](v T) *T { return &v }
