package runtime

import (
	"context"
	"errors"
	"io"
	"time"

	"berth/gpu"
)

// Backend is where Berth's workers and pods run: containers of the local
// Docker daemon (package runtime/docker) or Pods of a Kubernetes namespace.
// The Supervisor keeps every decision — autoscaling, drains, rolling
// updates, crash back-off, GPU choice, FlashBoot — and a backend only does
// what it is told and reports what it sees, so the Supervisor does not care
// which one it drives.
//
// An instance is one worker or pod on the backend. Every instance carries
// Berth's labels (LabelKind, LabelEndpoint, LabelWorker, LabelPod,
// LabelVersion, LabelGPUs, LabelSpec) plus LabelManaged and this Berth's
// LabelDataDir, which the backend adds; the labels are the truth after a
// restart, when the Supervisor adopts what List reports.
//
// IDs are the backend's own (a Docker container id, a Pod name). Errors
// about an instance that does not exist match ErrNotFound.
type Backend interface {
	// Name is the runtime's name for logs and statuses: "docker",
	// "kubernetes".
	Name() string
	// Caps says what the backend can do beyond the basics.
	Caps() Caps
	// Devices lists the GPUs workers and pods can be given (NVML's on
	// Docker; slots of the cluster's GPU nodes on Kubernetes), for the
	// allocator. None is not an error.
	Devices(ctx context.Context) ([]gpu.Device, error)
	// Ping checks that the backend answers.
	Ping(ctx context.Context) error

	// Create makes an instance from spec without starting it (Start does),
	// so its ID is known before it can exit. Where the backend pulls images
	// itself the image is pulled first when absent, with spec.Auth, and
	// progress (may be nil) gets one line per status change; a pull that
	// fails wraps ErrImage. Where the cluster pulls, spec.Auth becomes the
	// instance's pull secret.
	Create(ctx context.Context, spec Spec, progress func(string)) (Created, error)
	// Start starts a created instance, or with Caps.Restart a stopped
	// one. running is true when it runs on return (Docker); false when the
	// backend only accepted it (a Pod waits for a node and its image),
	// and an EventStart follows once it runs — or it already ran and
	// ended (a Pod starts by itself), and its EventDie says how. A backend that cannot give
	// the instance its GPUs fails with an error matching ErrNoGPURuntime.
	Start(ctx context.Context, id string) (running bool, err error)
	// Stop asks the instance to end (SIGTERM) and kills it after grace;
	// grace 0 kills at once. Stopping one that is not running is not an
	// error. With Caps.Restart the stopped instance stays (Start runs it
	// again); without, stopping removes it.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Remove deletes the instance, killing it if it runs. One already gone
	// is not an error.
	Remove(ctx context.Context, id string) error
	// Inspect reports one instance.
	Inspect(ctx context.Context, id string) (Instance, error)
	// List reports every instance of this Berth, found by its labels.
	List(ctx context.Context) ([]Instance, error)
	// Events streams the lifecycle events of this Berth's instances. The
	// subscription is active when Events returns. When the stream ends for
	// any reason but ctx (a daemon restart), one error is sent and both
	// channels close; the caller subscribes again and reconciles with List.
	Events(ctx context.Context) (<-chan Event, <-chan error)
	// Logs returns an instance's output (stdout and stderr merged by
	// line). tail > 0 keeps the last tail lines; follow streams until the
	// instance stops or ctx ends.
	Logs(ctx context.Context, id string, follow bool, tail int) (io.ReadCloser, error)
	// Pause freezes every process of a running instance and Unpause
	// resumes it (Caps.Pause; FlashBoot).
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
	// RemovePodVolume deletes a pod's own volume (volumeInGb). One that
	// does not exist is not an error.
	RemovePodVolume(ctx context.Context, podID string) error
	// Volumes keeps the network volumes' data.
	Volumes
	// RemoveRegistryAuth deletes what the backend keeps of a registry
	// login once the login is deleted (Kubernetes: its pull Secret; the
	// credential must not outlive its deletion). Nothing kept is not an
	// error.
	RemoveRegistryAuth(ctx context.Context, authID string) error
}

// RegistryAuth is a login for the registry named in an image reference.
type RegistryAuth struct {
	Username string
	Password string
}

// pullMessage is how a worker's or a pod's image pull progress reads in
// statuses: "pulling IMAGE: <layer>: Downloading".
func pullMessage(image, msg string) string { return "pulling " + image + ": " + msg }

// Caps is what a backend can do beyond the basics.
type Caps struct {
	// Pause: instances can be frozen and thawed (FlashBoot). A Kubernetes
	// Pod cannot be paused.
	Pause bool
	// Restart: a stopped instance keeps its container disk and can be
	// started again. Without it, stopping removes the instance (a pod is
	// then made again from its spec; its volumes stay).
	Restart bool
	// NetworkVolumes: network volumes can be mounted.
	NetworkVolumes bool
	// Models: the model cache can be mounted (MountModels).
	Models bool
	// Place is where instances run, for messages: "this machine", "the
	// cluster".
	Place string
}

