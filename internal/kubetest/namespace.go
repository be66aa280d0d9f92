package kubetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Namespace is a test's own namespace, holding the ServiceAccount, Role
// and RoleBinding of deploy/kubernetes (and a binding of its node
// ClusterRole), as `kubectl apply -k` with the namespace changed would.
type Namespace struct {
	Name string
	// ServiceAccount is the manifests' ServiceAccount (in Name).
	ServiceAccount string
	// Config impersonates system:serviceaccount:NAME:SERVICEACCOUNT: code
	// under test gets exactly the manifests' permissions, so one they lack
	// fails the test. Client-side rate limits are left to the caller.
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
}

// rbacObjects are the manifests' parts a test namespace gets.
type rbacObjects struct {
	serviceAccount      string
	namespace           string            // the manifests' namespace
	namespaceLabels     map[string]string // pod-security levels …
	namespaced          []*unstructured.Unstructured
	clusterRoles        []*unstructured.Unstructured
	clusterRoleBindings []*unstructured.Unstructured
}

func (c *Cluster) rbacFromManifests() (*rbacObjects, error) {
	c.rbacOnce.Do(func() {
		objs, err := ManifestObjects()
		if err != nil {
			c.rbacErr = err
			return
		}
		r := &rbacObjects{}
		for _, o := range objs {
			switch o.GetKind() {
			case "Namespace":
				r.namespace, r.namespaceLabels = o.GetName(), o.GetLabels()
			case "ServiceAccount":
				if r.serviceAccount != "" {
					c.rbacErr = fmt.Errorf("deploy/kubernetes defines two ServiceAccounts (%s, %s): kubetest impersonates one", r.serviceAccount, o.GetName())
					return
				}
				r.serviceAccount = o.GetName()
				r.namespaced = append(r.namespaced, o)
			case "Role", "RoleBinding":
				r.namespaced = append(r.namespaced, o)
			case "ClusterRole":
				r.clusterRoles = append(r.clusterRoles, o)
			case "ClusterRoleBinding":
				r.clusterRoleBindings = append(r.clusterRoleBindings, o)
			}
		}
		if r.serviceAccount == "" || r.namespace == "" {
			c.rbacErr = fmt.Errorf("deploy/kubernetes defines no ServiceAccount or no Namespace")
			return
		}
		c.rbac = r
	})
	return c.rbac, c.rbacErr
}

// ManifestsServiceAccount returns the name and namespace of the
// ServiceAccount deploy/kubernetes defines: the identity Namespace's
// Config impersonates.
func (c *Cluster) ManifestsServiceAccount() (name, namespace string, err error) {
	r, err := c.rbacFromManifests()
	if err != nil {
		return "", "", err
	}
	return r.serviceAccount, r.namespace, nil
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// Namespace creates a namespace for the test with the manifests' RBAC and
// returns it; when the test ends its pods are deleted at once (as a
// kubelet finishing them would, so node capacity is free for the next
// test), then the namespace and its ClusterRoleBinding.
func (c *Cluster) Namespace(tb testing.TB) *Namespace {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := strings.Trim(nonName.ReplaceAllString(strings.ToLower(tb.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	name := fmt.Sprintf("%s-%d", base, c.seq.Add(1))
	ns, remove, err := c.CreateNamespace(ctx, name, map[string]string{"kubetest.berth.dev/test": tb.Name()})
	if remove != nil {
		tb.Cleanup(func() {
			if err := remove(); err != nil {
				tb.Errorf("kubetest: %v", err)
			}
		})
	}
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	return ns
}

// CreateNamespace creates the namespace name holding the manifests' RBAC
// and returns it with the function that removes it again (its pods at
// once, its ClusterRoleBinding, then the namespace); Namespace is the
// tests' way. remove is not nil once the namespace exists, even with an
// error.
func (c *Cluster) CreateNamespace(ctx context.Context, name string, annotations map[string]string) (_ *Namespace, remove func() error, _ error) {
	r, err := c.rbacFromManifests()
	if err != nil {
		return nil, nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      maps.Clone(r.namespaceLabels),
		Annotations: annotations,
	}}
	if _, err := c.AdminClient.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	var crbs []string
	remove = func() error { return c.deleteNamespace(name, crbs) }

	var objs []*unstructured.Unstructured
	for _, o := range r.namespaced {
		o = o.DeepCopy()
		o.SetNamespace(name)
		if err := retargetSubjects(o, r.namespace, name); err != nil {
			return nil, remove, err
		}
		objs = append(objs, o)
	}
	objs = append(objs, r.clusterRoles...)
	for _, o := range r.clusterRoleBindings {
		o = o.DeepCopy()
		o.SetName(o.GetName() + "-" + name)
		if err := retargetSubjects(o, r.namespace, name); err != nil {
			return nil, remove, err
		}
		crbs = append(crbs, o.GetName())
		objs = append(objs, o)
	}
	if err := Apply(ctx, c.Admin, objs, false); err != nil {
		return nil, remove, fmt.Errorf("RBAC of deploy/kubernetes into %s: %w", name, err)
	}
	// Pod admission needs the namespace's default ServiceAccount, which
	// the controller-manager creates.
	err = waitFor(ctx, "the default ServiceAccount of "+name, func(ctx context.Context) (bool, error) {
		_, err := c.AdminClient.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, remove, err
	}

	cfg := rest.CopyConfig(c.Admin)
	cfg.QPS, cfg.Burst = 0, 0
	cfg.UserAgent = "berth-under-test"
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", name, r.serviceAccount)}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, remove, err
	}
	return &Namespace{Name: name, ServiceAccount: r.serviceAccount, Config: cfg, Client: client}, remove, nil
}

// retargetSubjects points a binding's ServiceAccount subjects in the
// manifests' namespace at the test namespace.
func retargetSubjects(o *unstructured.Unstructured, from, to string) error {
	subjects, found, err := unstructured.NestedSlice(o.Object, "subjects")
	if err != nil || !found {
		return err
	}
	for _, s := range subjects {
		m, ok := s.(map[string]any)
		if !ok {
			return fmt.Errorf("%s %s: malformed subject %v", o.GetKind(), o.GetName(), s)
		}
		if m["kind"] == "ServiceAccount" && (m["namespace"] == from || m["namespace"] == nil) {
			m["namespace"] = to
		}
	}
	return unstructured.SetNestedSlice(o.Object, subjects, "subjects")
}

func (c *Cluster) deleteNamespace(name string, crbs []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	zero := int64(0)
	err := c.AdminClient.CoreV1().Pods(name).DeleteCollection(ctx,
		metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete pods of %s: %w", name, err))
	}
	for _, crb := range crbs {
		err := c.AdminClient.RbacV1().ClusterRoleBindings().Delete(ctx, crb, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", crb, err))
		}
	}
	// The namespace controller removes the rest in the background.
	err = c.AdminClient.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete namespace %s: %w", name, err))
	}
	return errors.Join(errs...)
}

// WriteKubeconfig writes a kubeconfig for Config — the admin certificate
// with `as: system:serviceaccount:…` (impersonation) and the namespace as
// its context's default — for a process under test (berth serve
// --kubeconfig) that must have exactly the manifests' permissions.
func (n *Namespace) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: n.Config.Host, CertificateAuthority: n.Config.CAFile}
	cfg.AuthInfos["berth"] = &clientcmdapi.AuthInfo{
		ClientCertificate: n.Config.CertFile, ClientKey: n.Config.KeyFile,
		Impersonate: n.Config.Impersonate.UserName,
	}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "berth", Namespace: n.Name}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}
