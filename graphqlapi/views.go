package graphqlapi

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// Views: the records of berth/store in RunPod's GraphQL shapes. Struct
// fields resolve by name (UseFieldResolvers); methods resolve what needs
// a lookup.

type envVar struct{ Key, Value string }

// envList shows an env map as RunPod's [{key, value}], sorted by key.
func envList(m map[string]string) []envVar {
	out := make([]envVar, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, envVar{k, m[k]})
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// emptyNil is nil for "", else a pointer to s.
func emptyNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func i32(n int) int32 {
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	if n < math.MinInt32 {
		return math.MinInt32
	}
	return int32(n)
}

// dockerArgs shows a command the way RunPod's dockerArgs holds it: one
// string of words (quoted when they hold blanks), or the JSON form
// {"cmd": [...], "entrypoint": [...]} when an entrypoint is set.
func dockerArgs(entrypoint, cmd []string) string {
	// A word holding both quote characters cannot be quoted for SplitArgs:
	// the JSON form keeps it exact.
	odd := slices.ContainsFunc(cmd, func(w string) bool { return strings.Contains(w, `"`) && strings.Contains(w, "'") })
	if len(entrypoint) > 0 || odd {
		b, _ := json.Marshal(struct {
			Cmd        []string `json:"cmd"`
			Entrypoint []string `json:"entrypoint"`
		}{append([]string{}, cmd...), append([]string{}, entrypoint...)})
		return string(b)
	}
	words := make([]string, len(cmd))
	for i, w := range cmd {
		if w == "" || strings.ContainsAny(w, " \t\n'\"") {
			if strings.Contains(w, `"`) {
				w = "'" + w + "'"
			} else {
				w = `"` + w + `"`
			}
		}
		words[i] = w
	}
	return strings.Join(words, " ")
}

// parseDockerArgs reads dockerArgs: the JSON form sets the entrypoint and
// the command; any other string is the command, split into words.
func parseDockerArgs(s string) (entrypoint, cmd []string, err error) {
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") {
		var v struct {
			Cmd        []string `json:"cmd"`
			Entrypoint []string `json:"entrypoint"`
		}
		if err := json.Unmarshal([]byte(t), &v); err != nil {
			return nil, nil, invalid("dockerArgs", "dockerArgs: not the {\"cmd\": [...], \"entrypoint\": [...]} form: %v", err)
		}
		if v.Cmd == nil {
			v.Cmd = []string{}
		}
		if v.Entrypoint == nil {
			v.Entrypoint = []string{}
		}
		return v.Entrypoint, v.Cmd, nil
	}
	cmd, err = mgmt.SplitArgs(s)
	if err != nil {
		return nil, nil, wrap(err)
	}
	return nil, cmd, nil
}

// ---- templates ----

type templateView struct {
	store.Template
}

func (t templateView) ID() string               { return t.Template.ID }
func (t templateView) Name() string             { return t.Template.Name }
func (t templateView) ImageName() string        { return t.Template.ImageName }
func (t templateView) DockerArgs() string       { return dockerArgs(t.DockerEntrypoint, t.DockerStartCmd) }
func (t templateView) ContainerDiskInGb() int32 { return i32(t.Template.ContainerDiskInGb) }
func (t templateView) VolumeInGb() int32        { return i32(t.Template.VolumeInGb) }
func (t templateView) VolumeMountPath() *string { return emptyNil(t.Template.VolumeMountPath) }
func (t templateView) Ports() string            { return strings.Join(t.Template.Ports, ",") }
func (t templateView) Env() []envVar            { return envList(t.Template.Env) }
func (t templateView) IsServerless() bool       { return t.Template.IsServerless }
func (t templateView) IsPublic() bool           { return t.Template.IsPublic }
func (t templateView) IsRunpod() bool           { return t.Template.IsRunpod }
func (t templateView) Category() *string        { return emptyNil(t.Template.Category) }
func (t templateView) Readme() string           { return t.Template.Readme }
func (t templateView) StartSsh() bool           { return t.Template.StartSSH }
func (t templateView) StartJupyter() bool       { return t.Template.StartJupyter }
func (t templateView) StartScript() *string     { return nil }
func (t templateView) AdvancedStart() bool      { return false }
func (t templateView) Earned() float64          { return t.Template.Earned }
func (t templateView) RuntimeInMin() int32      { return i32(t.Template.RuntimeInMin) }
func (t templateView) ContainerRegistryAuthId() *string {
	return emptyNil(t.Template.ContainerRegistryAuthID)
}

