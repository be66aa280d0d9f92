package kubernetes_test

import (
	"context"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	manifests "berth/deploy/kubernetes"
	"berth/runtime/kube/podtemplate"

	"berth/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// render renders the kustomization as `kubectl apply -k` does, with
// kustomize's Go API (krusty). Only this package links kustomize (see
// kubetest.ManifestObjects).
func render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return renderWith(t, "")
}

// renderWith renders a kustomization of the user's (mine: its text, beside
// deploy/kubernetes as ../deploy/kubernetes), or deploy/kubernetes itself
// when mine is "".
func renderWith(t *testing.T, mine string) []*unstructured.Unstructured {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	root := "/deploy/kubernetes"
	if mine != "" {
		root = "/my-berth"
		if err := mem.WriteFile(root+"/kustomization.yaml", []byte(mine)); err != nil {
			t.Fatal(err)
		}
	}
	err := fs.WalkDir(manifests.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := manifests.Files.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/deploy/kubernetes", p), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, root)
	if err != nil {
		t.Fatalf("kustomize deploy/kubernetes: %v", err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatalf("kustomize deploy/kubernetes: %s: %v", r.CurId(), err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// kubetest reads the manifests without kustomize; what it reads for the
// objects it uses (the Namespace's labels, the ServiceAccount, the roles
// and bindings) must be what kustomize renders, less the labels the
// kustomization adds to everything.
func TestKubetestReadsWhatKustomizeRenders(t *testing.T) {
	mine, err := kubetest.ManifestObjects()
	if err != nil {
		t.Fatal(err)
	}
	theirs := map[string]*unstructured.Unstructured{}
	for _, o := range render(t) {
		theirs[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o
	}
	n := 0
	for _, o := range mine {
		key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		k, ok := theirs[key]
		if !ok {
			t.Errorf("kubetest reads %s, which kustomize does not render", key)
			continue
		}
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		default:
			continue
		}
		n++
		k = k.DeepCopy()
		l := k.GetLabels()
		delete(l, "app.kubernetes.io/part-of")
		if len(l) == 0 {
			l = nil
		}
		k.SetLabels(l)
		if !reflect.DeepEqual(o.Object, k.Object) {
			t.Errorf("%s: kubetest reads\n%v\nkustomize renders\n%v", key, o.Object, k.Object)
		}
	}
	if n != 6 || len(mine) != len(theirs) {
		t.Errorf("compared %d RBAC objects of %d read, kustomize renders %d objects", n, len(mine), len(theirs))
	}
}

// What the kustomization renders to, without a cluster.
func TestManifestsRender(t *testing.T) {
	objs := render(t)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		if o.GetKind() != "Namespace" && o.GetKind() != "ClusterRole" && o.GetKind() != "ClusterRoleBinding" && o.GetNamespace() != "berth" {
			t.Errorf("%s/%s in namespace %q, want berth", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		if o.GetLabels()["app.kubernetes.io/part-of"] != "berth" {
			t.Errorf("%s/%s lacks app.kubernetes.io/part-of=berth", o.GetKind(), o.GetName())
		}
	}
	slices.Sort(kinds)
	want := []string{"ClusterRole/berth-nodes", "ClusterRoleBinding/berth-nodes", "ConfigMap/berth-pod-template", "Namespace/berth", "Role/berth",
		"RoleBinding/berth", "Service/berth", "Service/berth-worker", "ServiceAccount/berth", "StatefulSet/berth"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("rendered %v, want %v", kinds, want)
	}

	var ss appsv1.StatefulSet
	var tplMap corev1.ConfigMap
	for _, o := range objs {
		var into any
		switch o.GetKind() {
		case "StatefulSet":
			into = &ss
		case "ConfigMap":
			into = &tplMap
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	if *ss.Spec.Replicas != 1 {
		t.Errorf("replicas %d, want 1: one control plane", *ss.Spec.Replicas)
	}
	pod := ss.Spec.Template.Spec
	if pod.ServiceAccountName != "berth" {
		t.Errorf("serviceAccountName %q, want berth", pod.ServiceAccountName)
	}
	ctr := pod.Containers[0]
	if ctr.Image != "berth:local" {
		t.Errorf("image %q, want the kustomization's berth:local", ctr.Image)
	}
	args := strings.Join(ctr.Args, " ")
	for _, a := range []string{"serve", "--runtime=kubernetes", "--data=/var/lib/berth", "--addr=0.0.0.0:8080",
		"--advertise-url=http://berth-worker.$(POD_NAMESPACE).svc:8081", "--worker-addr=0.0.0.0:8081"} {
		if !strings.Contains(args, a) {
			t.Errorf("args %q lack %q", args, a)
		}
	}
	var key *corev1.EnvVar
	for i := range ctr.Env {
		if ctr.Env[i].Name == "BERTH_API_KEY" {
			key = &ctr.Env[i]
		}
	}
	if key == nil || key.ValueFrom == nil || key.ValueFrom.SecretKeyRef == nil || key.ValueFrom.SecretKeyRef.Name != "berth-api-key" {
		t.Errorf("BERTH_API_KEY is not read from the berth-api-key Secret: %+v", key)
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ctr.VolumeMounts[0].MountPath != "/var/lib/berth" {
		t.Errorf("the data directory is not a PersistentVolumeClaim mounted at /var/lib/berth")
	}
	// The operator's Pod template: the ConfigMap's file, mounted where the
	// flag reads it, parses, and without an edit gives the defaults.
	var tplFile string
	for _, a := range ctr.Args {
		if f, ok := strings.CutPrefix(a, "--kube-pod-template="); ok {
			tplFile = f
		}
	}
	mounted := ""
	for _, m := range ctr.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == tplMap.Name && tplMap.Name != "" {
				mounted = m.MountPath
			}
		}
	}
	if tplFile == "" || path.Dir(tplFile) != mounted {
		t.Errorf("--kube-pod-template=%q, the ConfigMap %q mounted at %q: want the flag to read the mounted file", tplFile, tplMap.Name, mounted)
	}
	tpl, err := podtemplate.Parse([]byte(tplMap.Data[path.Base(tplFile)]))
	if err != nil || tplMap.Data[path.Base(tplFile)] == "" {
		t.Fatalf("the shipped pod template %q: %v", path.Base(tplFile), err)
	}
	worker := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: podtemplate.Container}}}}
	if err := tpl.Apply(worker); err != nil {
		t.Fatal(err)
	}
	def := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: podtemplate.Container}}}}
	if err := (*podtemplate.Template)(nil).Apply(def); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(worker, def) {
		t.Errorf("the shipped pod template gives\n%+v\nnot the defaults\n%+v", worker.Spec, def.Spec)
	}
	for name, p := range map[string]*corev1.Probe{"startup": ctr.StartupProbe, "readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/" {
			t.Errorf("%s probe %+v, want GET / (the dashboard shell, served without a key)", name, p)
		}
	}
}