// Spec is an instance to create: a worker or a pod.
type Spec struct {
	// Name is unique on the backend: berth-<workerId> or berth-pod-<podId>.
	Name string
	// Labels are Berth's (LabelKind and the rest); the backend adds
	// LabelManaged and LabelDataDir.
	Labels map[string]string
	Image  string
	// Auth is the login for the image's registry (nil: anonymous); AuthID
	// is its containerRegistryAuthId, which names the pull secret on a
	// backend that keeps one.
	Auth   *RegistryAuth
	AuthID string
	// Entrypoint and Cmd replace the image's when not empty.
	Entrypoint []string
	Cmd        []string
	Env        map[string]string
	// Ports the instance serves, "8888/http" or "22/tcp"; with Publish
	// they are reachable from outside (Docker: random host ports;
	// Kubernetes: a Service), reported in Instance.PublicPorts.
	Ports   []string
	Publish bool
	// GPUs are the exact devices the allocator chose (all of one node);
	// none runs without a GPU.
	GPUs []gpu.Device
	// VCPUs and MemoryMiB are what the instance asks for (0: nothing);
	// a cluster schedules by them, Docker does not limit them.
	VCPUs     int
	MemoryMiB int
	// ShmMiB sizes its /dev/shm (0: the backend's default, 64 MiB).
	ShmMiB int
	// SecretEnv names the Env entries that are credentials (the worker's
	// API key): a backend that can keeps them out of the instance's
	// visible spec (Kubernetes: a Secret owned by the Pod).
	SecretEnv []string
	// ContainerDiskGB caps the container's writable layer where the
	// backend can (Created.Warning says when it cannot).
	ContainerDiskGB int
	Mounts          []Mount
	// StopGrace is the instance's default grace when it is stopped.
	StopGrace time.Duration
}

// Mount kinds.
const (
	MountNetwork = "network" // a network volume, Mount.ID its id
	MountPod     = "pod"     // a pod's own volume (volumeInGb), Mount.ID the pod id
	MountModels  = "models"  // the model cache (hub layout), read-only
)

// Where workers find the model cache, as on RunPod; HF_HOME and
// HF_HUB_CACHE point there.
const (
	ModelsHome   = "/runpod-volume/huggingface-cache"
	ModelsTarget = ModelsHome + "/hub"
)

// Mount is a volume mounted into an instance.
type Mount struct {
	Kind   string // MountNetwork or MountPod
	ID     string
	SizeGB int    // the volume's size (a pod volume's volumeInGb)
	Target string // path in the container, e.g. /runpod-volume
}

// Created is the outcome of Backend.Create.
type Created struct {
	ID string
	// Warning says what of the spec the backend could not apply (e.g. a
	// container disk limit the storage driver cannot enforce), "" when
	// everything was.
	Warning string
}

// Instance is one worker or pod as the backend reports it.
type Instance struct {
	ID     string
	Name   string
	Labels map[string]string
	Image  string
	// State is the backend's own word (Docker: created, running, exited;
	// Kubernetes: the Pod's phase).
	State   string
	Running bool
	Paused  bool // frozen (Running stays true)
	// Exit of the last run.
	ExitCode   int
	OOMKilled  bool
	StartedAt  time.Time // zero if never started
	FinishedAt time.Time // zero if never stopped
	// Pending: asked to run and not running yet (a Pod being scheduled,
	// its image pulled).
	Pending bool
	// Waiting says why a pending instance cannot run for now
	// (WaitingUnschedulable, WaitingImage), "" when nothing holds it;
	// Error is the backend's words: the last start's error, or why it
	// waits.
	Waiting string
	Error   string
	// GPUs are the device ids the instance holds, the truth for the
	// allocator after a restart.
	GPUs []string
	// IP is where the instance's own servers are reached (load-balancing
	// endpoints); Env is the environment it was made with.
	IP  string
	Env map[string]string
	// PublicPorts maps "8888/tcp" to the port it is published on, at
	// PublicIP when the backend knows that address ("" otherwise).
	PublicPorts map[string]int
	PublicIP    string
	// VolumeDir is the host directory of a pod's own volume, where there
	// is one.
	VolumeDir string
}

// Alive reports whether the instance runs or is on its way to (pending).
func (in Instance) Alive() bool { return in.Running || in.Pending }

// Why a pending instance waits (Instance.Waiting, Event.Waiting).
const (
	// WaitingUnschedulable: no node can take it now (its GPUs or CPUs are
	// in use): it runs once they free up. Its worker counts as throttled.
	WaitingUnschedulable = "unschedulable"
	// WaitingImage: its container cannot be made — the image cannot be
	// pulled (ErrImagePull, ImagePullBackOff) or its configuration is
	// refused: a failed start.
	WaitingImage = "image"
)

// Event actions.
const (
	EventStart   = "start"   // the instance started
	EventDie     = "die"     // it ended (see Inspect for how)
	EventOOM     = "oom"     // the kernel's OOM killer hit it (a die follows)
	EventDestroy = "destroy" // it was removed
	// EventUpdate: its status changed without an exit (Kubernetes: became
	// unschedulable, an image pull failed); Inspect says how.
	EventUpdate = "update"
)

// Event is a lifecycle event of one of this Berth's instances.
type Event struct {
	Action   string
	ID       string
	Labels   map[string]string
	ExitCode int // for EventDie
	// Waiting and Reason are an EventUpdate's Instance.Waiting and
	// Instance.Error.
	Waiting, Reason string
	Time            time.Time
}

// Errors a backend's errors match (errors.Is).
var (
	// ErrNotFound: no such instance.
	ErrNotFound = errors.New("no such instance")
	// ErrNoGPURuntime: the backend cannot give instances GPUs (Docker
	// without the NVIDIA Container Toolkit).
	ErrNoGPURuntime = errors.New("the runtime cannot give containers GPUs")
	// ErrRefused: the backend refuses the request as asked (a storage
	// class that does not let a claim grow): the caller's to change, not
	// a failure of the backend.
	ErrRefused = errors.New("refused by the runtime")
)

// IsNotFound reports whether err means the instance does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// WithKind marks err as one of the errors above (or ErrImage) while keeping
// its message: errors.Is(WithKind(kind, err), kind) holds.
func WithKind(kind, err error) error {
	if err == nil {
		return nil
	}
	return kindError{kind: kind, err: err}
}

type kindError struct{ kind, err error }

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.kind, e.err} }
