package docker

import (
	"berth/runtime"
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// cdiGPUPrefix is the CDI device name prefix for NVIDIA GPUs.
const cdiGPUPrefix = "nvidia.com/gpu="

// VolumeMount mounts a host directory (Type "bind", the default) or a named
// Docker volume (Type "volume") into the container.
type VolumeMount struct {
	Type     string // "bind" (default) or "volume"
	Source   string // host path or volume name
	Target   string // path in the container, e.g. /runpod-volume
	ReadOnly bool
}

// ContainerSpec describes a container to create.
type ContainerSpec struct {
	Name       string // optional; Docker names must be unique per daemon
	Image      string
	Entrypoint []string // nil keeps the image's
	Cmd        []string // nil keeps the image's
	Env        []string // KEY=value
	Labels     map[string]string
	// Ports the container serves, "8888/http" or "22/tcp" ("/udp" also
	// works). http is carried over tcp.
	Ports []string
	// PublishPorts binds every port to a random host port on 0.0.0.0.
	PublishPorts bool
	// ContainerDiskGB caps the writable layer when the storage driver
	// supports it (overlay2 on xfs with pquota); see CreateResult.
	ContainerDiskGB int
	Binds           []string // "host:container[:ro]"
	VolumeMounts    []VolumeMount
	// GPUUUIDs pins exact GPUs; UseCDI requests them as CDI devices
	// (nvidia.com/gpu=<uuid>) instead of through the nvidia driver.
	GPUUUIDs    []string
	UseCDI      bool
	ExtraHosts  []string // e.g. host.docker.internal:host-gateway
	NetworkMode string   // "" = daemon default (bridge)
	Memory      int64    // bytes; 0 = unlimited
	// ShmSize sizes /dev/shm in bytes [0: Docker's 64 MiB].
	ShmSize int64
	// StopTimeout is the container's default grace on stop (whole seconds).
	StopTimeout time.Duration
	// Init runs docker-init as PID 1 so signals reach programs that do not
	// handle them as PID 1 (e.g. python) and zombies are reaped.
	Init bool
	// Instance identifies this Berth instance (runtime.LabelDataDir). Required.
	Instance string
}

// CreateResult is the outcome of Create.
type CreateResult struct {
	ID string
	// DiskLimitApplied is false when ContainerDiskGB was asked for but the
	// daemon's storage driver cannot enforce it (the container was created
	// without a limit).
	DiskLimitApplied bool
	Warnings         []string
}

// ContainerInfo is Berth's view of one container.
type ContainerInfo struct {
	ID         string
	Name       string // without the leading "/"
	Image      string
	Labels     map[string]string
	State      string // created, running, paused, restarting, removing, exited, dead
	Running    bool
	Paused     bool // frozen (Running stays true)
	ExitCode   int
	OOMKilled  bool
	StartedAt  time.Time // zero if never started
	FinishedAt time.Time // zero if never stopped
	// HostPorts maps "8888/tcp" to the published host port.
	HostPorts map[string]int
	// GPUDeviceIDs are the GPU UUIDs from HostConfig.DeviceRequests (CDI
	// names are reduced to the UUID), the truth about GPU assignment.
	GPUDeviceIDs []string
	Error        string // daemon's error for the last start, if any
	// Env is the container's environment; IP its address on its first
	// network with one (where a load-balancing worker's server is reached).
	Env map[string]string
	IP  string
}

// WaitResult is a container's exit, or why waiting failed.
type WaitResult struct {
	ExitCode int
	Err      error
}

// Event is a container lifecycle event for a Berth-managed container.
type Event struct {
	Action      string // "start", "die", "oom" or "destroy"
	ContainerID string
	Name        string
	// Attributes are the container's labels plus name, image and, for
	// "die", exitCode.
	Attributes map[string]string
	ExitCode   int // for "die"
	Time       time.Time
}

// Create creates (but does not start) a container. Register Wait before
// calling Start if the exit matters.
func (d *Docker) Create(ctx context.Context, spec ContainerSpec) (CreateResult, error) {
	if spec.Image == "" {
		return CreateResult{}, fmt.Errorf("create container: image is required")
	}
	if spec.Instance == "" {
		return CreateResult{}, fmt.Errorf("create container: instance is required")
	}
	cfg, hc, err := buildConfig(spec)
	if err != nil {
		return CreateResult{}, fmt.Errorf("create container %q: %w", spec.Name, err)
	}
	wantDisk := spec.ContainerDiskGB > 0
	useDisk := wantDisk && d.diskOpt.Load() != diskUnsupported
	if useDisk {
		hc.StorageOpt = map[string]string{"size": strconv.Itoa(spec.ContainerDiskGB) + "G"}
	}
	opts := client.ContainerCreateOptions{Name: spec.Name, Config: cfg, HostConfig: hc}
	res, err := d.cli.ContainerCreate(ctx, opts)
	if err != nil && useDisk && isStorageOptError(err) {
		// The driver cannot enforce a size: remember, and run without one.
		d.diskOpt.Store(diskUnsupported)
		d.log.Warn("container disk limit not supported by the storage driver; creating without it",
			"driver", d.info.StorageDriver, "err", err)
		useDisk = false
		hc.StorageOpt = nil
		res, err = d.cli.ContainerCreate(ctx, opts)
	}
	if err != nil {
		return CreateResult{}, fmt.Errorf("create container %q from %q: %w", spec.Name, spec.Image, err)
	}
	if useDisk {
		d.diskOpt.Store(diskSupported)
	}
	for _, w := range res.Warnings {
		d.log.Warn("docker create warning", "container", shortID(res.ID), "warning", w)
	}
	return CreateResult{ID: res.ID, DiskLimitApplied: useDisk, Warnings: res.Warnings}, nil
}

// Start starts a created container. A daemon without GPU support fails
// here, not at create (see IsNoGPURuntime).
func (d *Docker) Start(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start container %s: %w", shortID(id), err)
	}
	return nil
}

