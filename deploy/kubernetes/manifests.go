// Package kubernetes holds Berth's Kubernetes manifests, a kustomization
// applied with `kubectl apply -k deploy/kubernetes`. The files are
// embedded so the tests (internal/kubetest) render them as kubectl would,
// from any package's directory and without kubectl.
package kubernetes

import "embed"

// Files is this directory's kustomization and its resources.
//
//go:embed *.yaml networkpolicy/*.yaml
var Files embed.FS