type portConfig struct{ Port, Name string }

// PortsConfig lists the template's port labels in port order.
func (t templateView) PortsConfig() []portConfig {
	out := []portConfig{}
	for _, p := range t.Template.Ports {
		num, _, _ := strings.Cut(p, "/")
		if name, ok := t.PortLabels[num]; ok {
			out = append(out, portConfig{num, name})
		}
	}
	return out
}

func templateViews(ts []store.Template) []templateView {
	out := make([]templateView, 0, len(ts))
	for _, t := range ts {
		out = append(out, templateView{t})
	}
	return out
}

// ---- endpoints ----

// endpointView shows an endpoint with the templates and volumes read in
// the same transaction (mgmt.Snapshot), so its fields resolve without
// further reads.
type endpointView struct {
	e       store.Endpoint
	refs    *mgmt.Snapshot
	workers func(endpointID string) []mgmt.Worker
	models  func(e store.Endpoint) []mgmt.ModelStatus
}

type workerPod struct{ w mgmt.Worker }

func (p workerPod) ID() string            { return p.w.ID }
func (p workerPod) Name() string          { return p.w.Name }
func (p workerPod) DesiredStatus() string { return p.w.DesiredStatus }
func (p workerPod) State() string         { return p.w.State }
func (p workerPod) ImageName() *string    { return emptyNil(p.w.ImageName) }
func (p workerPod) GpuCount() int32       { return i32(p.w.GPUCount) }
func (p workerPod) VcpuCount() int32      { return i32(p.w.VCPUCount) }
func (p workerPod) Version() int32        { return i32(p.w.Version) }
func (p workerPod) LastStartedAt() *string {
	if p.w.LastStartedAt.IsZero() {
		return nil
	}
	return ptr(p.w.LastStartedAt.UTC().Format(time.RFC3339))
}

// Pods are the endpoint's workers (RunPod calls them pods).
func (v endpointView) Pods() []workerPod {
	out := []workerPod{}
	for _, w := range v.workers(v.e.ID) {
		out = append(out, workerPod{w})
	}
	return out
}

func (v endpointView) Workers() []workerPod { return v.Pods() }

// Models: the model references' downloads (Berth's).
func (v endpointView) Models() []modelStatusView {
	out := []modelStatusView{}
	for _, m := range v.models(v.e) {
		out = append(out, modelStatusView{m})
	}
	return out
}

type modelStatusView struct{ m mgmt.ModelStatus }

func (m modelStatusView) Reference() string  { return m.m.Reference }
func (m modelStatusView) State() string      { return m.m.State }
func (m modelStatusView) Commit() *string    { return emptyNil(m.m.Commit) }
func (m modelStatusView) BytesDone() float64 { return float64(m.m.BytesDone) }
func (m modelStatusView) BytesTotal() float64 {
	return float64(m.m.BytesTotal)
}
func (m modelStatusView) Error() *string  { return emptyNil(m.m.Error) }
func (m modelStatusView) Attempts() int32 { return i32(m.m.Attempts) }
func (m modelStatusView) RetryAt() *string {
	if m.m.RetryAt == nil {
		return nil
	}
	s := m.m.RetryAt.UTC().Format(time.RFC3339)
	return &s
}
func (m modelStatusView) Message() string { return m.m.Message }

type endpointVolume struct{ NetworkVolumeId, DataCenterId string }