// `kubectl apply -k deploy/kubernetes` against a real API server, with
// its controllers: the objects are admitted, the StatefulSet controller
// makes berth-0 and its claim, the claim binds, the scheduler places the
// pod, and both Services select it once it is ready.
func TestManifestsApplyToAPIServer(t *testing.T) {
	c := kubetest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	objs := render(t)
	c.AddNode(t, kubetest.NodeSpec{}) // where berth-0 runs

	// The claim's volume: the test cluster has no provisioner, so a
	// pre-made PersistentVolume stands in for the default StorageClass.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "berth-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/berth-test"}},
		},
	}
	if _, err := c.AdminClient.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := kubetest.Apply(ctx, c.Admin, objs, false); err != nil {
		t.Fatalf("apply: %v", err)
	}
	// Applying again changes nothing and fails nothing (kubectl apply is
	// run again on upgrades).
	if err := kubetest.Apply(ctx, c.Admin, objs, false); err != nil {
		t.Fatalf("second apply: %v", err)
	}

	p, err := c.WaitPod(ctx, "berth", "berth-0", 2*time.Minute, func(p *corev1.Pod) bool {
		return kubetest.Condition(p, corev1.PodReady) != nil && kubetest.Condition(p, corev1.PodReady).Status == corev1.ConditionTrue
	})
	if err != nil {
		t.Fatalf("berth-0 never ready: %v", err)
	}
	if p.Spec.ServiceAccountName != "berth" {
		t.Errorf("berth-0 runs as %q", p.Spec.ServiceAccountName)
	}
	pvc, err := c.AdminClient.CoreV1().PersistentVolumeClaims("berth").Get(ctx, "data-berth-0", metav1.GetOptions{})
	if err != nil || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("claim data-berth-0: %v, phase %v; want Bound", err, pvc.Status.Phase)
	}
	// Both Services select berth-0 and name its port: berth the API's
	// (8080), berth-worker only the worker listener's (8081, the port of
	// --advertise-url). (Their EndpointSlices stay empty here: the test
	// cluster's pod IPs are loopback addresses, which Kubernetes refuses
	// in endpoints, so the selection is checked as the EndpointSlice
	// controller makes it.)
	for name, want := range map[string]int32{"berth": 8080, "berth-worker": 8081} {
		svc, err := c.AdminClient.CoreV1().Services("berth").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s selector %v does not select berth-0 (labels %v)", name, svc.Spec.Selector, p.Labels)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != want {
			t.Errorf("Service %s ports %+v, want one, %d", name, svc.Spec.Ports, want)
		}
		for _, port := range svc.Spec.Ports {
			if !slices.ContainsFunc(p.Spec.Containers[0].Ports, func(cp corev1.ContainerPort) bool {
				return cp.Name == port.TargetPort.StrVal && cp.ContainerPort == want
			}) {
				t.Errorf("Service %s targets port %q, which berth-0 does not name as %d", name, port.TargetPort.String(), want)
			}
		}
	}
	// A worker-like Pod in the namespace (berth.* labels, no
	// app.kubernetes.io labels) is selected by neither Service.
	worker := labels.Set{"berth.endpoint": "e1", "app.kubernetes.io/part-of": "berth"}
	for _, name := range []string{"berth", "berth-worker"} {
		svc, _ := c.AdminClient.CoreV1().Services("berth").Get(ctx, name, metav1.GetOptions{})
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(worker) {
			t.Errorf("Service %s would select worker Pods", name)
		}
	}

	// Berth's identity, as the manifests bind it: its namespace's objects,
	// nodes read-only, nothing elsewhere. This is the identity
	// kubetest.Namespace impersonates in every kubernetes-runtime test.
	sa, saNS, err := c.ManifestsServiceAccount()
	if err != nil {
		t.Fatal(err)
	}
	if sa != p.Spec.ServiceAccountName || saNS != "berth" {
		t.Fatalf("kubetest impersonates %s/%s, the StatefulSet runs as berth/%s", saNS, sa, p.Spec.ServiceAccountName)
	}
	as := rest.CopyConfig(c.Admin)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:berth:berth"}
	cl, err := kubernetes.NewForConfig(as)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CoreV1().Pods("berth").GetLogs("berth-0", &corev1.PodLogOptions{}).DoRaw(ctx); apierrors.IsForbidden(err) {
		t.Errorf("pods/log forbidden to berth: %v", err)
	}
	// Secrets: get (pull Secrets, workers' key Secrets), never list.
	if _, err := cl.CoreV1().Secrets("berth").Get(ctx, "berth-api-key", metav1.GetOptions{}); apierrors.IsForbidden(err) {
		t.Errorf("get a secret in berth: %v", err)
	}
	if _, err := cl.CoreV1().Secrets("berth").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets in berth: %v, want Forbidden", err)
	}
	if _, err := cl.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list nodes: %v", err)
	}
	if _, err := cl.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets in kube-system: %v, want Forbidden", err)
	}
	if _, err := cl.AppsV1().StatefulSets("berth").Get(ctx, "berth", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get its own StatefulSet: %v, want Forbidden (Berth does not manage itself)", err)
	}
}
