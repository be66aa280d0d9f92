// Package kube holds the end-to-end tests of Berth on its Kubernetes
// runtime (berth serve --runtime kubernetes): Berth as package app composes
// it — a real bbolt file, a real HTTP listener — driving Pods on a real API
// server (internal/kubetest: etcd, kube-apiserver, scheduler,
// controller-manager, kwok) as the ServiceAccount of deploy/kubernetes, so a
// permission the manifests lack fails a test. Each test is the kubelet of
// its worker Pods: it runs testdata/echoworker as a local process with the
// Pod's environment and reports what the process does.
//
// A package of its own rather than e2e's or app's: one control plane
// serves its tests (kubetest.Main), started only when they run, and its
// tests run one after another, because nodes are cluster-wide and every
// Berth sees every node's GPUs. It has no code outside its tests.
package kube
