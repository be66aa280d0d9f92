package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"berth/gpu"
	"berth/runtime"
	"berth/runtime/voldirs"
)

// Config is a Backend's configuration.
type Config struct {
	// Instance identifies this Berth among others sharing the daemon
	// (runtime.LabelDataDir). Required.
	Instance string
	// ExtraHosts of every container [host.docker.internal:host-gateway]:
	// how a container reaches Berth on the host.
	ExtraHosts []string
	// NetworkMode of every container ["": the daemon's default bridge].
	NetworkMode string
	// Volumes are the network volumes' host directories, bind-mounted
	// into containers. Without it network volumes are not mounted
	// (Caps.NetworkVolumes is false) nor kept.
	Volumes *voldirs.Store
	// ModelsDir is the model cache's folder (the hub layout), mounted
	// read-only into workers of endpoints naming models; "" none.
	ModelsDir string
	// DataDir holds pods' own volumes (DataDir/pods/<podId>/volume).
	// Required for pods with volumeInGb > 0.
	DataDir string
	// Devices finds the GPUs [gpu.DiscoverSystem: NVML].
	Devices func() ([]gpu.Device, error)
}

// Backend runs Berth's workers and pods as containers of one Docker
// daemon: runtime.Backend for the Supervisor. Images are pulled by Berth
// (with the registry login), GPUs are exact devices (by UUID, as CDI
// devices where the daemon has CDI), volumes are host directories, and
// FlashBoot pauses containers.
type Backend struct {
	d   *Docker
	cfg Config
}

var _ runtime.Backend = (*Backend)(nil)

// NewBackend makes the Backend of Berth instance cfg.Instance on daemon d.
func NewBackend(d *Docker, cfg Config) (*Backend, error) {
	if d == nil {
		return nil, errors.New("docker backend: no daemon")
	}
	if cfg.Instance == "" {
		return nil, errors.New("docker backend: Config.Instance is required")
	}
	if cfg.ExtraHosts == nil {
		cfg.ExtraHosts = []string{"host.docker.internal:host-gateway"}
	}
	if cfg.Devices == nil {
		cfg.Devices = gpu.DiscoverSystem
	}
	return &Backend{d: d, cfg: cfg}, nil
}

// Docker is the daemon connection, for what only Docker has (the bridge
// gateway, images) and for tests.
func (b *Backend) Docker() *Docker { return b.d }

// Name implements runtime.Backend.
func (b *Backend) Name() string { return "docker" }

// Caps implements runtime.Backend.
func (b *Backend) Caps() runtime.Caps {
	return runtime.Caps{Pause: true, Restart: true, NetworkVolumes: b.cfg.Volumes != nil, Models: b.cfg.ModelsDir != "", Place: "this machine"}
}

// Devices implements runtime.Backend.
func (b *Backend) Devices(context.Context) ([]gpu.Device, error) { return b.cfg.Devices() }

// Ping implements runtime.Backend.
func (b *Backend) Ping(ctx context.Context) error { return b.d.Ping(ctx) }

// Create implements runtime.Backend: the image is pulled when absent, then
// the container is created (not started).
func (b *Backend) Create(ctx context.Context, spec runtime.Spec, progress func(string)) (runtime.Created, error) {
	if err := b.d.EnsureImage(ctx, spec.Image, spec.Auth, progress); err != nil {
		if ctx.Err() != nil {
			return runtime.Created{}, err
		}
		return runtime.Created{}, runtime.WithKind(runtime.ErrImage, err)
	}
	cs, err := b.containerSpec(spec)
	if err != nil {
		return runtime.Created{}, err
	}
	res, err := b.d.Create(ctx, cs)
	if err != nil {
		return runtime.Created{}, classify(err)
	}
	out := runtime.Created{ID: res.ID}
	if cs.ContainerDiskGB > 0 && !res.DiskLimitApplied {
		out.Warning = fmt.Sprintf("containerDiskInGb (%d) is not enforced: the %q storage driver cannot limit a container's size",
			cs.ContainerDiskGB, b.d.Info().StorageDriver)
	}
	return out, nil
}

