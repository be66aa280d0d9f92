package app

import "berth/runtime"

// Backend is the one choice of what runs Berth's workers and pods: Docker
// (DockerAuto, the zero value, or DockerRequired), none (DockerOff), a
// cluster (OnKubernetes) or a backend given whole (OnBackend). One value,
// so two settings cannot disagree.
type Backend struct {
	kind  backendKind
	kube  *Kubernetes
	given runtime.Backend
}

type backendKind int

const (
	dockerAuto backendKind = iota
	dockerRequired
	noBackend
	kubernetes
	givenBackend
)

var (
	// DockerAuto uses the Docker daemon when one answers; without one
	// Berth still serves (external workers run jobs) and says so (berth
	// serve's default).
	DockerAuto = Backend{}
	// DockerRequired fails New when no daemon answers (tests that run
	// containers).
	DockerRequired = Backend{kind: dockerRequired}
	// DockerOff runs no containers: no workers, pods answer 503.
	DockerOff = Backend{kind: noBackend}
)

// OnKubernetes runs workers and pods as Pods of the cluster k names
// (berth serve --runtime kubernetes). Builds still use a Docker daemon
// when one answers (app/builds.go).
func OnKubernetes(k Kubernetes) Backend { return Backend{kind: kubernetes, kube: &k} }

// OnBackend runs workers and pods on b, made by the caller: for tests
// (runtime/fake) and embedders; berth serve never uses it. Berth drives b
// as it drives Docker or Kubernetes — the supervisor, pods through the
// same adapter, the GPUs from b.Devices unless Config.DiscoverGPUs is set
// — and workers reach Berth at the API's own URL (App.URL), so b must run
// them where that address answers (this host).
func OnBackend(b runtime.Backend) Backend { return Backend{kind: givenBackend, given: b} }

// Kubernetes is the cluster's settings when the choice is OnKubernetes,
// nil otherwise.
func (b Backend) Kubernetes() *Kubernetes { return b.kube }

// off: no runtime by choice (not for want of a daemon).
func (b Backend) off() bool { return b.kind == noBackend }
