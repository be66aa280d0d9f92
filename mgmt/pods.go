package mgmt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"berth/queue"
	"berth/store"
)

// Pods: records, validation and desiredStatus transitions. The containers
// come from a PodRuntime (Config.Pods).
//
// The record is what the operator asked for. desiredStatus changes only
// when the runtime carried the action out; when it cannot (no runtime, no
// free GPU, a failed pull) the call returns an error and the record's
// statusMessage and lastStatusChange say why. An update that needs a new
// container is stored and then applied with a reset.

// PodRuntime runs pod containers; the runtime package implements it (see
// app/runtime.go). Calls get a context without cancellation: the runtime bounds
// its own calls.
type PodRuntime interface {
	// StartPod starts the pod's container, creating it when missing or
	// when it was made for another pod.Version. It returns once the
	// container runs.
	StartPod(ctx context.Context, pod store.Pod) (PodState, error)
	// StopPod stops the container and keeps it (its container disk stays
	// until a reset); GPUs are released. Stopping a stopped pod is no error.
	StopPod(ctx context.Context, podID string) error
	// ResetPod replaces the container with a new one made from pod (the
	// container disk is wiped, the pod volume kept) and starts it.
	ResetPod(ctx context.Context, pod store.Pod) (PodState, error)
	// RemovePod removes the container and the pod volume. Removing a pod
	// without a container is no error.
	RemovePod(ctx context.Context, podID string) error
}

// PodProgress is implemented by a PodRuntime that can say what a pod's
// container is doing before it runs: an image pull while the pod is
// created or reset. A non-empty answer is the pod's statusMessage while it
// lasts, so every view of the pod shows the pull.
type PodProgress interface {
	PodProgress(podID string) string
}

// withProgress shows the runtime's progress for p in its statusMessage.
func (s *Service) withProgress(p *store.Pod) {
	if pp, ok := s.cfg.Pods.(PodProgress); ok {
		if msg := pp.PodProgress(p.ID); msg != "" {
			p.StatusMessage = msg
		}
	}
}

// PodState is what the runtime observed when a pod's container started.
type PodState struct {
	GPU          *store.PodGPU  // nil for CPU pods
	MemoryInGb   float64        // memory the pod can use: its limit, or the host's memory
	PortMappings map[string]int // container port → host port
	PublicIP     string         // address the mapped ports are reachable on
	MachineID    string         // host name; "" keeps the record's
	StartedAt    time.Time      // zero: now
	// Warnings are the host's conditions of this container (no GPU on this
	// host for a GPU pod…): they replace the pod's HostWarnings.
	Warnings []string
}

// PodChecker is implemented by a PodRuntime that can say whether a pod's
// container runs now; PodExited asks it before recording an exit, so a
// late report of an old container's end does not mark a running pod.
type PodChecker interface {
	PodRunning(ctx context.Context, podID string) (bool, error)
}

// PodExit is how a pod's container ended on its own (the runtime's report).
type PodExit struct {
	ExitCode  int
	OOMKilled bool
	Reason    string // "exit code 1", "OOM killed (exit code 137)", "container removed"
	At        time.Time
}

// Errors a PodRuntime wraps to choose the Kind of the answer; any other
// runtime error is Unavailable.
var (
	ErrNoRuntime   = errors.New("no container runtime: Docker is not reachable")
	ErrPodCapacity = errors.New("not enough free GPUs for the pod")      // Conflict
	ErrPodInvalid  = errors.New("the pod's container cannot be created") // Invalid, e.g. no such image
)

// runtimeError is a failed runtime action as an *Error.
func runtimeError(action, pod string, err error) error {
	k := Unavailable
	switch {
	case errors.Is(err, ErrPodCapacity):
		k = Conflict
	case errors.Is(err, ErrPodInvalid):
		k = Invalid
	}
	return &Error{Kind: k, Msg: fmt.Sprintf("%s pod %s: %v", action, pod, err), Err: err}
}

// PodActions are the actions DoPodAction takes.
var PodActions = []string{"start", "stop", "reset", "restart"}