// containerSpec is the container of an instance spec.
func (b *Backend) containerSpec(spec runtime.Spec) (ContainerSpec, error) {
	cs := ContainerSpec{
		Name: spec.Name, Image: spec.Image, Env: envList(spec.Env), Labels: maps.Clone(spec.Labels),
		Ports: spec.Ports, PublishPorts: spec.Publish && len(spec.Ports) > 0, ContainerDiskGB: spec.ContainerDiskGB,
		ExtraHosts: b.cfg.ExtraHosts, NetworkMode: b.cfg.NetworkMode, StopTimeout: spec.StopGrace,
		ShmSize: int64(spec.ShmMiB) << 20,
		// docker-init as PID 1: signals reach programs that do not handle
		// them as PID 1 (python) and zombies are reaped.
		Init:     true,
		Instance: b.cfg.Instance,
	}
	if len(spec.Entrypoint) > 0 {
		cs.Entrypoint = spec.Entrypoint
	}
	if len(spec.Cmd) > 0 {
		cs.Cmd = spec.Cmd
	}
	for _, d := range spec.GPUs {
		cs.GPUUUIDs = append(cs.GPUUUIDs, d.UUID)
	}
	cs.UseCDI = len(cs.GPUUUIDs) > 0 && b.d.CDIEnabled()
	for _, m := range spec.Mounts {
		switch m.Kind {
		case runtime.MountNetwork:
			if b.cfg.Volumes == nil {
				continue // Caps.NetworkVolumes says so
			}
			dir := b.cfg.Volumes.Path(m.ID)
			if _, err := os.Stat(dir); err != nil {
				return cs, fmt.Errorf("network volume %q: %w", m.ID, err)
			}
			cs.VolumeMounts = append(cs.VolumeMounts, VolumeMount{Source: dir, Target: m.Target})
		case runtime.MountPod:
			if b.cfg.DataDir == "" {
				return cs, errors.New("create pod: volumeInGb needs a data directory")
			}
			dir := b.podVolumeDir(m.ID)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return cs, fmt.Errorf("create pod volume: %w", err)
			}
			cs.VolumeMounts = append(cs.VolumeMounts, VolumeMount{Source: dir, Target: m.Target})
		case runtime.MountModels:
			if b.cfg.ModelsDir == "" {
				return cs, errors.New("the model cache is not configured") // Caps.Models says so
			}
			cs.VolumeMounts = append(cs.VolumeMounts, VolumeMount{Source: b.cfg.ModelsDir, Target: m.Target, ReadOnly: true})
		default:
			return cs, fmt.Errorf("mount of %q: unknown kind %q", m.ID, m.Kind)
		}
	}
	return cs, nil
}

// podDir is a pod's directory under DataDir; its volume is "volume" in it.
func (b *Backend) podDir(podID string) string { return filepath.Join(b.cfg.DataDir, "pods", podID) }

func (b *Backend) podVolumeDir(podID string) string { return filepath.Join(b.podDir(podID), "volume") }

// Start implements runtime.Backend: the container runs on return.
func (b *Backend) Start(ctx context.Context, id string) (bool, error) {
	if err := b.d.Start(ctx, id); err != nil {
		return false, classify(err)
	}
	return true, nil
}

// Stop implements runtime.Backend: the container stays.
func (b *Backend) Stop(ctx context.Context, id string, grace time.Duration) error {
	return classify(b.d.Stop(ctx, id, grace))
}

// Remove implements runtime.Backend.
func (b *Backend) Remove(ctx context.Context, id string) error {
	return classify(b.d.Remove(ctx, id, true))
}

// Inspect implements runtime.Backend.
func (b *Backend) Inspect(ctx context.Context, id string) (runtime.Instance, error) {
	info, err := b.d.Inspect(ctx, id)
	if err != nil {
		return runtime.Instance{}, classify(err)
	}
	return b.instance(info), nil
}

// List implements runtime.Backend.
func (b *Backend) List(ctx context.Context) ([]runtime.Instance, error) {
	infos, err := b.d.List(ctx, b.cfg.Instance)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Instance, len(infos))
	for i, in := range infos {
		out[i] = b.instance(in)
	}
	return out, nil
}

func (b *Backend) instance(c ContainerInfo) runtime.Instance {
	in := runtime.Instance{
		ID: c.ID, Name: c.Name, Labels: c.Labels, Image: c.Image, State: c.State, Running: c.Running, Paused: c.Paused,
		ExitCode: c.ExitCode, OOMKilled: c.OOMKilled, StartedAt: c.StartedAt, FinishedAt: c.FinishedAt, Error: c.Error,
		GPUs: containerGPUs(c), IP: c.IP, Env: c.Env, PublicPorts: c.HostPorts,
	}
	if pod := c.Labels[runtime.LabelPod]; pod != "" && b.cfg.DataDir != "" {
		if fi, err := os.Stat(b.podVolumeDir(pod)); err == nil && fi.IsDir() {
			in.VolumeDir = b.podVolumeDir(pod)
		}
	}
	return in
}