func (v endpointView) ID() string          { return v.e.ID }
func (v endpointView) Name() string        { return v.e.Name }
func (v endpointView) UserId() string      { return v.e.UserID }
func (v endpointView) Type() string        { return endpointType(v.e) }
func (v endpointView) TemplateId() string  { return v.e.TemplateID }
func (v endpointView) GpuIds() string      { return strings.Join(v.e.GPUTypeIDs, ",") }
func (v endpointView) GpuCount() int32     { return i32(v.e.GPUCount) }
func (v endpointView) ComputeType() string { return v.e.ComputeType }
func (v endpointView) InstanceIds() []string {
	if v.e.InstanceIDs == nil {
		return []string{}
	}
	return v.e.InstanceIDs
}
func (v endpointView) NetworkVolumeId() *string    { return emptyNil(v.e.NetworkVolumeID) }
func (v endpointView) Locations() string           { return strings.Join(v.e.DataCenterIDs, ",") }
func (v endpointView) IdleTimeout() int32          { return i32(v.e.IdleTimeout) }
func (v endpointView) ScalerType() string          { return v.e.ScalerType }
func (v endpointView) ScalerValue() int32          { return i32(v.e.ScalerValue) }
func (v endpointView) WorkersMin() int32           { return i32(v.e.WorkersMin) }
func (v endpointView) WorkersMax() int32           { return i32(v.e.WorkersMax) }
func (v endpointView) WorkersStandby() *int32      { return nil }
func (v endpointView) AllowedCudaVersions() string { return strings.Join(v.e.AllowedCudaVersions, ",") }
func (v endpointView) MinCudaVersion() *string     { return emptyNil(v.e.MinCudaVersion) }
func (v endpointView) ExecutionTimeoutMs() int32   { return i32(int(v.e.ExecutionTimeoutMs)) }
func (v endpointView) Env() []envVar               { return envList(v.e.Env) }
func (v endpointView) Version() int32              { return i32(v.e.Version) }
func (v endpointView) CreatedAt() string           { return v.e.CreatedAt.UTC().Format(time.RFC3339) }
func (v endpointView) AiKey() *string              { return nil }
func (v endpointView) Warnings() []string          { return renameWarnings(v.e.Warnings, endpointFields) }
func (v endpointView) ModelReferences() []string   { return append([]string{}, v.e.ModelReferences...) }
func (v endpointView) FlashBootType() string {
	if v.e.Flashboot {
		return "FLASHBOOT"
	}
	return "OFF"
}

func (v endpointView) Template() *templateView {
	if t, ok := v.refs.Templates[v.e.TemplateID]; ok {
		return &templateView{t}
	}
	return nil
}

func (v endpointView) NetworkVolume() *volumeView {
	if vol, ok := v.refs.Volumes[v.e.NetworkVolumeID]; ok {
		return ptr(viewVolume(vol))
	}
	return nil
}

func (v endpointView) NetworkVolumeIds() []endpointVolume {
	out := []endpointVolume{}
	for _, id := range v.e.NetworkVolumeIDs {
		out = append(out, endpointVolume{id, v.refs.Volumes[id].DataCenterID})
	}
	return out
}

// ---- network volumes and registry auths ----

type volumeView struct {
	ID, Name, DataCenterId string
	Size                   int32
}

func viewVolume(v store.NetworkVolume) volumeView {
	return volumeView{ID: v.ID, Name: v.Name, DataCenterId: v.DataCenterID, Size: i32(v.Size)}
}

func volumeByID(ctx context.Context, mg *mgmt.Service, id string) (*volumeView, error) {
	if id == "" {
		return nil, nil
	}
	v, err := mg.GetVolume(ctx, id)
	if mgmt.KindOf(err) == mgmt.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err)
	}
	return ptr(viewVolume(v.NetworkVolume)), nil
}

type registryAuthView struct{ ID, Name, Username string }

func viewRegistryAuth(a mgmt.RegistryAuth) *registryAuthView {
	return &registryAuthView{ID: a.ID, Name: a.Name, Username: a.Username}
}

// ---- pods ----

type podView struct {
	p      store.Pod
	mg     *mgmt.Service
	prices mgmt.Prices
	now    time.Time
}

type podMachine struct {
	PodHostId, Location, DataCenterId string
	GpuDisplayName, GpuTypeId         *string
	SecureCloud                       bool
	CpuCount                          int32
}

type podRuntime struct {
	UptimeInSeconds int32
	Ports           []podPort
}

type podPort struct {
	Ip                      string
	IsIpPublic              bool
	PrivatePort, PublicPort int32
	Type                    string
}