// PodFields are the fields of an update, also part of PodInput.
type PodFields struct {
	Name                    *string
	ImageName               *string
	DockerEntrypoint        []string
	DockerStartCmd          []string
	Env                     map[string]string
	Ports                   []string // nil: not given
	ContainerDiskInGb       *int
	VolumeInGb              *int
	VolumeMountPath         *string
	ContainerRegistryAuthID *string
	GlobalNetworking        *bool
	Locked                  *bool
	// NetworkVolume, on an update, names the pod's network volume again
	// (v2's mounts.network): a pod's mounts are fixed when it is created
	// (checkMountChange), so only its own volume id is accepted.
	NetworkVolume *string
	// TemplateID, on an update, applies a template's container settings
	// as if they were given (v2.json UpdatePodRequest): the fields given
	// here win, env is the template's merged with Env (Env wins), the
	// mounts are not applied.
	TemplateID *string
}

// PodInput creates a pod. GPUTypeIDs takes type ids, pool ids and "-"
// exclusions; DataCenterIDs any well-formed data-centre id.
type PodInput struct {
	PodFields
	TemplateID           *string
	VolumeEncrypted      *bool
	NetworkVolumeID      *string
	ComputeType          *string
	CloudType            *string
	DataCenterIDs        []string
	DataCenterPriority   *string
	CountryCodes         []string
	AllowedCudaVersions  []string
	GPUTypeIDs           []string
	GPUTypePriority      *string
	GPUCount             *int
	MinRAMPerGPU         *int
	MinVCPUPerGPU        *int
	CPUFlavorIDs         []string
	CPUFlavorPriority    *string
	VCPUCount            *int
	MinDownloadMbps      *float64
	MinUploadMbps        *float64
	MinDiskBandwidthMBps *float64
	SupportPublicIP      *bool
	Interruptible        *bool
	// StartSSH and StartJupyter (REST v2) inject PUBLIC_KEY and
	// JUPYTER_PASSWORD; nil takes the template's flags.
	StartSSH     *bool
	StartJupyter *bool
}

