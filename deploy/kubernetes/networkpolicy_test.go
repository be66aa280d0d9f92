package kubernetes_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"berth/internal/kubetest"
)

// withPolicy is a kustomization of the user's adding the NetworkPolicy
// component, in another namespace.
const withPolicy = `resources: [../deploy/kubernetes]
components: [../deploy/kubernetes/networkpolicy]
namespace: gpu-jobs
`

// Labels of the Pods Berth makes (runtime/kube objectLabels and a
// worker's berth.* labels).
var (
	workerPodLabels = labels.Set{"berth.managed": "true", "berth.instance": "f802ada9fd5c", "berth.kind": "worker",
		"app.kubernetes.io/name": "berth", "app.kubernetes.io/instance": "f802ada9fd5c",
		"app.kubernetes.io/component": "worker", "app.kubernetes.io/managed-by": "berth"}
	podPodLabels = labels.Set{"berth.managed": "true", "berth.kind": "pod",
		"app.kubernetes.io/name": "berth", "app.kubernetes.io/component": "pod", "app.kubernetes.io/managed-by": "berth"}
)

// policyOf renders withPolicy and returns its NetworkPolicy and
// StatefulSet.
func policyOf(t *testing.T) (*unstructured.Unstructured, networkingv1.NetworkPolicy, appsv1.StatefulSet) {
	t.Helper()
	var raw *unstructured.Unstructured
	var np networkingv1.NetworkPolicy
	var ss appsv1.StatefulSet
	for _, o := range renderWith(t, withPolicy) {
		var into any
		switch o.GetKind() {
		case "NetworkPolicy":
			raw, into = o, &np
		case "StatefulSet":
			into = &ss
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	if raw == nil {
		t.Fatal("the networkpolicy component renders no NetworkPolicy")
	}
	return raw, np, ss
}

// TestNetworkPolicyLetsWorkersReachOnlyTheWorkerPort: the component's
// policy selects Berth's worker Pods (not its own Pod, not a /v1/pods
// pod), lets them reach Berth's Pod on the worker listener's port alone —
// the port of --worker-addr and of Service berth-worker, never the API's
// — plus DNS, and outside addresses but not the private ranges the
// cluster's Pods, Services and nodes use.
func TestNetworkPolicyLetsWorkersReachOnlyTheWorkerPort(t *testing.T) {
	_, np, ss := policyOf(t)
	if np.Namespace != "gpu-jobs" {
		t.Errorf("NetworkPolicy in namespace %q, want the kustomization's gpu-jobs", np.Namespace)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	berthPod := labels.Set(ss.Spec.Template.Labels)
	if !sel.Matches(workerPodLabels) || sel.Matches(berthPod) || sel.Matches(podPodLabels) {
		t.Errorf("podSelector %s: selects a worker %v, Berth %v, a pod %v; want the worker only",
			sel, sel.Matches(workerPodLabels), sel.Matches(berthPod), sel.Matches(podPodLabels))
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v, want Egress", np.Spec.PolicyTypes)
	}

	// The worker listener's port, as the StatefulSet names it.
	ctr := ss.Spec.Template.Spec.Containers[0]
	var workerPort int32
	for _, p := range ctr.Ports {
		if p.Name == "worker" {
			workerPort = p.ContainerPort
		}
	}
	if workerPort == 0 || !slices.Contains(ctr.Args, "--worker-addr=0.0.0.0:"+itoa(workerPort)) {
		t.Fatalf("container ports %+v, args %v: want a port named worker, the port of --worker-addr", ctr.Ports, ctr.Args)
	}

	// What the rules let a worker reach: each (destination, port).
	toBerth, dns := []int32{}, false
	for _, r := range np.Spec.Egress {
		for _, peer := range r.To {
			switch {
			case peer.PodSelector != nil && peer.NamespaceSelector == nil:
				ps, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				if !ps.Matches(berthPod) {
					t.Errorf("a rule to pods %s that do not include Berth's", ps)
					continue
				}
				if len(r.Ports) == 0 {
					t.Errorf("a rule lets workers reach every port of Berth's Pod")
				}
				for _, p := range r.Ports {
					toBerth = append(toBerth, p.Port.IntVal)
				}
			case peer.NamespaceSelector != nil:
				for _, p := range r.Ports {
					if p.Port.IntVal != 53 {
						t.Errorf("a rule to every namespace's pods on port %s: only DNS (53) belongs there", p.Port.String())
					}
					dns = true
				}
				if len(r.Ports) == 0 {
					t.Errorf("a rule lets workers reach every port of every pod")
				}
			case peer.IPBlock != nil:
				_, all, err := net.ParseCIDR(peer.IPBlock.CIDR)
				if err != nil {
					t.Fatal(err)
				}
				// k3s's Pod and Service networks, a kubeadm default, a home
				// LAN's nodes: excepted wherever the block would cover them.
				for _, ip := range []string{"10.42.0.7", "10.43.0.10", "172.17.0.2", "192.168.1.20", "fd00::1"} {
					addr := net.ParseIP(ip)
					if !all.Contains(addr) {
						continue
					}
					if !slices.ContainsFunc(peer.IPBlock.Except, func(c string) bool {
						_, n, err := net.ParseCIDR(c)
						return err == nil && n.Contains(addr)
					}) {
						t.Errorf("ipBlock %s lets workers reach the cluster address %s", peer.IPBlock.CIDR, ip)
					}
				}
			}
		}
	}
	if !slices.Equal(toBerth, []int32{workerPort}) {
		t.Errorf("workers may reach Berth's Pod on ports %v, want only the worker port %d", toBerth, workerPort)
	}
	if !dns {
		t.Errorf("no DNS rule: workers could not resolve berth-worker")
	}
	var svc corev1.Service
	for _, o := range renderWith(t, withPolicy) {
		if o.GetKind() == "Service" && o.GetName() == "berth-worker" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "worker" {
		t.Errorf("Service berth-worker ports %+v, want only the worker port", svc.Spec.Ports)
	}
	if !strings.Contains(strings.Join(ctr.Args, " "), "--advertise-url=http://berth-worker.$(POD_NAMESPACE).svc:"+itoa(svc.Spec.Ports[0].Port)) {
		t.Errorf("args %v: --advertise-url is not Service berth-worker's port %d", ctr.Args, svc.Spec.Ports[0].Port)
	}
}

// TestNetworkPolicyAppliesToAPIServer: the API server admits the
// component's NetworkPolicy as rendered (server-side apply, dry run: the
// test cluster has no network plugin to enforce it).
func TestNetworkPolicyAppliesToAPIServer(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, _, _ := policyOf(t) // rendered afresh: changed in place
	raw.SetNamespace(ns.Name)
	if err := kubetest.Apply(ctx, c.Admin, []*unstructured.Unstructured{raw}, true); err != nil {
		t.Fatalf("apply the NetworkPolicy: %v", err)
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