func (v podView) ID() string            { return v.p.ID }
func (v podView) Name() string          { return v.p.Name }
func (v podView) ImageName() string     { return v.p.ImageName }
func (v podView) DesiredStatus() string { return v.p.DesiredStatus }
func (v podView) Env() []string {
	out := make([]string, 0, len(v.p.Env))
	for _, k := range slices.Sorted(maps.Keys(v.p.Env)) {
		out = append(out, k+"="+v.p.Env[k])
	}
	return out
}
func (v podView) DockerArgs() string         { return dockerArgs(v.p.DockerEntrypoint, v.p.DockerStartCmd) }
func (v podView) DockerId() *string          { return nil }
func (v podView) ContainerDiskInGb() int32   { return i32(v.p.ContainerDiskInGb) }
func (v podView) VolumeInGb() int32          { return i32(v.p.VolumeInGb) }
func (v podView) VolumeMountPath() *string   { return emptyNil(v.p.VolumeMountPath) }
func (v podView) VcpuCount() int32           { return i32(v.p.VCPUCount) }
func (v podView) MemoryInGb() int32          { return i32(int(math.Round(v.p.MemoryInGb))) }
func (v podView) CostPerHr() float64         { return v.prices.PodHourly(v.p) }
func (v podView) AdjustedCostPerHr() float64 { return v.prices.PodHourly(v.p) }
func (v podView) LastStatusChange() *string  { return emptyNil(v.p.LastStatusChange) }
func (v podView) PodType() string            { return "RESERVED" }
func (v podView) Port() *int32               { return nil }
func (v podView) Ports() string              { return strings.Join(v.p.Ports, ",") }
func (v podView) MachineId() string          { return v.p.MachineID }
func (v podView) TemplateId() *string        { return emptyNil(v.p.TemplateID) }
func (v podView) NetworkVolumeId() *string   { return emptyNil(v.p.NetworkVolumeID) }
func (v podView) Locked() bool               { return v.p.Locked }
func (v podView) Interruptible() bool        { return v.p.Interruptible }
func (v podView) Warnings() []string         { return renameWarnings(v.p.Warnings, podFields) }

// LastExit is how the container last ended on its own (Berth).
func (v podView) LastExit() *podExitView {
	if v.p.LastExit == nil {
		return nil
	}
	e := v.p.LastExit
	return &podExitView{ExitCode: i32(e.ExitCode), Reason: e.Reason, OomKilled: e.OOMKilled, At: e.At.UTC().Format(time.RFC3339)}
}

type podExitView struct {
	ExitCode  int32
	Reason    string
	OomKilled bool
	At        string
}

func (v podView) ContainerRegistryAuthId() *string {
	return emptyNil(v.p.ContainerRegistryAuthID)
}

// GpuCount is the GPUs the pod holds, or asked for when stopped.
func (v podView) GpuCount() int32 {
	if v.p.GPU != nil {
		return i32(v.p.GPU.Count)
	}
	return i32(v.p.GPUCount)
}

func (v podView) running() bool {
	return v.p.DesiredStatus == store.PodRunning && !v.p.LastStartedAt.IsZero()
}

func (v podView) UptimeSeconds() int32 {
	if !v.running() {
		return 0
	}
	return i32(int(v.now.Sub(v.p.LastStartedAt).Seconds()))
}

// Machine is this host.
func (v podView) Machine() podMachine {
	host, _ := os.Hostname()
	m := podMachine{PodHostId: v.p.ID, Location: "local (" + host + ")", DataCenterId: mgmt.PodDataCenter(v.p),
		SecureCloud: true, CpuCount: i32(runtime.NumCPU())}
	if v.p.GPU != nil {
		m.GpuDisplayName, m.GpuTypeId = emptyNil(v.p.GPU.DisplayName), emptyNil(v.p.GPU.ID)
	}
	return m
}

// Runtime is the running container's mapped ports; null when stopped.
func (v podView) Runtime() *podRuntime {
	if !v.running() {
		return nil
	}
	rt := &podRuntime{UptimeInSeconds: v.UptimeSeconds(), Ports: []podPort{}}
	for _, p := range v.p.Ports {
		num, typ, _ := strings.Cut(p, "/")
		pub, ok := v.p.PortMappings[num]
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(num)
		rt.Ports = append(rt.Ports, podPort{Ip: v.p.PublicIP, IsIpPublic: v.p.PublicIP != "", PrivatePort: i32(n), PublicPort: i32(pub), Type: typ})
	}
	return rt
}

func (v podView) NetworkVolume(ctx context.Context) (*volumeView, error) {
	return volumeByID(ctx, v.mg, v.p.NetworkVolumeID)
}

// ---- GPUs ----

type gpuTypeView struct{ g mgmt.GPUType }

type lowestPrice struct {
	GpuName, GpuTypeId                    string
	MinimumBidPrice, UninterruptablePrice *float64
	MinMemory, MinVcpu                    *int32
	StockStatus                           *string
	MaxUnreservedGpuCount                 int32
	AvailableGpuCounts                    []int32
}