// CreateAndStart creates and starts a container. If start fails the
// container is removed, so no unstartable leftovers accumulate.
func (d *Docker) CreateAndStart(ctx context.Context, spec ContainerSpec) (CreateResult, error) {
	res, err := d.Create(ctx, spec)
	if err != nil {
		return CreateResult{}, err
	}
	if err := d.Start(ctx, res.ID); err != nil {
		// Clean up even if ctx was the reason start failed.
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rmErr := d.Remove(rmCtx, res.ID, true); rmErr != nil {
			d.log.Warn("remove after failed start", "container", shortID(res.ID), "err", rmErr)
		}
		return CreateResult{}, err
	}
	return res, nil
}

// Stop sends SIGTERM (or the image's stop signal) and kills the container
// after grace (rounded up to whole seconds; negative means the container's
// own StopTimeout). Stopping a stopped container is not an error.
func (d *Docker) Stop(ctx context.Context, id string, grace time.Duration) error {
	var opts client.ContainerStopOptions
	if grace >= 0 {
		secs := int(math.Ceil(grace.Seconds()))
		opts.Timeout = &secs
	}
	if _, err := d.cli.ContainerStop(ctx, id, opts); err != nil {
		return fmt.Errorf("stop container %s: %w", shortID(id), err)
	}
	return nil
}

// Kill sends SIGKILL. Killing a container that is not running is not an error.
func (d *Docker) Kill(ctx context.Context, id string) error {
	_, err := d.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
	if err != nil && cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "is not running") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill container %s: %w", shortID(id), err)
	}
	return nil
}

// Remove deletes a container and its anonymous volumes; force kills it
// first if running. A container that is already gone is not an error.
func (d *Docker) Remove(ctx context.Context, id string, force bool) error {
	_, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: force, RemoveVolumes: true})
	if err != nil && !IsNotFound(err) && !removalInProgress(err) {
		return fmt.Errorf("remove container %s: %w", shortID(id), err)
	}
	return nil
}

// removalInProgress: another caller (an exit handler, reconcile) is
// already removing the container, so it is going away as asked.
func removalInProgress(err error) bool {
	return strings.Contains(err.Error(), "is already in progress")
}

// Inspect returns the container's state. A missing container gives an
// error for which IsNotFound is true.
func (d *Docker) Inspect(ctx context.Context, id string) (ContainerInfo, error) {
	res, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return ContainerInfo{}, fmt.Errorf("inspect container %s: %w", shortID(id), err)
	}
	return toInfo(res.Container), nil
}

// List returns every container (running or not) this Berth instance
// created, found by its labels.
func (d *Docker) List(ctx context.Context, instance string) ([]ContainerInfo, error) {
	if instance == "" {
		return nil, fmt.Errorf("list containers: instance is required")
	}
	f := client.Filters{}.Add("label", runtime.LabelManaged+"=true", runtime.LabelDataDir+"="+instance)
	res, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	// The list summary lacks exit codes and device requests: inspect each.
	out := make([]ContainerInfo, 0, len(res.Items))
	for _, c := range res.Items {
		info, err := d.Inspect(ctx, c.ID)
		if IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list containers: %w", err)
		}
		out = append(out, info)
	}
	return out, nil
}

// Wait registers for the container's next exit and returns at once; the
// channel then yields exactly one result. Call it before Start so a
// fast-exiting container is not missed. Cancel ctx to stop waiting.
func (d *Docker) Wait(ctx context.Context, id string) <-chan WaitResult {
	out := make(chan WaitResult, 1)
	// ContainerWait returns once the daemon has registered the wait.
	w := d.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	go func() {
		defer close(out)
		select {
		case r := <-w.Result:
			res := WaitResult{ExitCode: int(r.StatusCode)}
			if r.Error != nil && r.Error.Message != "" {
				res.Err = fmt.Errorf("wait container %s: %s", shortID(id), r.Error.Message)
			}
			out <- res
		case err := <-w.Error:
			out <- WaitResult{ExitCode: -1, Err: fmt.Errorf("wait container %s: %w", shortID(id), err)}
		}
	}()
	return out
}

// Events streams start, die, oom and destroy events of this instance's
// containers. When the stream ends for any reason but ctx being cancelled
// (e.g. the daemon restarted), one error is sent; then both channels close.
// The subscription is active when Events returns.
func (d *Docker) Events(ctx context.Context, instance string) (<-chan Event, <-chan error) {
	out := make(chan Event, 64)
	errc := make(chan error, 1)
	if instance == "" {
		errc <- fmt.Errorf("docker events: instance is required")
		close(errc)
		close(out)
		return out, errc
	}
	f := client.Filters{}.
		Add("type", string(events.ContainerEventType)).
		Add("event", string(events.ActionStart), string(events.ActionDie), string(events.ActionOOM), string(events.ActionDestroy)).
		Add("label", runtime.LabelManaged+"=true", runtime.LabelDataDir+"="+instance)
	res := d.cli.Events(ctx, client.EventsListOptions{Filters: f})
	go func() {
		defer close(out)
		defer close(errc)
		for {
			select {
			case m := <-res.Messages:
				select {
				case out <- toEvent(m):
				case <-ctx.Done():
					return
				}
			case err, ok := <-res.Err:
				if ctx.Err() != nil {
					return
				}
				if !ok || err == nil || err == io.EOF {
					err = fmt.Errorf("docker event stream closed by the daemon: %w", io.EOF)
				} else {
					err = fmt.Errorf("docker event stream: %w", err)
				}
				errc <- err
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc
}

// IsConflict reports a name already in use or a container in the wrong
// state for the operation.
func IsConflict(err error) bool { return cerrdefs.IsConflict(err) }

func buildConfig(spec ContainerSpec) (*container.Config, *container.HostConfig, error) {
	labels := make(map[string]string, len(spec.Labels)+2)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[runtime.LabelManaged] = "true"
	labels[runtime.LabelDataDir] = spec.Instance

	cfg := &container.Config{
		Image:      spec.Image,
		Entrypoint: spec.Entrypoint,
		Cmd:        spec.Cmd,
		Env:        spec.Env,
		Labels:     labels,
	}
	if spec.StopTimeout > 0 {
		secs := int(math.Ceil(spec.StopTimeout.Seconds()))
		cfg.StopTimeout = &secs
	}
	hc := &container.HostConfig{
		Binds:       spec.Binds,
		ExtraHosts:  spec.ExtraHosts,
		NetworkMode: container.NetworkMode(spec.NetworkMode),
	}
	hc.Resources.Memory = spec.Memory
	hc.ShmSize = spec.ShmSize
	if spec.Init {
		on := true
		hc.Init = &on
	}
	if len(spec.Ports) > 0 {
		cfg.ExposedPorts = network.PortSet{}
		if spec.PublishPorts {
			hc.PortBindings = network.PortMap{}
		}
		for _, s := range spec.Ports {
			p, err := parsePort(s)
			if err != nil {
				return nil, nil, err
			}
			cfg.ExposedPorts[p] = struct{}{}
			if spec.PublishPorts {
				// Empty HostPort: the daemon picks a free one.
				hc.PortBindings[p] = []network.PortBinding{{HostIP: netip.IPv4Unspecified()}}
			}
		}
	}
	for _, m := range spec.VolumeMounts {
		typ := mount.TypeBind
		if m.Type != "" {
			typ = mount.Type(m.Type)
		}
		if m.Target == "" {
			return nil, nil, fmt.Errorf("volume mount of %q has no target", m.Source)
		}
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: typ, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	if len(spec.GPUUUIDs) > 0 {
		// Exact devices only: Count and DeviceIDs are mutually exclusive.
		if spec.UseCDI {
			ids := make([]string, len(spec.GPUUUIDs))
			for i, u := range spec.GPUUUIDs {
				ids[i] = cdiGPUPrefix + u
			}
			hc.Resources.DeviceRequests = []container.DeviceRequest{{Driver: "cdi", DeviceIDs: ids}}
		} else {
			hc.Resources.DeviceRequests = []container.DeviceRequest{{
				Driver:       "nvidia",
				DeviceIDs:    append([]string(nil), spec.GPUUUIDs...),
				Capabilities: [][]string{{"gpu"}},
			}}
		}
	}
	return cfg, hc, nil
}

// parsePort turns "8888/http", "22/tcp", "53/udp" or "8080" into a
// Docker port; http rides on tcp.
func parsePort(s string) (network.Port, error) {
	num, proto, _ := strings.Cut(strings.TrimSpace(s), "/")
	switch strings.ToLower(proto) {
	case "", "http", "https", "tcp":
		proto = "tcp"
	case "udp":
	default:
		return network.Port{}, fmt.Errorf("port %q: unknown protocol %q", s, proto)
	}
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || n == 0 {
		return network.Port{}, fmt.Errorf("port %q: invalid number", s)
	}
	p, ok := network.PortFrom(uint16(n), network.IPProtocol(proto))
	if !ok {
		return network.Port{}, fmt.Errorf("port %q: invalid", s)
	}
	return p, nil
}

// isStorageOptError recognises the drivers' refusals of StorageOpt "size",
// e.g. "--storage-opt is not supported" (fuse-overlayfs, vfs) or
// "--storage-opt is supported only for overlay over xfs with 'pquota' mount option".
func isStorageOptError(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "storage-opt") || strings.Contains(msg, "storage opt") ||
		strings.Contains(msg, "storageopt") || strings.Contains(msg, "pquota")
}

func toInfo(c container.InspectResponse) ContainerInfo {
	info := ContainerInfo{
		ID:    c.ID,
		Name:  strings.TrimPrefix(c.Name, "/"),
		Image: c.Image,
	}
	if c.Config != nil {
		info.Labels = c.Config.Labels
		info.Image = c.Config.Image
		info.Env = map[string]string{}
		for _, kv := range c.Config.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				info.Env[k] = v
			}
		}
	}
	if s := c.State; s != nil {
		info.State = string(s.Status)
		info.Running = s.Running
		info.Paused = s.Paused
		info.ExitCode = s.ExitCode
		info.OOMKilled = s.OOMKilled
		info.Error = s.Error
		info.StartedAt = parseDockerTime(s.StartedAt)
		info.FinishedAt = parseDockerTime(s.FinishedAt)
	}
	if c.NetworkSettings != nil {
		for _, n := range c.NetworkSettings.Networks {
			if n != nil && n.IPAddress.IsValid() {
				info.IP = n.IPAddress.String()
				break
			}
		}
		for port, binds := range c.NetworkSettings.Ports {
			for _, b := range binds {
				if n, err := strconv.Atoi(b.HostPort); err == nil && n > 0 {
					if info.HostPorts == nil {
						info.HostPorts = map[string]int{}
					}
					info.HostPorts[port.String()] = n
					break
				}
			}
		}
	}
	if c.HostConfig != nil {
		for _, r := range c.HostConfig.DeviceRequests {
			for _, id := range r.DeviceIDs {
				info.GPUDeviceIDs = append(info.GPUDeviceIDs, strings.TrimPrefix(id, cdiGPUPrefix))
			}
		}
	}
	return info
}

// parseDockerTime parses the daemon's RFC 3339 times; its "never" value
// (0001-01-01T00:00:00Z) becomes the zero time.
func parseDockerTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

func toEvent(m events.Message) Event {
	ev := Event{
		Action:      string(m.Action),
		ContainerID: m.Actor.ID,
		Name:        m.Actor.Attributes["name"],
		Attributes:  m.Actor.Attributes,
	}
	if m.TimeNano != 0 {
		ev.Time = time.Unix(0, m.TimeNano)
	} else if m.Time != 0 {
		ev.Time = time.Unix(m.Time, 0)
	}
	if code, err := strconv.Atoi(m.Actor.Attributes["exitCode"]); err == nil {
		ev.ExitCode = code
	}
	return ev
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