// containerGPUs are the GPUs a container was created with: its device
// requests, or else its label.
func containerGPUs(info ContainerInfo) []string {
	if len(info.GPUDeviceIDs) > 0 {
		return info.GPUDeviceIDs
	}
	if l := info.Labels[runtime.LabelGPUs]; l != "" {
		return strings.Split(l, ",")
	}
	return nil
}

// Events implements runtime.Backend.
func (b *Backend) Events(ctx context.Context) (<-chan runtime.Event, <-chan error) {
	evs, errc := b.d.Events(ctx, b.cfg.Instance)
	out := make(chan runtime.Event, cap(evs))
	go func() {
		defer close(out)
		for ev := range evs {
			select {
			case out <- runtime.Event{Action: ev.Action, ID: ev.ContainerID, Labels: ev.Attributes, ExitCode: ev.ExitCode, Time: ev.Time}:
			case <-ctx.Done():
				// Drain so the producer can end.
				for range evs {
				}
				return
			}
		}
	}()
	return out, errc
}

// Logs implements runtime.Backend.
func (b *Backend) Logs(ctx context.Context, id string, follow bool, tail int) (io.ReadCloser, error) {
	rc, err := b.d.Logs(ctx, id, follow, tail, time.Time{})
	return rc, classify(err)
}

// Pause implements runtime.Backend.
func (b *Backend) Pause(ctx context.Context, id string) error { return classify(b.d.Pause(ctx, id)) }

// Unpause implements runtime.Backend.
func (b *Backend) Unpause(ctx context.Context, id string) error {
	return classify(b.d.Unpause(ctx, id))
}

// RemovePodVolume implements runtime.Backend: the pod's directory goes.
func (b *Backend) RemovePodVolume(_ context.Context, podID string) error {
	if b.cfg.DataDir == "" || podID == "" {
		return nil
	}
	if err := os.RemoveAll(b.podDir(podID)); err != nil {
		return fmt.Errorf("remove pod volume: %w", err)
	}
	return nil
}

// errNoVolumes: the Backend was made without Config.Volumes.
var errNoVolumes = errors.New("docker backend: network volumes are not kept (no Config.Volumes)")

// CreateVolume implements runtime.Volumes: the volume's directory.
func (b *Backend) CreateVolume(ctx context.Context, id string, sizeGB int) (runtime.VolumeStatus, error) {
	if b.cfg.Volumes == nil {
		return runtime.VolumeStatus{}, errNoVolumes
	}
	return b.cfg.Volumes.CreateVolume(ctx, id, sizeGB)
}

// GrowVolume implements runtime.Volumes: a directory has no size.
func (b *Backend) GrowVolume(context.Context, string, int) error { return nil }

// SetAsideVolume implements runtime.Volumes.
func (b *Backend) SetAsideVolume(id string) error {
	if b.cfg.Volumes == nil {
		return nil
	}
	return b.cfg.Volumes.SetAsideVolume(id)
}

// RestoreVolume implements runtime.Volumes.
func (b *Backend) RestoreVolume(id string) error {
	if b.cfg.Volumes == nil {
		return nil
	}
	return b.cfg.Volumes.RestoreVolume(id)
}

// RemoveVolume implements runtime.Volumes.
func (b *Backend) RemoveVolume(ctx context.Context, id string) error {
	if b.cfg.Volumes == nil {
		return nil
	}
	return b.cfg.Volumes.RemoveVolume(ctx, id)
}

// VolumeStatus implements runtime.Volumes: the directory and its usage.
func (b *Backend) VolumeStatus(id string) runtime.VolumeStatus {
	if b.cfg.Volumes == nil {
		return runtime.VolumeStatus{}
	}
	return b.cfg.Volumes.VolumeStatus(id)
}

// RemoveRegistryAuth implements runtime.Backend: Berth pulls with the
// login itself, and the daemon keeps nothing of it.
func (b *Backend) RemoveRegistryAuth(context.Context, string) error { return nil }

// classify marks the daemon's errors with the runtime's kinds.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return runtime.WithKind(runtime.ErrNotFound, err)
	case IsNoGPURuntime(err):
		// Only installing the NVIDIA toolkit (and restarting the daemon) helps.
		return runtime.WithKind(runtime.ErrNoGPURuntime,
			fmt.Errorf("the Docker daemon cannot give containers GPUs (install the NVIDIA Container Toolkit): %w", err))
	}
	return err
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