type lowestPriceArgs struct {
	Input *struct {
		GpuCount            *int32
		MinDisk             *int32
		TotalDisk           *int32
		MinMemoryInGb       *int32
		MinVcpuCount        *int32
		SecureCloud         *bool
		Compliance          *[]string
		DataCenterId        *string
		CountryCode         *string
		MinDownload         *int32
		MinUpload           *int32
		SupportPublicIp     *bool
		IncludeAiApi        *bool
		AllowedCudaVersions *[]string
	}
}

func (g gpuTypeView) ID() string          { return g.g.ID }
func (g gpuTypeView) DisplayName() string { return displayName(g.g.ID) }
func (g gpuTypeView) Manufacturer() string {
	if strings.HasPrefix(g.g.ID, "AMD ") {
		return "AMD"
	}
	return "Nvidia"
}
func (g gpuTypeView) MemoryInGb() int32                { return i32(g.g.MemoryGB) }
func (g gpuTypeView) CudaCores() *int32                { return nil }
func (g gpuTypeView) SecureCloud() bool                { return g.g.Total > 0 }
func (g gpuTypeView) CommunityCloud() bool             { return false }
func (g gpuTypeView) SecurePrice() *float64            { return &g.g.Price }
func (g gpuTypeView) CommunityPrice() *float64         { return nil }
func (g gpuTypeView) OneWeekPrice() *float64           { return nil }
func (g gpuTypeView) OneMonthPrice() *float64          { return nil }
func (g gpuTypeView) ThreeMonthPrice() *float64        { return nil }
func (g gpuTypeView) CommunitySpotPrice() *float64     { return nil }
func (g gpuTypeView) SecureSpotPrice() *float64        { return nil }
func (g gpuTypeView) MaxGpuCount() int32               { return i32(g.g.Total) }
func (g gpuTypeView) MaxGpuCountSecureCloud() int32    { return i32(g.g.Total) }
func (g gpuTypeView) MaxGpuCountCommunityCloud() int32 { return 0 }

// LowestPrice answers from the price table: the per-GPU price when this
// host has gpuCount boards of the type, and how many are free now.
func (g gpuTypeView) LowestPrice(args lowestPriceArgs) (*lowestPrice, error) {
	n := 1
	if args.Input != nil && args.Input.GpuCount != nil {
		n = int(*args.Input.GpuCount)
		if n < 1 {
			return nil, invalid("gpuCount", "gpuCount must be at least 1, got %d", n)
		}
	}
	lp := &lowestPrice{GpuName: displayName(g.g.ID), GpuTypeId: g.g.ID, MaxUnreservedGpuCount: i32(g.g.Free), AvailableGpuCounts: []int32{}}
	for i := 1; i <= g.g.Total; i++ {
		lp.AvailableGpuCounts = append(lp.AvailableGpuCounts, int32(i))
	}
	if g.g.Total >= n {
		lp.UninterruptablePrice = ptr(g.g.Price)
		lp.MinVcpu = ptr(i32(runtime.NumCPU()))
		lp.StockStatus = stockStatus(g.g.Stock(n))
	}
	return lp, nil
}

// stockStatus is mgmt's stock level as RunPod's GraphQL spells it
// ("High", "Medium", "Low"); null when the host has too few boards.
func stockStatus(level string) *string {
	if level == "" {
		return nil
	}
	return ptr(level[:1] + strings.ToLower(level[1:]))
}

// displayName is RunPod's short name: "RTX 4090" for "NVIDIA GeForce RTX 4090".
func displayName(id string) string { return gpu.DisplayName(id) }

// gpuCatalogue is mgmt's catalogue as GraphQL views.
func gpuCatalogue(devs []gpu.Status, prices mgmt.Prices) []gpuTypeView {
	cat := mgmt.GPUCatalogue(devs, prices)
	out := make([]gpuTypeView, 0, len(cat))
	for _, g := range cat {
		out = append(out, gpuTypeView{g})
	}
	return out
}

type serverlessPool struct {
	ID         string
	GpuTypeIds []string
}

type dataCenterView struct {
	ID, Name, Location string
	GpuAvailability    []gpuAvailability
}

type gpuAvailability struct {
	GpuTypeId, DisplayName string
	StockStatus            *string
}

// endpointType is QUEUE or LOAD_BALANCER; records older than the field
// are queue endpoints.
func endpointType(e store.Endpoint) string {
	if e.Type == "" {
		return store.EndpointQueue
	}
	return e.Type
}
