package kube_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/internal/kubetest"
	"berth/runtime"
)

// runQuiet acts as the kubelet of a Pod whose process the test does not
// run (a pod's own image): it reports the Pod Running once bound and
// finishes its deletion when asked. Its log is what the test writes to
// e.kl.Log.
func (e *kenv) runQuiet(name string) {
	e.t.Helper()
	if _, err := e.c.WaitPod(e.ctx, e.ns.Name, name, waitLong, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.kl.Running(e.ctx, e.ns.Name, name, "127.0.0.1"); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		e.kubelet(ctx, name, nil, nil)
	}()
}

// TestPodOnTheCluster: a pod (not a worker) is a Pod with its ports
// published by a NodePort Service, shown as its port mappings; its log
// comes from pods/log, followed; stop deletes the Pod and keeps its
// volume's claim, start makes it anew on the same claim, delete removes
// both.
func TestPodOnTheCluster(t *testing.T) {
	e := newEnv(t)
	node := e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})
	e.start()

	var pod struct {
		ID, DesiredStatus, PublicIP string
		PortMappings                map[string]int
	}
	e.call("POST", "/v1/pods", map[string]any{"name": "notebook", "imageName": "registry.example.com/team/notebook:1",
		"ports": []string{"8888/http", "22/tcp"}, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"volumeInGb": 10, "volumeMountPath": "/workspace"}, 201, &pod)
	name := "berth-pod-" + pod.ID
	e.runQuiet(name)

	p, err := e.c.AdminClient.CoreV1().Pods(e.ns.Name).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[runtime.LabelKind] != runtime.KindPod || p.Labels[runtime.LabelPod] != pod.ID || p.Spec.NodeName != node.Name {
		t.Errorf("pod %s: labels %v on %q", name, p.Labels, p.Spec.NodeName)
	}
	// What it asks for: a GPU worker's share of its RTX 4090 (2 vCPUs, 12
	// GiB) and a memory-backed /dev/shm of half that, as a worker gets.
	ctr := p.Spec.Containers[0]
	for k, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: "2", corev1.ResourceMemory: "12Gi"} {
		if got := ctr.Resources.Requests[k]; got.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("pod %s requests %s %s, want %s", name, k, got.String(), v)
		}
	}
	shm := ""
	for _, m := range ctr.VolumeMounts {
		for _, v := range p.Spec.Volumes {
			if m.MountPath == "/dev/shm" && v.Name == m.Name && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && v.EmptyDir.SizeLimit != nil {
				shm = v.EmptyDir.SizeLimit.String()
			}
		}
	}
	if shm != "6Gi" {
		t.Errorf("pod %s: /dev/shm a memory emptyDir of %q, want 6Gi (volumes %+v)", name, shm, p.Spec.Volumes)
	}
	claim := "berth-pod-" + pod.ID
	if m := mountOf(*p, p.Spec.Containers[0], "/workspace"); m != claim {
		t.Errorf("/workspace mounts %q, want the pod volume's claim %s", m, claim)
	}
	pvc, err := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name).Get(e.ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("10Gi")) != 0 {
		t.Errorf("claim %s requests %v, want 10Gi", claim, q.String())
	}

	// Its ports: a NodePort Service selecting it, shown as portMappings.
	svc, err := e.c.AdminClient.CoreV1().Services(e.ns.Name).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePorts := map[string]int{}
	for _, sp := range svc.Spec.Ports {
		nodePorts[fmt.Sprint(sp.Port)] = int(sp.NodePort)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || len(nodePorts) != 2 || nodePorts["8888"] == 0 || nodePorts["22"] == 0 ||
		svc.Spec.Selector[runtime.LabelPod] != pod.ID {
		t.Fatalf("service %s: %s %v selector %v", name, svc.Spec.Type, svc.Spec.Ports, svc.Spec.Selector)
	}
	e.eventually("the pod's port mappings and its node's address (recorded once it runs)", func() bool {
		e.call("GET", "/v1/pods/"+pod.ID, nil, 200, &pod)
		return pod.PortMappings["8888"] == nodePorts["8888"] && pod.PortMappings["22"] == nodePorts["22"] && pod.PublicIP == "127.0.0.1"
	}, func() string { return fmt.Sprintf("%+v, node ports %v", pod, nodePorts) })
	if pod.DesiredStatus != "RUNNING" || pod.PublicIP != "127.0.0.1" {
		t.Errorf("pod %+v: want RUNNING on its node's address 127.0.0.1", pod)
	}

	// Its log, followed through Berth from pods/log.
	logw := e.kl.Log(e.ns.Name, name, container)
	fmt.Fprintln(logw, "jupyter: serving on 8888")
	req, _ := http.NewRequestWithContext(e.ctx, "GET", e.base+"/v1/pods/"+pod.ID+"/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("logs: %s: %s", resp.Status, b)
	}
	lines := bufio.NewScanner(resp.Body)
	readLine := func(want string) {
		t.Helper()
		for lines.Scan() {
			if strings.Contains(lines.Text(), want) {
				return
			}
		}
		t.Fatalf("log stream ended (%v) before %q", lines.Err(), want)
	}
	readLine("jupyter: serving on 8888")
	fmt.Fprintln(logw, "a line written while followed")
	readLine("a line written while followed")
	resp.Body.Close()

	// Stop: the Pod goes, its volume's claim stays.
	e.call("POST", "/v1/pods/"+pod.ID+"/stop", nil, 200, nil)
	if err := e.c.WaitPodGone(e.ctx, e.ns.Name, name, waitLong); err != nil {
		t.Fatal(err)
	}
	e.call("GET", "/v1/pods/"+pod.ID, nil, 200, &pod)
	if pod.DesiredStatus != "EXITED" {
		t.Errorf("stopped pod: %+v", pod)
	}
	if _, err := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name).Get(e.ctx, claim, metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod volume's claim after a stop: %v", err)
	}

	// Start: the Pod is made anew, on the same claim.
	e.call("POST", "/v1/pods/"+pod.ID+"/start", nil, 200, nil)
	e.runQuiet(name)
	p, err = e.c.AdminClient.CoreV1().Pods(e.ns.Name).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m := mountOf(*p, p.Spec.Containers[0], "/workspace"); m != claim {
		t.Errorf("after a start /workspace mounts %q, want %s", m, claim)
	}

	// Delete: the Pod and the claim go.
	e.call("DELETE", "/v1/pods/"+pod.ID, nil, 204, nil)
	if err := e.c.WaitPodGone(e.ctx, e.ns.Name, name, waitLong); err != nil {
		t.Fatal(err)
	}
	e.eventually("the pod volume's claim deleted", func() bool {
		pvc, err := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name).Get(e.ctx, claim, metav1.GetOptions{})
		// A claim nothing binds has no protection finalizer to wait on,
		// but a deletion may still be in progress.
		return apierrors.IsNotFound(err) || (err == nil && pvc.DeletionTimestamp != nil)
	}, nil)
}