var (
	cudaRe = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}$`)
	// CPUFlavors are the cpuFlavorIds accepted.
	CPUFlavors = []string{"cpu3c", "cpu3g", "cpu3m", "cpu5c", "cpu5g", "cpu5m"}
	priorities = []string{"availability", "custom"}
)

// ApplyPodFields validates f and applies it to p.
func ApplyPodFields(p *store.Pod, f PodFields) error {
	if f.VolumeInGb != nil && *f.VolumeInGb != 0 && p.ComputeType == "CPU" {
		return invalid("volumeInGb", "volumeInGb: a CPU pod has no pod volume (container disk and network volumes only)")
	}
	if err := applyContainer(containerInput{f.Name, f.ImageName, f.DockerEntrypoint, f.DockerStartCmd, f.Env, f.Ports,
		f.ContainerDiskInGb, f.VolumeInGb, f.VolumeMountPath, f.ContainerRegistryAuthID}, podContainer(p)); err != nil {
		return err
	}
	if f.GlobalNetworking != nil {
		p.GlobalNetworking = *f.GlobalNetworking
	}
	if f.Locked != nil {
		p.Locked = *f.Locked
	}
	return nil
}

var countryRe = regexp.MustCompile(`^[A-Z]{2}$`)

// ApplyPodCreate validates the creation-only fields and applies them, then
// the PodFields.
func ApplyPodCreate(p *store.Pod, in PodInput) error {
	if err := oneOf("computeType", in.ComputeType, []string{"GPU", "CPU"}, &p.ComputeType); err != nil {
		return err
	}
	if err := oneOf("cloudType", in.CloudType, []string{"SECURE", "COMMUNITY"}, &p.CloudType); err != nil {
		return err
	}
	for _, pr := range []struct {
		name string
		v    *string
		dst  *string
	}{{"dataCenterPriority", in.DataCenterPriority, &p.DataCenterPriority}, {"gpuTypePriority", in.GPUTypePriority, &p.GPUTypePriority}, {"cpuFlavorPriority", in.CPUFlavorPriority, &p.CPUFlavorPriority}} {
		if err := oneOf(pr.name, pr.v, priorities, pr.dst); err != nil {
			return err
		}
	}
	if in.VolumeEncrypted != nil && *in.VolumeEncrypted {
		return newErr(Unsupported, "volumeEncrypted", "volumeEncrypted: Berth does not encrypt pod volumes")
	}
	var warn []string
	if in.DataCenterIDs != nil {
		if err := checkDataCenters("dataCenterIds", in.DataCenterIDs, &warn); err != nil {
			return err
		}
		p.DataCenterIDs = in.DataCenterIDs
	}
	if in.CountryCodes != nil {
		if err := LimitCountryCodes.CheckCount("countryCodes", len(in.CountryCodes)); err != nil {
			return err
		}
		for _, c := range in.CountryCodes {
			if !countryRe.MatchString(c) {
				return invalid("countryCodes", "countryCodes: %s is not an ISO 3166-1 alpha-2 code such as \"FR\"", quote(ShortID(c)))
			}
		}
		p.CountryCodes = in.CountryCodes
	}
	if in.AllowedCudaVersions != nil {
		if err := checkCudaVersions(in.AllowedCudaVersions); err != nil {
			return err
		}
		p.AllowedCudaVersions = in.AllowedCudaVersions
	}
	if in.GPUTypeIDs != nil {
		w, err := checkGPUList("gpuTypeIds", in.GPUTypeIDs, false)
		if err != nil {
			return err
		}
		warn = append(warn, w...)
		p.GPUTypeIDs = in.GPUTypeIDs
	}
	if in.GPUCount != nil {
		if err := LimitGPUCount.Check(int64(*in.GPUCount)); err != nil {
			return err
		}
		p.GPUCount = *in.GPUCount
	}
	if in.VCPUCount != nil {
		check := LimitVCPUsBeside.Check
		if p.ComputeType == "CPU" {
			check = func(n int64) error { return checkVCPUs("vcpuCount", int(n)) }
		}
		if err := check(int64(*in.VCPUCount)); err != nil {
			return err
		}
		p.VCPUCount = *in.VCPUCount
	}
	for _, m := range []struct {
		v   *int
		l   Limit
		dst *int
	}{{in.MinRAMPerGPU, LimitMinRAMPerGPU, &p.MinRAMPerGPU}, {in.MinVCPUPerGPU, LimitMinVCPUPerGPU, &p.MinVCPUPerGPU}} {
		if m.v != nil {
			if err := m.l.Check(int64(*m.v)); err != nil {
				return err
			}
			*m.dst = *m.v
		}
	}
	if in.CPUFlavorIDs != nil {
		if err := checkCPUFlavors("cpuFlavorIds", in.CPUFlavorIDs); err != nil {
			return err
		}
		p.CPUFlavorIDs = in.CPUFlavorIDs
	}
	for _, m := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"minDownloadMbps", in.MinDownloadMbps, &p.MinDownloadMbps}, {"minUploadMbps", in.MinUploadMbps, &p.MinUploadMbps}, {"minDiskBandwidthMBps", in.MinDiskBandwidthMBps, &p.MinDiskBandwidthMBps}} {
		if m.v != nil {
			if err := LimitBandwidth.CheckFloat(m.name, *m.v); err != nil {
				return err
			}
			*m.dst = *m.v
		}
	}
	if in.SupportPublicIP != nil {
		p.SupportPublicIP = *in.SupportPublicIP
	}
	if in.Interruptible != nil {
		p.Interruptible = *in.Interruptible
	}
	if in.NetworkVolumeID != nil {
		if *in.NetworkVolumeID != "" {
			if err := checkID("networkVolumeId", *in.NetworkVolumeID); err != nil {
				return err
			}
		}
		p.NetworkVolumeID = *in.NetworkVolumeID
	}
	if p.ComputeType == "CPU" {
		// RunPod ignores GPU fields on CPU pods; the record says so. A CPU
		// pod has no pod volume: its template's is not inherited.
		p.GPUCount, p.GPUTypeIDs, p.VolumeInGb = 0, []string{}, 0
		warn = slices.DeleteFunc(warn, func(w string) bool { return strings.HasPrefix(w, "gpuTypeIds:") })
	}
	p.Warnings = warn
	return ApplyPodFields(p, in.PodFields)
}

// NewPodDefaults is a pod before its input is applied (RunPod's defaults).
func NewPodDefaults() store.Pod {
	host, _ := os.Hostname()
	return store.Pod{
		Name: "my pod", DesiredStatus: store.PodRunning, Version: 1,
		DockerEntrypoint: []string{}, DockerStartCmd: []string{}, Env: map[string]string{},
		Ports: []string{"8888/http", "22/tcp"}, ContainerDiskInGb: 50, VolumeInGb: 20, VolumeMountPath: "/workspace",
		ComputeType: "GPU", CloudType: "SECURE", GPUTypeIDs: []string{}, GPUTypePriority: "availability", GPUCount: 1,
		MinRAMPerGPU: 8, MinVCPUPerGPU: 2, CPUFlavorPriority: "availability", VCPUCount: 2,
		DataCenterIDs: []string{DataCenterID}, DataCenterPriority: "availability", MachineID: host,
	}
}

// fromTemplate fills a new pod from its template; the request's own
// fields are applied after (env is merged, the request's names winning).
func fromTemplate(p *store.Pod, t store.Template) {
	p.TemplateID = t.ID
	p.ImageName = t.ImageName
	p.DockerEntrypoint = slices.Clone(t.DockerEntrypoint)
	p.DockerStartCmd = slices.Clone(t.DockerStartCmd)
	p.Env = maps.Clone(t.Env)
	if p.Env == nil {
		p.Env = map[string]string{}
	}
	p.Ports = slices.Clone(t.Ports)
	p.ContainerDiskInGb, p.VolumeInGb, p.VolumeMountPath = t.ContainerDiskInGb, t.VolumeInGb, t.VolumeMountPath
	p.ContainerRegistryAuthID = t.ContainerRegistryAuthID
}

// podTemplate reads the template a pod is made from: it must exist
// (Missing) and not be a serverless template (WrongKind; v2.json).
func podTemplate(tx *store.Tx, id string, t *store.Template) error {
	if err := checkID("templateId", id); err != nil {
		return err
	}
	if tx.GetRaw(store.Templates, id) == nil {
		return missing("templateId", id)
	}
	if err := tx.Get(store.Templates, id, t); err != nil {
		return err
	}
	if t.IsServerless {
		e := newErr(Invalid, "templateId", "templateId %s is a serverless template, for endpoints; a pod needs a pod template", id)
		e.Reason = WrongKind
		return e
	}
	return nil
}

// withTemplate fills the fields f does not give from template t (an
// update's templateId): its container settings, env merged under f's.
func withTemplate(f PodFields, t store.Template) PodFields {
	if f.ImageName == nil {
		f.ImageName = &t.ImageName
	}
	if f.DockerEntrypoint == nil {
		f.DockerEntrypoint = slices.Clone(t.DockerEntrypoint)
	}
	if f.DockerStartCmd == nil {
		f.DockerStartCmd = slices.Clone(t.DockerStartCmd)
	}
	if f.ContainerDiskInGb == nil {
		f.ContainerDiskInGb = &t.ContainerDiskInGb
	}
	if f.Ports == nil {
		f.Ports = slices.Clone(t.Ports)
	}
	if f.ContainerRegistryAuthID == nil {
		f.ContainerRegistryAuthID = &t.ContainerRegistryAuthID
	}
	env := maps.Clone(t.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, f.Env)
	f.Env = env
	return f
}

// checkPodRefs checks what a pod names exists.
func checkPodRefs(tx *store.Tx, p *store.Pod) error {
	if p.ContainerRegistryAuthID != "" && tx.GetRaw(store.RegistryAuths, p.ContainerRegistryAuthID) == nil {
		return missing("containerRegistryAuthId", p.ContainerRegistryAuthID)
	}
	if p.NetworkVolumeID != "" && tx.GetRaw(store.Volumes, p.NetworkVolumeID) == nil {
		return missing("networkVolumeId", p.NetworkVolumeID)
	}
	return nil
}

// podRolls reports whether a change needs a new container.
func podRolls(a, b store.Pod) bool {
	return a.ImageName != b.ImageName || !maps.Equal(a.Env, b.Env) ||
		!slices.Equal(a.DockerEntrypoint, b.DockerEntrypoint) || !slices.Equal(a.DockerStartCmd, b.DockerStartCmd) ||
		!slices.Equal(a.Ports, b.Ports) || a.ContainerDiskInGb != b.ContainerDiskInGb || a.VolumeInGb != b.VolumeInGb ||
		a.VolumeMountPath != b.VolumeMountPath || a.ContainerRegistryAuthID != b.ContainerRegistryAuthID ||
		a.GlobalNetworking != b.GlobalNetworking
}

func statusLine(what string, at time.Time) string {
	return what + ": " + at.Format(time.RFC3339)
}

// applyState records what the runtime observed at a start.
func (s *Service) applyState(p *store.Pod, st PodState) {
	p.GPU, p.MemoryInGb, p.PortMappings, p.PublicIP = st.GPU, st.MemoryInGb, st.PortMappings, st.PublicIP
	if st.MachineID != "" {
		p.MachineID = st.MachineID
	}
	p.LastStartedAt = st.StartedAt.UTC()
	if st.StartedAt.IsZero() {
		p.LastStartedAt = s.now()
	}
	p.LastExit = nil
	p.Warnings = slices.DeleteFunc(slices.Clone(p.Warnings), func(w string) bool { return slices.Contains(p.HostWarnings, w) })
	p.HostWarnings = nil
	for _, w := range st.Warnings {
		p.HostWarnings = append(p.HostWarnings, w)
		p.Warnings = append(p.Warnings, w)
		s.cfg.Logger.Warn("pod runs with a warning", "pod", p.ID, "warning", w)
	}
}

// PodDataCenter is the data centre pod p was placed in (see
// store.Pod.DataCenterID): every surface shows this one.
func PodDataCenter(p store.Pod) string {
	if p.DataCenterID != "" {
		return p.DataCenterID
	}
	if len(p.DataCenterIDs) > 0 {
		return p.DataCenterIDs[0]
	}
	return DataCenterID
}

// placePod picks the pod's data centre: its network volume's (RunPod
// places a pod with the volume), else the first it asked for. Every data
// centre is this host; the id is kept so the pod reads the same on every
// surface.
func placePod(tx *store.Tx, p *store.Pod) {
	p.DataCenterID = ""
	if p.NetworkVolumeID != "" {
		var v store.NetworkVolume
		if tx.Get(store.Volumes, p.NetworkVolumeID, &v) == nil && v.DataCenterID != "" {
			p.DataCenterID = v.DataCenterID
			return
		}
	}
	p.DataCenterID = PodDataCenter(*p)
}

// PodExited records that pod id's container ended on its own: a RUNNING
// record becomes EXITED, with the exit in lastExit and lastStatusChange,
// its ports cleared. It waits for any action under way on the pod and
// asks the runtime (PodChecker) whether a container runs now, so an exit
// reported during a start or restart does not mark the new container.
// A pod already stopped, or deleted, is left as it is.
func (s *Service) PodExited(ctx context.Context, id string, e PodExit) error {
	unlock := s.podLocks.lock(id)
	defer unlock()
	if pc, ok := s.cfg.Pods.(PodChecker); ok {
		running, err := pc.PodRunning(noCancel(ctx), id)
		if err != nil {
			return fmt.Errorf("pod %s: check its container: %w", id, err)
		}
		if running {
			return nil
		}
	}
	at := e.At.UTC()
	if at.IsZero() {
		at = s.now()
	}
	reason := e.Reason
	if reason == "" {
		reason = fmt.Sprintf("exit code %d", e.ExitCode)
	}
	err := store.UpdatePod(s.cfg.Store, id, func(p *store.Pod) error {
		if p.DesiredStatus != store.PodRunning {
			return errUnchanged
		}
		p.DesiredStatus = store.PodExited
		p.PortMappings, p.PublicIP = nil, ""
		p.LastExit = &store.PodExit{ExitCode: e.ExitCode, Reason: reason, OOMKilled: e.OOMKilled, At: at}
		p.LastStatusChange = statusLine("Exited: "+reason, at)
		p.StatusMessage = "the container exited on its own (" + reason + "); start the pod to run it again"
		return nil
	})
	switch {
	case errors.Is(err, errUnchanged), errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	s.cfg.Logger.Warn("pod exited", "pod", id, "reason", reason)
	return nil
}

var errUnchanged = errors.New("unchanged")

// PodRuns records what a pod runs as — its address, its published ports,
// its start — when the runtime learns it only once the container runs (a
// Kubernetes Pod is scheduled and its Service's ports assigned after the
// start call returned). A pod no longer meant to run is left as it is.
func (s *Service) PodRuns(ctx context.Context, id string, st PodState) error {
	unlock := s.podLocks.lock(id)
	defer unlock()
	err := store.UpdatePod(s.cfg.Store, id, func(p *store.Pod) error {
		if p.DesiredStatus != store.PodRunning {
			return errUnchanged
		}
		p.PortMappings, p.PublicIP = st.PortMappings, st.PublicIP
		if !st.StartedAt.IsZero() {
			p.LastStartedAt = st.StartedAt.UTC()
		}
		return nil
	})
	if errors.Is(err, errUnchanged) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// CreatePod validates in, stores the pod and starts its container. When it
// cannot start, nothing is left behind and the error says why.
func (s *Service) CreatePod(ctx context.Context, in PodInput) (store.Pod, error) {
	if err := live(ctx); err != nil {
		return store.Pod{}, err
	}
	p := NewPodDefaults()
	p.ID = queue.NewID(14)
	p.CreatedAt = s.now()
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var t store.Template
		if in.TemplateID != nil && *in.TemplateID != "" {
			if err := podTemplate(tx, *in.TemplateID, &t); err != nil {
				return err
			}
			fromTemplate(&p, t)
			if in.AllowedCudaVersions == nil && len(t.AllowedCudaVersions) > 0 {
				in.AllowedCudaVersions = t.AllowedCudaVersions
			}
			if in.Env != nil {
				merged := maps.Clone(p.Env)
				maps.Copy(merged, in.Env)
				in.Env = merged
			}
		}
		if err := ApplyPodCreate(&p, in); err != nil {
			return err
		}
		if p.ImageName == "" {
			return invalid("imageName", "imageName is required (or a templateId whose image to run)")
		}
		ssh, jupyter := t.StartSSH, t.StartJupyter
		if in.StartSSH != nil {
			ssh = *in.StartSSH
		}
		if in.StartJupyter != nil {
			jupyter = *in.StartJupyter
		}
		if err := injectAccess(tx, &p, ssh, jupyter); err != nil {
			return err
		}
		if err := checkPodRefs(tx, &p); err != nil {
			return err
		}
		if p.NetworkVolumeID != "" {
			// RunPod mounts the network volume at volumeMountPath in place
			// of the pod volume: there is none.
			if in.VolumeInGb != nil && *in.VolumeInGb > 0 {
				p.Warnings = append(p.Warnings, fmt.Sprintf("volumeInGb: ignored: network volume %s is mounted at %s in place of the pod volume", p.NetworkVolumeID, p.VolumeMountPath))
			}
			p.VolumeInGb = 0
		}
		placePod(tx, &p)
		return nil
	})
	if err != nil {
		return store.Pod{}, err
	}
	if s.cfg.Pods == nil {
		return store.Pod{}, runtimeError("create", p.ID, fmt.Errorf("%w; the pod was not created", ErrNoRuntime))
	}
	unlock := s.podLocks.lock(p.ID)
	defer unlock()
	// Stored first so the runtime (and a restart) can see it; removed
	// again when it cannot start, so a failed create leaves nothing.
	p.LastStatusChange = statusLine("Created by user", p.CreatedAt)
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := checkPodRefs(tx, &p); err != nil {
			return err
		}
		return tx.Apply(store.Put(store.Pods, p.ID, p))
	})
	if err != nil {
		return store.Pod{}, err
	}
	ctx = noCancel(ctx)
	st, err := s.cfg.Pods.StartPod(ctx, p)
	if err != nil {
		if rerr := s.cfg.Pods.RemovePod(ctx, p.ID); rerr != nil {
			s.cfg.Logger.Error("remove pod that failed to start", "pod", p.ID, "err", rerr)
		}
		if derr := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Apply(store.Delete(store.Pods, p.ID)) }); derr != nil {
			s.cfg.Logger.Error("drop pod that failed to start", "pod", p.ID, "err", derr)
		}
		return store.Pod{}, runtimeError("create", p.ID, fmt.Errorf("%w; the pod was not created", err))
	}
	err = store.UpdatePod(s.cfg.Store, p.ID, func(rec *store.Pod) error {
		s.applyState(rec, st)
		rec.DesiredStatus = store.PodRunning
		p = *rec
		return nil
	})
	return p, err
}

// savePod re-reads the pod and applies fn, so concurrent runtime updates
// of other fields are kept.
func (s *Service) savePod(id string, fn func(*store.Pod)) (store.Pod, error) {
	var out store.Pod
	err := store.UpdatePod(s.cfg.Store, id, func(p *store.Pod) error {
		fn(p)
		out = *p
		return nil
	})
	return out, err
}

// podFailed records why an action did not take effect and returns its
// error.
func (s *Service) podFailed(id, action string, err error) error {
	err = runtimeError(action, id, err)
	at := s.now()
	if _, serr := s.savePod(id, func(p *store.Pod) {
		p.StatusMessage = err.Error()
		p.LastStatusChange = statusLine(strings.ToUpper(action[:1])+action[1:]+" failed", at)
	}); serr != nil {
		s.cfg.Logger.Error("record pod failure", "pod", id, "err", serr)
	}
	return err
}

// GetPod returns one pod record.
func (s *Service) GetPod(ctx context.Context, id string) (store.Pod, error) {
	if err := live(ctx); err != nil {
		return store.Pod{}, err
	}
	var p store.Pod
	err := s.cfg.Store.View(func(tx *store.Tx) error { return getOr404(tx, store.Pods, id, "pod", &p) })
	if err == nil {
		s.withProgress(&p)
	}
	return p, err
}

// DoPodAction starts, stops, resets or restarts a pod (PodActions).
func (s *Service) DoPodAction(ctx context.Context, id, action string) (store.Pod, error) {
	if err := live(ctx); err != nil {
		return store.Pod{}, err
	}
	if !slices.Contains(PodActions, action) {
		return store.Pod{}, invalid("action", "action must be one of %s, got %q", strings.Join(PodActions, ", "), action)
	}
	unlock := s.podLocks.lock(id)
	defer unlock()
	p, err := s.GetPod(ctx, id)
	if err != nil {
		return store.Pod{}, err
	}
	if p.Locked && action != "start" {
		return store.Pod{}, conflict("pod %s is locked: unlock it (PATCH {\"locked\": false}) to %s it", id, action)
	}
	rt := s.cfg.Pods
	if rt == nil {
		return store.Pod{}, s.podFailed(id, action, ErrNoRuntime)
	}
	ctx = noCancel(ctx)
	var st PodState
	switch action {
	case "start":
		st, err = rt.StartPod(ctx, p)
	case "stop":
		err = rt.StopPod(ctx, id)
	case "reset":
		st, err = rt.ResetPod(ctx, p)
	case "restart":
		if err = rt.StopPod(ctx, id); err == nil {
			if st, err = rt.StartPod(ctx, p); err != nil {
				// The container is stopped now; the record says so.
				if _, serr := s.savePod(id, func(p *store.Pod) { p.DesiredStatus = store.PodExited; p.PortMappings, p.PublicIP = nil, "" }); serr != nil {
					s.cfg.Logger.Error("record stopped pod", "pod", id, "err", serr)
				}
			}
		}
	}
	if err != nil {
		return store.Pod{}, s.podFailed(id, action, err)
	}
	at := s.now()
	return s.savePod(id, func(p *store.Pod) {
		p.StatusMessage = ""
		if action == "stop" {
			p.DesiredStatus = store.PodExited
			p.PortMappings, p.PublicIP = nil, ""
			p.LastStatusChange = statusLine("Stopped by user", at)
			return
		}
		s.applyState(p, st)
		p.DesiredStatus = store.PodRunning
		p.LastStatusChange = statusLine(map[string]string{"start": "Started", "reset": "Reset", "restart": "Restarted"}[action]+" by user", at)
	})
}

// UpdatePod applies f. A change to what the container runs bumps the pod's
// version and, on a running pod, resets it; when the reset fails the change
// stays stored and the error says so.
func (s *Service) UpdatePod(ctx context.Context, id string, f PodFields) (store.Pod, error) {
	if err := live(ctx); err != nil {
		return store.Pod{}, err
	}
	unlock := s.podLocks.lock(id)
	defer unlock()
	var p store.Pod
	var reset bool
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Pods, id, "pod", &p); err != nil {
			return err
		}
		before := p
		if err := checkMountChange(p, f); err != nil {
			return err
		}
		if f.TemplateID != nil && *f.TemplateID != "" {
			var t store.Template
			if err := podTemplate(tx, *f.TemplateID, &t); err != nil {
				return err
			}
			f = withTemplate(f, t)
			p.TemplateID = t.ID
		}
		if err := ApplyPodFields(&p, f); err != nil {
			return err
		}
		if err := checkPodRefs(tx, &p); err != nil {
			return err
		}
		if podRolls(before, p) {
			p.Version++
			reset = p.DesiredStatus == store.PodRunning
			if reset && before.Locked && p.Locked {
				return conflict("pod %s is locked: this change needs a reset; unlock it first (\"locked\": false)", id)
			}
		}
		return tx.Apply(store.Put(store.Pods, id, p))
	})
	if err != nil || !reset {
		return p, err
	}
	if s.cfg.Pods == nil {
		return store.Pod{}, s.podFailed(id, "reset", fmt.Errorf("%w; the change is stored and applies when the pod is next reset or started", ErrNoRuntime))
	}
	st, err := s.cfg.Pods.ResetPod(noCancel(ctx), p)
	if err != nil {
		return store.Pod{}, s.podFailed(id, "reset", fmt.Errorf("%w; the change is stored and applies when the pod is next reset or started", err))
	}
	at := s.now()
	return s.savePod(id, func(p *store.Pod) {
		s.applyState(p, st)
		p.StatusMessage = ""
		p.LastStatusChange = statusLine("Reset by update", at)
	})
}

// checkMountChange applies the rule that a pod's mount kind — a pod
// volume, a network volume or none — is fixed when it is created (v2.json
// Mounts; the same on every surface): an update may resize the pod volume
// or move the mount path, and naming the current mount again is no change,
// but it cannot add a mount, swap the network volume, or remove either.
func checkMountChange(p store.Pod, f PodFields) error {
	const fixed = "a pod's mount kind is fixed when it is created"
	if v := f.NetworkVolume; v != nil {
		switch {
		case *v == "":
			return invalid("networkVolumeId", "networkVolumeId: removing a pod's network volume is not supported; omit it to keep the mount")
		case p.NetworkVolumeID == "":
			return invalid("networkVolumeId", "networkVolumeId: pod %s was created without a network volume, and %s", p.ID, fixed)
		case *v != p.NetworkVolumeID:
			return invalid("networkVolumeId", "networkVolumeId: the network volume of pod %s cannot be changed (it mounts %s)", p.ID, p.NetworkVolumeID)
		}
	}
	if f.VolumeInGb == nil || *f.VolumeInGb == p.VolumeInGb {
		return nil
	}
	switch {
	case p.NetworkVolumeID != "":
		return invalid("volumeInGb", "volumeInGb: pod %s mounts network volume %s in place of a pod volume, and %s", p.ID, p.NetworkVolumeID, fixed)
	case p.VolumeInGb == 0:
		return invalid("volumeInGb", "volumeInGb: pod %s was created without a pod volume, and %s", p.ID, fixed)
	case *f.VolumeInGb == 0:
		return invalid("volumeInGb", "volumeInGb: removing a pod's volume is not supported; omit it to keep the volume")
	}
	return nil
}

// DeletePod terminates a pod: its container and pod volume are removed and
// the record with them. Without a runtime the record is removed and the
// runtime's reconcile removes the container as an orphan.
func (s *Service) DeletePod(ctx context.Context, id string) error {
	if err := live(ctx); err != nil {
		return err
	}
	unlock := s.podLocks.lock(id)
	defer unlock()
	p, err := s.GetPod(ctx, id)
	if err != nil {
		return err
	}
	if p.Locked {
		return conflict("pod %s is locked: unlock it (PATCH {\"locked\": false}) to delete it", id)
	}
	if s.cfg.Pods != nil {
		if err := s.cfg.Pods.RemovePod(noCancel(ctx), id); err != nil {
			return s.podFailed(id, "delete", err)
		}
	}
	return s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Apply(store.Delete(store.Pods, id)) })
}
