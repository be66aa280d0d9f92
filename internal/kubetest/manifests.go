package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	manifests "berth/deploy/kubernetes"
)

// ManifestObjects reads deploy/kubernetes as its kustomization lists it:
// every document of every file in `resources`, the kustomization's
// `namespace` set on the namespaced ones and on RoleBinding and
// ClusterRoleBinding ServiceAccount subjects, as kustomize does. It reads
// no further (labels, images): kubetest takes only the RBAC objects and
// the Namespace from it. deploy/kubernetes' tests check it against
// kustomize's own rendering, which kubetest cannot import: kustomize
// links Go's plugin package, whose eager binding breaks go-nvml in any
// test binary that has both.
func ManifestObjects() ([]*unstructured.Unstructured, error) {
	var k struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	b, err := manifests.Files.ReadFile("kustomization.yaml")
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("deploy/kubernetes/kustomization.yaml: %w", err)
	}
	var objs []*unstructured.Unstructured
	for _, file := range k.Resources {
		b, err := manifests.Files.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("deploy/kubernetes: %w", err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("deploy/kubernetes/%s: %w", file, err)
			}
			if m == nil {
				continue
			}
			o := &unstructured.Unstructured{Object: m}
			switch o.GetKind() {
			case "Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass":
			default:
				if k.Namespace != "" {
					o.SetNamespace(k.Namespace)
				}
			}
			if k.Namespace != "" && (o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding") {
				if err := setSubjectsNamespace(o, k.Namespace); err != nil {
					return nil, err
				}
			}
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// setSubjectsNamespace sets the namespace of a binding's ServiceAccount
// subjects.
func setSubjectsNamespace(o *unstructured.Unstructured, ns string) error {
	subjects, found, err := unstructured.NestedSlice(o.Object, "subjects")
	if err != nil || !found {
		return err
	}
	for _, s := range subjects {
		if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
			m["namespace"] = ns
		}
	}
	return unstructured.SetNestedSlice(o.Object, subjects, "subjects")
}

// Apply server-side-applies objects in order, as `kubectl apply
// --server-side` does, with field manager "kubetest". With dryRun the API
// server validates and admits each object (dryRun=All) but stores nothing.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
		}
		body, err := json.Marshal(o.Object)
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: "kubetest", Force: ptrTo(true)}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }
