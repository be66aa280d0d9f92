package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"berth/gpu"
	"berth/store"
)

// Pod errors; test them with errors.Is. GPU shortages wrap gpu.ErrNoCapacity,
// gpu.ErrUnknownType or gpu.ErrAlreadyHeld; a daemon without GPU support
// gives an error matching ErrNoGPURuntime.
var (
	ErrUnknownPod = errors.New("no container for this pod")
	ErrPodExists  = errors.New("the pod already has a container")
	// ErrImage: the pod's image is missing locally and cannot be pulled
	// (or no image was given).
	ErrImage = errors.New("pod image unavailable")
)

// Values of PodState.DesiredStatus (RunPod's pod states).
const (
	PodRunning    = "RUNNING"
	PodExited     = "EXITED"
	PodTerminated = "TERMINATED"
)

// PodSpec describes a pod's container. Fields left empty are taken from the
// template when TemplateID is set.
type PodSpec struct {
	ID string // required: the pod record's id
	// Version labels the container (LabelVersion); EnsurePod recreates a
	// container made for another version.
	Version    int
	Name       string
	Image      string // required unless the template has one
	TemplateID string
	Entrypoint []string
	Cmd        []string
	Env        map[string]string // over the template's env
	// Ports such as "8888/http" or "22/tcp"; each is published on a free
	// host port, reported in PodState.PortMappings.
	Ports []string
	// ComputeType "GPU" (the default) or "CPU". A GPU pod on a machine with
	// no GPUs at all runs without one (PodState.Warning says so).
	ComputeType     string
	GPUTypeIDs      []string // in order of preference; empty: any
	GPUCount        int      // [1]
	ContainerDiskGB int      // enforced where the storage driver can
	// VolumeGB > 0 gives the pod a persistent directory
	// (DataDir/pods/<id>/volume) mounted at VolumeMountPath [/workspace].
	// The size is not enforced.
	VolumeGB        int
	VolumeMountPath string
	// NetworkVolumeID is mounted at VolumeMountPath in place of the pod
	// volume (VolumeGB is then ignored), as RunPod mounts a pod's network
	// volume; workers get theirs at /runpod-volume.
	NetworkVolumeID string
	RegistryAuthID  string
	// What it asks for beside its GPUs (podRequest): a CPU pod's vCPUs and
	// flavour, a GPU pod's least vCPUs and memory (GB) per GPU.
	VCPUCount                   int
	CPUFlavorIDs                []string
	MinVCPUPerGPU, MinRAMPerGPU int
	// ShmMiB overrides its /dev/shm size (its template's shmSizeInMb).
	ShmMiB int
}

