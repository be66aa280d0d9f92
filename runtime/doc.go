// Package runtime runs endpoints' workers and pods: the Supervisor decides
// (autoscaling, drains, rolling updates, crash back-off, GPU choice,
// FlashBoot) and a Backend carries it out.
//
// # The backend boundary
//
// Backend (backend.go) is the Supervisor's own small interface: create an
// instance from a Spec (pulling its image where the backend pulls), start,
// stop with a grace (0 kills), remove, inspect, list by Berth's labels for
// adoption, an event stream of starts, exits (exit code, OOM kill) and
// status changes, logs with follow and tail, pause and unpause, and a pod
// volume's removal. A backend also owns what it keeps for management:
// network volumes' data (Volumes, volumes.go: host directories on Docker,
// package voldirs, which Berth with no runtime uses too; claims on
// Kubernetes) and registry logins (RemoveRegistryAuth: a pull Secret on
// Kubernetes). mgmt decides when, through app, and never sees which
// backend it is. What differs between backends is said by Caps, never
// by the backend's name: Pause (FlashBoot; a Kubernetes Pod cannot be
// paused, and the endpoint's status says so), Restart (a stopped Docker
// container is started again; a stopped Pod is deleted and made anew from
// its spec, its volumes kept) and NetworkVolumes. Docker is
// runtime/docker; the Kubernetes backend implements the same interface.
//
// Instances carry Berth's labels (labels.go), which are the truth: after a
// restart the Supervisor adopts the instances List reports, removes
// orphans and rebuilds its GPU accounting from LabelGPUs and the
// instances' devices.
//
// # GPUs
//
// GPU choice is one code path on every backend: the gpu.Allocator hands
// out devices the backend discovers (Backend.Devices) — NVML's GPUs on
// Docker, passed to the container as exact device UUIDs; on Kubernetes one
// device per nvidia.com/gpu slot of each node (its GPU Feature Discovery
// labels give the type), and a multi-GPU request is always given slots of
// one node (gpu.Device.Node), which the backend turns into a
// nvidia.com/gpu request pinned to that node. So a worker that cannot get
// GPUs is throttled by the same allocator everywhere, and the allocations
// are rebuilt from the instances' labels after a restart.
//
// # Decisions and actions
//
// A worker's life is an explicit state machine (lifecycle.go). Each
// autoscaler pass over an endpoint is a pure plan (planPass in plan.go, on
// top of planScale in autoscaler.go) carried out by an executor
// (Supervisor.scaleEndpoint); how an exit is judged is the pure judgeExit.
package runtime