// PodState is a pod's container as the daemon reports it.
type PodState struct {
	ID          string `json:"id"`
	ContainerID string `json:"containerId,omitempty"`
	// DesiredStatus is RUNNING, EXITED (container stopped) or TERMINATED
	// (no container).
	DesiredStatus string         `json:"desiredStatus"`
	State         string         `json:"state,omitempty"` // the backend's word (Instance.State)
	ExitCode      int            `json:"exitCode"`
	OOMKilled     bool           `json:"oomKilled,omitempty"`
	Error         string         `json:"error,omitempty"`
	Image         string         `json:"image,omitempty"`
	Version       int            `json:"version"`      // PodSpec.Version the container was made for
	PortMappings  map[string]int `json:"portMappings"` // "8888" -> host port, while running
	PublicIP      string         `json:"publicIp"`
	GPUs          []string       `json:"gpus,omitempty"`
	GPUTypeID     string         `json:"gpuTypeId,omitempty"`
	GPUCount      int            `json:"gpuCount"`
	StartedAt     time.Time      `json:"startedAt,omitzero"`
	FinishedAt    time.Time      `json:"finishedAt,omitzero"`
	VolumeDir     string         `json:"volumeDir,omitempty"` // host dir of volumeInGb
	// Warnings are standing conditions of the container that do not stop
	// it (no GPU on this host, a disk size not enforced…); Warning is
	// them joined with "; ".
	Warning  string   `json:"warning,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// PodExit says how a pod's container stopped (Config.OnPodExit).
type PodExit struct {
	ID string
	// Requested: an operation stopped or removed it (StopPod, ResetPod,
	// RemovePod…); false when the container ended on its own (its command
	// exited, it was killed or removed behind Berth's back).
	Requested bool
	// Gone: the container no longer exists (no exit code).
	Gone       bool
	ExitCode   int
	OOMKilled  bool
	Error      string // the backend's reason, e.g. a failed start
	FinishedAt time.Time
}

// Reason is a short human account of the exit: "exit code 1",
// "OOM killed (exit code 137)", "container removed".
func (e PodExit) Reason() string {
	switch {
	case e.Gone:
		return "container removed"
	case e.OOMKilled:
		return fmt.Sprintf("OOM killed (exit code %d)", e.ExitCode)
	case e.Error != "":
		return fmt.Sprintf("exit code %d: %s", e.ExitCode, e.Error)
	}
	return fmt.Sprintf("exit code %d", e.ExitCode)
}

// PodRuntime runs pods as long-lived containers. *Supervisor implements it.
// Operations on one pod are serialised; all block until the backend is done.
type PodRuntime interface {
	// EnsurePod makes the pod run: it starts the pod's stopped container,
	// creates a missing one, and replaces one made for another
	// spec.Version (like ResetPod).
	EnsurePod(ctx context.Context, spec PodSpec) (PodState, error)
	// CreatePod pulls the image if needed, gives the pod its GPUs, and
	// creates and starts its container. It fails with gpu.ErrNoCapacity
	// when the GPUs are held, gpu.ErrUnknownType when none of the types
	// exist here, ErrPodExists when the pod already has a container.
	CreatePod(ctx context.Context, spec PodSpec) (PodState, error)
	// StartPod starts a stopped pod on the GPUs it had (error wrapping
	// gpu.ErrAlreadyHeld when they are now taken: reset it instead).
	StartPod(ctx context.Context, podID string) (PodState, error)
	// StopPod stops the container (SIGTERM, then SIGKILL after
	// Config.PodStopGrace) and frees its GPUs; the container and its disk stay.
	StopPod(ctx context.Context, podID string) (PodState, error)
	// RestartPod stops and starts the container, keeping its GPUs.
	RestartPod(ctx context.Context, podID string) (PodState, error)
	// ResetPod recreates the container from spec (fresh container disk,
	// new GPU allocation); the pod volume is kept.
	ResetPod(ctx context.Context, spec PodSpec) (PodState, error)
	// RemovePod removes the container, frees its GPUs and deletes the pod
	// volume. Removing an unknown pod is not an error.
	RemovePod(ctx context.Context, podID string) error
	// PodState inspects the pod's container (ErrUnknownPod without one).
	PodState(ctx context.Context, podID string) (PodState, error)
	// ListPods reports every pod container of this instance.
	ListPods(ctx context.Context) ([]PodState, error)
	// PodLogs returns the container's output; see WorkerLogs.
	PodLogs(ctx context.Context, podID string, follow bool, tail int) (io.ReadCloser, error)
}

var _ PodRuntime = (*Supervisor)(nil)

// podState is what the Supervisor tracks of a pod's container.
type podState struct {
	id         string
	version    int
	instanceID string
	gpus       []string
	gpuType    string
	running    bool      // the instance is alive (running or pending): GPUs held
	startedAt  time.Time // it runs since (OnRun start reported); zero while pending
	warnings   []string
}

// podLock serialises operations on one pod (and keeps reconcile out).
func (s *Supervisor) podLock(id string) *sync.Mutex {
	m, _ := s.podOps.LoadOrStore(id, &sync.Mutex{})
	return m.(*sync.Mutex)
}

// findPod returns the pod's tracked container, or looks for it by label.
func (s *Supervisor) findPod(ctx context.Context, id string) (*podState, error) {
	s.mu.Lock()
	p := s.pods[id]
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	infos, err := s.b.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, in := range infos {
		if in.Labels[LabelKind] == KindPod && in.Labels[LabelPod] == id {
			p = &podState{id: id, instanceID: in.ID, gpus: in.GPUs}
			p.version, _ = strconv.Atoi(in.Labels[LabelVersion])
			p.gpuType = s.gpuTypeOf(p.gpus)
			s.mu.Lock()
			if q := s.pods[id]; q != nil {
				p = q
			} else {
				s.pods[id] = p
				s.podByInstance[in.ID] = p
			}
			s.mu.Unlock()
			return p, nil
		}
	}
	return nil, fmt.Errorf("pod %s: %w", id, ErrUnknownPod)
}

// CreatePod implements PodRuntime.
func (s *Supervisor) CreatePod(ctx context.Context, spec PodSpec) (PodState, error) {
	if spec.ID == "" {
		return PodState{}, errors.New("create pod: id is required")
	}
	l := s.podLock(spec.ID)
	l.Lock()
	defer l.Unlock()
	if _, err := s.findPod(ctx, spec.ID); err == nil {
		return PodState{}, fmt.Errorf("create pod %s: %w", spec.ID, ErrPodExists)
	} else if !errors.Is(err, ErrUnknownPod) {
		return PodState{}, err
	}
	return s.createPodLocked(ctx, spec)
}

// PodPullProgress is the image pull progress of a pod whose container is
// being created ("pulling IMAGE: …"), "" when no pull runs for it.
func (s *Supervisor) PodPullProgress(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.podPulls[id]
}

func (s *Supervisor) createPodLocked(ctx context.Context, spec PodSpec) (PodState, error) {
	spec, err := s.resolvePodSpec(spec)
	if err != nil {
		return PodState{}, err
	}
	var auth *RegistryAuth
	if spec.RegistryAuthID != "" && s.cfg.Credentials != nil {
		if auth, err = s.cfg.Credentials(spec.RegistryAuthID); err != nil {
			return PodState{}, fmt.Errorf("registry credentials %q: %w", spec.RegistryAuthID, err)
		}
	}

	p := &podState{id: spec.ID, version: spec.Version}
	var devs []gpu.Device
	if !strings.EqualFold(spec.ComputeType, "CPU") {
		if s.cfg.GPUs == nil || len(s.cfg.GPUs.Types()) == 0 {
			p.warnings = append(p.warnings, "no GPUs on this machine: the pod runs without a GPU")
		} else {
			if devs, err = s.allocatePodGPUs(ctx, spec.ID, spec.GPUTypeIDs, max(spec.GPUCount, 1)); err != nil {
				return PodState{}, err
			}
			for _, d := range devs {
				p.gpus = append(p.gpus, d.UUID)
			}
			p.gpuType = devs[0].TypeID
		}
	}
	release := func() {
		if len(p.gpus) > 0 {
			s.mu.Lock()
			s.cfg.GPUs.Release(spec.ID)
			s.mu.Unlock()
		}
	}

	env := map[string]string{}
	maps.Copy(env, spec.Env)
	env["RUNPOD_POD_ID"] = spec.ID
	env["RUNPOD_POD_HOSTNAME"] = spec.ID
	env["RUNPOD_PUBLIC_IP"] = s.cfg.PublicIP
	env["RUNPOD_GPU_COUNT"] = strconv.Itoa(len(p.gpus))
	if spec.NetworkVolumeID != "" {
		env["RUNPOD_VOLUME_ID"] = spec.NetworkVolumeID
	}
	is := Spec{
		Name:  "berth-pod-" + spec.ID,
		Image: spec.Image,
		Env:   env,
		Labels: map[string]string{LabelKind: KindPod, LabelPod: spec.ID, LabelGPUs: strings.Join(p.gpus, ","),
			LabelVersion: strconv.Itoa(spec.Version)},
		Auth: auth, AuthID: spec.RegistryAuthID, Entrypoint: spec.Entrypoint, Cmd: spec.Cmd,
		Ports: spec.Ports, Publish: true, GPUs: devs, ContainerDiskGB: spec.ContainerDiskGB,
		StopGrace: s.cfg.PodStopGrace,
	}
	is.VCPUs, is.MemoryMiB = podRequest(spec, devs, s.cfg.VCPUsPerGPU, s.cfg.MemoryGiBPerGPU)
	is.ShmMiB = ShmMiB(is.MemoryMiB, spec.ShmMiB)
	mp := spec.VolumeMountPath
	if mp == "" {
		mp = "/workspace"
	}
	switch {
	case spec.NetworkVolumeID != "":
		// RunPod mounts a pod's network volume at its volumeMountPath, in
		// place of the pod volume.
		if !s.caps.NetworkVolumes {
			p.warnings = append(p.warnings, "network volume "+spec.NetworkVolumeID+" is not mounted: Berth has no volume directory configured")
		} else {
			is.Mounts = append(is.Mounts, Mount{Kind: MountNetwork, ID: spec.NetworkVolumeID, Target: mp})
		}
	case spec.VolumeGB > 0:
		is.Mounts = append(is.Mounts, Mount{Kind: MountPod, ID: spec.ID, SizeGB: spec.VolumeGB, Target: mp})
	}
	res, err := s.b.Create(ctx, is, func(msg string) {
		s.log.Info("pod image pull", "pod", spec.ID, "image", spec.Image, "progress", msg)
		s.mu.Lock()
		s.podPulls[spec.ID] = pullMessage(spec.Image, msg)
		s.mu.Unlock()
	})
	s.mu.Lock()
	delete(s.podPulls, spec.ID)
	s.mu.Unlock()
	if err != nil {
		release()
		if errors.Is(err, ErrImage) {
			err = fmt.Errorf("%w: %w", ErrImage, err)
		}
		return PodState{}, err
	}
	runs, err := s.b.Start(ctx, res.ID)
	if err != nil {
		// No unstartable leftovers: remove it, even if ctx was the reason.
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if rmErr := s.b.Remove(rmCtx, res.ID); rmErr != nil {
			s.log.Warn("remove a pod container that did not start", "pod", spec.ID, "container", shortID(res.ID), "err", rmErr)
		}
		cancel()
		release()
		return PodState{}, err
	}
	if res.Warning != "" {
		p.warnings = append(p.warnings, res.Warning)
	}
	p.instanceID, p.running = res.ID, true
	s.mu.Lock()
	s.pods[p.id] = p
	s.podByInstance[res.ID] = p
	s.mu.Unlock()
	s.log.Info("pod started", "pod", p.id, "container", shortID(res.ID), "image", spec.Image, "gpus", p.gpus)
	if runs {
		s.podRuns(p, s.clock.Now())
	} else if in, err := s.b.Inspect(ctx, res.ID); err == nil && in.Running {
		s.podRuns(p, s.clock.Now()) // it ran before its start event could find it tracked
	}
	return s.podStateOf(ctx, p)
}

// EnsurePod implements PodRuntime.
func (s *Supervisor) EnsurePod(ctx context.Context, spec PodSpec) (PodState, error) {
	if spec.ID == "" {
		return PodState{}, errors.New("ensure pod: id is required")
	}
	l := s.podLock(spec.ID)
	l.Lock()
	defer l.Unlock()
	p, err := s.findPod(ctx, spec.ID)
	switch {
	case errors.Is(err, ErrUnknownPod):
		return s.createPodLocked(ctx, spec)
	case err != nil:
		return PodState{}, err
	}
	s.mu.Lock()
	same, running := p.version == spec.Version, p.running
	s.mu.Unlock()
	// A backend that cannot start a stopped instance again (Kubernetes)
	// makes the pod anew from its spec; its volumes stay.
	if !same || !running && !s.caps.Restart {
		if err := s.removePodContainer(ctx, p); err != nil {
			return PodState{}, err
		}
		return s.createPodLocked(ctx, spec)
	}
	return s.startPodLocked(ctx, spec.ID)
}

// PodSpecFromRecord is the container a pod record asks for.
func PodSpecFromRecord(p store.Pod) PodSpec {
	return PodSpec{
		ID: p.ID, Version: p.Version, Name: p.Name, Image: p.ImageName, TemplateID: p.TemplateID,
		Entrypoint: p.DockerEntrypoint, Cmd: p.DockerStartCmd, Env: p.Env, Ports: p.Ports,
		ComputeType: p.ComputeType, GPUTypeIDs: p.GPUTypeIDs, GPUCount: p.GPUCount,
		ContainerDiskGB: p.ContainerDiskInGb, VolumeGB: p.VolumeInGb, VolumeMountPath: p.VolumeMountPath,
		NetworkVolumeID: p.NetworkVolumeID, RegistryAuthID: p.ContainerRegistryAuthID,
		VCPUCount: p.VCPUCount, CPUFlavorIDs: p.CPUFlavorIDs, MinVCPUPerGPU: p.MinVCPUPerGPU, MinRAMPerGPU: p.MinRAMPerGPU,
	}
}

// resolvePodSpec fills empty fields from the pod's template.
func (s *Supervisor) resolvePodSpec(spec PodSpec) (PodSpec, error) {
	if spec.TemplateID != "" {
		if s.cfg.Template == nil {
			return spec, errors.New("create pod: templates are not available")
		}
		t, err := s.cfg.Template(spec.TemplateID)
		if err != nil {
			return spec, fmt.Errorf("pod template %q: %w", spec.TemplateID, err)
		}
		if spec.Image == "" {
			spec.Image = t.ImageName
		}
		if len(spec.Entrypoint) == 0 {
			spec.Entrypoint = t.DockerEntrypoint
		}
		if len(spec.Cmd) == 0 {
			spec.Cmd = t.DockerStartCmd
		}
		if len(spec.Ports) == 0 {
			spec.Ports = t.Ports
		}
		if spec.ContainerDiskGB == 0 {
			spec.ContainerDiskGB = t.ContainerDiskInGb
		}
		if spec.VolumeGB == 0 {
			spec.VolumeGB = t.VolumeInGb
		}
		if spec.VolumeMountPath == "" {
			spec.VolumeMountPath = t.VolumeMountPath
		}
		if spec.RegistryAuthID == "" {
			spec.RegistryAuthID = t.ContainerRegistryAuthID
		}
		if spec.ShmMiB == 0 {
			spec.ShmMiB = t.ShmSizeInMb
		}
		env := map[string]string{}
		maps.Copy(env, t.Env)
		maps.Copy(env, spec.Env)
		spec.Env = env
	}
	if spec.Image == "" {
		return spec, fmt.Errorf("create pod: %w: an image (imageName or a template with one) is required", ErrImage)
	}
	var ports []string
	for _, p := range spec.Ports {
		// RunPod also accepts "8888/http,22/tcp" in one string.
		for _, q := range strings.Split(p, ",") {
			if q = strings.TrimSpace(q); q != "" {
				ports = append(ports, q)
			}
		}
	}
	spec.Ports = ports
	return spec, nil
}

// StartPod implements PodRuntime.
func (s *Supervisor) StartPod(ctx context.Context, id string) (PodState, error) {
	l := s.podLock(id)
	l.Lock()
	defer l.Unlock()
	return s.startPodLocked(ctx, id)
}

func (s *Supervisor) startPodLocked(ctx context.Context, id string) (PodState, error) {
	p, err := s.findPod(ctx, id)
	if err != nil {
		return PodState{}, err
	}
	info, err := s.b.Inspect(ctx, p.instanceID)
	if err != nil {
		return PodState{}, err
	}
	if info.Alive() {
		return s.podStateOf(ctx, p)
	}
	if !s.caps.Restart {
		return PodState{}, fmt.Errorf("start pod %s: the %s runtime cannot start a stopped pod again: make it anew from its spec (EnsurePod)", id, s.b.Name())
	}
	if len(p.gpus) > 0 && s.cfg.GPUs != nil {
		if err := s.restorePodGPUs(ctx, id, p.gpus); err != nil {
			return PodState{}, fmt.Errorf("start pod %s: its GPUs are in use (reset the pod to get others): %w", id, err)
		}
	}
	runs, err := s.b.Start(ctx, p.instanceID)
	if err != nil {
		s.releasePodGPUs(p)
		return PodState{}, err
	}
	s.mu.Lock()
	p.running = true
	s.mu.Unlock()
	if runs {
		s.podRuns(p, s.clock.Now())
	}
	return s.podStateOf(ctx, p)
}

// StopPod implements PodRuntime.
func (s *Supervisor) StopPod(ctx context.Context, id string) (PodState, error) {
	l := s.podLock(id)
	l.Lock()
	defer l.Unlock()
	p, err := s.findPod(ctx, id)
	if err != nil {
		return PodState{}, err
	}
	if err := s.b.Stop(ctx, p.instanceID, s.cfg.PodStopGrace); err != nil {
		return PodState{}, err
	}
	if !s.caps.Restart {
		// Stopping removed the instance; the next start makes it anew.
		s.mu.Lock()
		delete(s.pods, p.id)
		delete(s.podByInstance, p.instanceID)
		s.mu.Unlock()
		s.podExitedLocked(p, true, true)
		return PodState{ID: p.id, DesiredStatus: PodExited, PortMappings: map[string]int{}, PublicIP: s.cfg.PublicIP, GPUCount: len(p.gpus)}, nil
	}
	s.podExitedLocked(p, false, true)
	return s.podStateOf(ctx, p)
}

// RestartPod implements PodRuntime.
func (s *Supervisor) RestartPod(ctx context.Context, id string) (PodState, error) {
	l := s.podLock(id)
	l.Lock()
	defer l.Unlock()
	p, err := s.findPod(ctx, id)
	if err != nil {
		return PodState{}, err
	}
	s.mu.Lock()
	running := p.running
	s.mu.Unlock()
	if !running {
		return s.startPodLocked(ctx, id)
	}
	if !s.caps.Restart {
		return PodState{}, fmt.Errorf("restart pod %s: the %s runtime cannot start a stopped pod again: stop it and make it anew from its spec (EnsurePod)", id, s.b.Name())
	}
	if err := s.b.Stop(ctx, p.instanceID, s.cfg.PodStopGrace); err != nil {
		return PodState{}, err
	}
	if _, err := s.b.Start(ctx, p.instanceID); err != nil {
		s.podExitedLocked(p, false, true)
		return PodState{}, err
	}
	return s.podStateOf(ctx, p)
}

// ResetPod implements PodRuntime.
func (s *Supervisor) ResetPod(ctx context.Context, spec PodSpec) (PodState, error) {
	l := s.podLock(spec.ID)
	l.Lock()
	defer l.Unlock()
	if p, err := s.findPod(ctx, spec.ID); err == nil {
		if err := s.removePodContainer(ctx, p); err != nil {
			return PodState{}, err
		}
	} else if !errors.Is(err, ErrUnknownPod) {
		return PodState{}, err
	}
	return s.createPodLocked(ctx, spec)
}

// RemovePod implements PodRuntime.
func (s *Supervisor) RemovePod(ctx context.Context, id string) error {
	l := s.podLock(id)
	l.Lock()
	defer l.Unlock()
	p, err := s.findPod(ctx, id)
	switch {
	case err == nil:
		if err := s.removePodContainer(ctx, p); err != nil {
			return err
		}
	case !errors.Is(err, ErrUnknownPod):
		return err
	}
	if err := s.b.RemovePodVolume(ctx, id); err != nil {
		return err
	}
	s.podOps.Delete(id)
	return nil
}

// removePodContainer force-removes the container and forgets it.
func (s *Supervisor) removePodContainer(ctx context.Context, p *podState) error {
	if err := s.b.Remove(ctx, p.instanceID); err != nil {
		return err
	}
	s.podExitedLocked(p, true, true)
	s.mu.Lock()
	delete(s.pods, p.id)
	delete(s.podByInstance, p.instanceID)
	s.mu.Unlock()
	return nil
}

// podRuns opens a pod's usage: its instance runs since t. Once per run
// (the start event and the start call may both report it): it reports
// whether this call was the one.
func (s *Supervisor) podRuns(p *podState, t time.Time) bool {
	s.mu.Lock()
	open := p.running && p.startedAt.IsZero()
	if open {
		p.startedAt = t
	}
	gpuType, gpus := p.gpuType, len(p.gpus)
	s.mu.Unlock()
	if open && s.cfg.OnRun != nil {
		s.cfg.OnRun(KindPod, p.id, "", gpuType, gpus, t, time.Time{})
	}
	return open
}

// podExitedLocked records that the pod's container is not running (the
// caller holds the pod's lock): GPUs freed, usage closed, owner told. With
// gone the container no longer exists.
func (s *Supervisor) podExitedLocked(p *podState, gone, requested bool) {
	end := s.clock.Now()
	exit := PodExit{ID: p.id, Requested: requested, Gone: gone}
	if !gone {
		info, err := s.b.Inspect(s.ctx, p.instanceID)
		if err == nil && info.Alive() {
			return // a stale event: it was started again
		}
		if err == nil && !info.FinishedAt.IsZero() {
			end = info.FinishedAt
		}
		if err == nil {
			exit.ExitCode, exit.OOMKilled, exit.Error = info.ExitCode, info.OOMKilled, info.Error
		} else if IsNotFound(err) {
			exit.Gone = true
		}
	}
	exit.FinishedAt = end
	s.mu.Lock()
	was := p.running
	p.running = false
	start := p.startedAt
	p.startedAt = time.Time{}
	gpuType, gpus := p.gpuType, len(p.gpus)
	s.mu.Unlock()
	s.releasePodGPUs(p)
	if !was {
		return
	}
	if requested {
		s.log.Info("pod stopped", "pod", p.id, "container", shortID(p.instanceID))
	} else {
		s.log.Warn("pod container ended", "pod", p.id, "container", shortID(p.instanceID), "reason", exit.Reason())
	}
	if s.cfg.OnRun != nil && !start.IsZero() {
		s.cfg.OnRun(KindPod, p.id, "", gpuType, gpus, start, end)
	}
	if s.cfg.OnPodExit != nil {
		s.cfg.OnPodExit(exit)
	}
}

func (s *Supervisor) releasePodGPUs(p *podState) {
	if len(p.gpus) > 0 && s.cfg.GPUs != nil {
		s.mu.Lock()
		s.cfg.GPUs.Release(p.id)
		s.mu.Unlock()
	}
}

// podExited handles a die event of a pod's container.
func (s *Supervisor) podExited(p *podState, instanceID string) {
	l := s.podLock(p.id)
	l.Lock()
	defer l.Unlock()
	s.mu.Lock()
	current := s.pods[p.id] == p && p.instanceID == instanceID
	s.mu.Unlock()
	if current {
		s.podExitedLocked(p, false, false)
	}
}

// podVanished handles a tracked pod container that is no longer listed.
func (s *Supervisor) podVanished(p *podState) {
	l := s.podLock(p.id)
	if !l.TryLock() {
		return // an operation is under way; it knows
	}
	defer l.Unlock()
	s.mu.Lock()
	current := s.pods[p.id] == p
	if current {
		delete(s.pods, p.id)
		delete(s.podByInstance, p.instanceID)
	}
	s.mu.Unlock()
	if current {
		s.podExitedLocked(p, true, false)
	}
}

// resyncPod adopts a pod container after a restart, notices a missed exit,
// and removes the containers of pods that no longer exist.
func (s *Supervisor) resyncPod(ctx context.Context, info Instance) {
	id := info.Labels[LabelPod]
	l := s.podLock(id)
	if !l.TryLock() {
		return // an operation is under way
	}
	defer l.Unlock()
	if s.cfg.PodExists != nil {
		ok, err := s.cfg.PodExists(id)
		if err == nil && !ok {
			s.log.Info("removing the container of a deleted pod", "pod", id, "container", shortID(info.ID))
			p := &podState{id: id, instanceID: info.ID, gpus: info.GPUs, running: info.Alive(), startedAt: info.StartedAt}
			s.mu.Lock()
			if q := s.pods[id]; q != nil {
				p = q
			}
			s.mu.Unlock()
			if err := s.removePodContainer(ctx, p); err != nil {
				s.log.Warn("remove pod container", "pod", id, "err", err)
			}
			if err := s.b.RemovePodVolume(ctx, id); err != nil {
				s.log.Warn("remove pod volume", "pod", id, "err", err)
			}
			return
		}
	}
	s.mu.Lock()
	p := s.pods[id]
	if p != nil && p.instanceID != info.ID {
		s.mu.Unlock()
		s.log.Warn("removing a stray container of a pod", "pod", id, "container", shortID(info.ID))
		_ = s.b.Remove(ctx, info.ID)
		return
	}
	found := p == nil
	if found {
		p = &podState{id: id, instanceID: info.ID, gpus: info.GPUs}
		p.version, _ = strconv.Atoi(info.Labels[LabelVersion])
		s.pods[id] = p
		s.podByInstance[info.ID] = p
	}
	adopt := info.Alive() && !p.running
	missed := !info.Alive() && p.running
	var restoreErr error
	if adopt {
		p.running, p.startedAt = true, info.StartedAt
		if len(p.gpus) > 0 && s.cfg.GPUs != nil {
			restoreErr = s.cfg.GPUs.Restore(id, p.gpus)
		}
	}
	// Under the lock: the event loop reads it (podRuns) meanwhile.
	if p.gpuType == "" {
		p.gpuType = s.gpuTypeOf(p.gpus)
	}
	s.mu.Unlock()
	if adopt {
		if restoreErr != nil {
			s.log.Warn("pod GPUs could not be restored", "pod", id, "err", restoreErr)
		}
		s.log.Info("adopted pod container", "pod", id, "container", shortID(info.ID), "gpus", p.gpus)
		if s.cfg.OnRun != nil && !info.StartedAt.IsZero() {
			s.cfg.OnRun(KindPod, id, "", p.gpuType, len(p.gpus), info.StartedAt, time.Time{})
		}
	}
	if missed {
		s.podExitedLocked(p, false, false)
	}
	if found && !info.Alive() && s.cfg.OnPodExit != nil {
		// Stopped while Berth was down (or before it first looked): the
		// record may still say RUNNING.
		s.cfg.OnPodExit(PodExit{ID: id, ExitCode: info.ExitCode, OOMKilled: info.OOMKilled, Error: info.Error, FinishedAt: info.FinishedAt})
	}
}

// PodState implements PodRuntime.
func (s *Supervisor) PodState(ctx context.Context, id string) (PodState, error) {
	p, err := s.findPod(ctx, id)
	if err != nil {
		return PodState{}, err
	}
	return s.podStateOf(ctx, p)
}

// ListPods implements PodRuntime.
func (s *Supervisor) ListPods(ctx context.Context) ([]PodState, error) {
	infos, err := s.b.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []PodState
	for _, in := range infos {
		if in.Labels[LabelKind] != KindPod {
			continue
		}
		s.mu.Lock()
		p := s.pods[in.Labels[LabelPod]]
		s.mu.Unlock()
		if p == nil || p.instanceID != in.ID {
			p = &podState{id: in.Labels[LabelPod], instanceID: in.ID, gpus: in.GPUs}
		}
		out = append(out, s.podStateFrom(p, in))
	}
	return out, nil
}

// PodLogs implements PodRuntime.
func (s *Supervisor) PodLogs(ctx context.Context, id string, follow bool, tail int) (io.ReadCloser, error) {
	p, err := s.findPod(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.b.Logs(ctx, p.instanceID, follow, tail)
}

func (s *Supervisor) podStateOf(ctx context.Context, p *podState) (PodState, error) {
	info, err := s.b.Inspect(ctx, p.instanceID)
	if IsNotFound(err) {
		return PodState{ID: p.id, DesiredStatus: PodTerminated, PortMappings: map[string]int{}, PublicIP: s.cfg.PublicIP},
			fmt.Errorf("pod %s: %w", p.id, ErrUnknownPod)
	}
	if err != nil {
		return PodState{}, err
	}
	return s.podStateFrom(p, info), nil
}

func (s *Supervisor) podStateFrom(p *podState, info Instance) PodState {
	st := PodState{
		ID: p.id, ContainerID: info.ID, State: info.State, ExitCode: info.ExitCode, OOMKilled: info.OOMKilled,
		Error: info.Error, Image: info.Image, PortMappings: map[string]int{}, PublicIP: s.cfg.PublicIP,
		GPUs: info.GPUs, GPUCount: len(info.GPUs), StartedAt: info.StartedAt, FinishedAt: info.FinishedAt,
		VolumeDir: info.VolumeDir,
	}
	s.mu.Lock()
	st.Warnings = slices.Clone(p.warnings)
	st.Warning = strings.Join(p.warnings, "; ")
	s.mu.Unlock()
	st.GPUTypeID = s.gpuTypeOf(st.GPUs)
	st.Version, _ = strconv.Atoi(info.Labels[LabelVersion])
	st.DesiredStatus = PodExited
	if info.Alive() {
		st.DesiredStatus = PodRunning
	}
	if info.PublicIP != "" {
		st.PublicIP = info.PublicIP
	}
	for port, host := range info.PublicPorts {
		num, _, _ := strings.Cut(port, "/")
		st.PortMappings[num] = host
	}
	return st
}
