package v2api

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// Endpoint is v2's Endpoint: the endpoint with its template's container.
type Endpoint struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Type           string            `json:"type"`
	RequestURLs    any               `json:"requestUrls"`
	Image          string            `json:"image"`
	Args           string            `json:"args"`
	Disk           int               `json:"disk"`
	Env            map[string]string `json:"env"`
	Ports          []string          `json:"ports"`
	Registry       *string           `json:"registry"`
	GPU            *EndpointGPU      `json:"gpu"`
	CPU            []CPUConfig       `json:"cpu,omitempty"`
	Workers        EndpointWorkers   `json:"workers"`
	Scaling        Scaling           `json:"scaling"`
	DataCenterIDs  []string          `json:"dataCenterIds"`
	NetworkVolumes []string          `json:"networkVolumes"`
	Timeout        int64             `json:"timeout"`
	Flashboot      string            `json:"flashboot"`
	CreatedAt      time.Time         `json:"createdAt"`
	// Berth: the template the container comes from, the endpoint version
	// and why ids were accepted but match nothing here.
	TemplateID string   `json:"templateId"`
	Version    int      `json:"version"`
	Warnings   []string `json:"warnings,omitempty"`
	// ModelReferences (Berth; RunPod's v2.json lacks it, its GraphQL has
	// it): the Hugging Face models the workers start with.
	ModelReferences []string `json:"modelReferences,omitempty"`
	// Git (Berth): the repository the endpoint tracks (push to deploy).
	Git *EndpointGit `json:"git,omitempty"`
	// Models (Berth): each model reference's download; absent when the
	// endpoint names none.
	Models []mgmt.ModelStatus `json:"models,omitempty"`
}

// EndpointGPU is v2's EndpointGpuConfig.
type EndpointGPU struct {
	Pools               []string `json:"pools"`
	ExcludedTypes       []string `json:"excludedTypes,omitempty"`
	Count               int      `json:"count"`
	AllowedCudaVersions []string `json:"allowedCudaVersions"`
	MinCudaVersion      *string  `json:"minCudaVersion"`
}

// CPUConfig is v2's CpuConfig (memory in GB, as RunPod's flavours give it:
// 2, 4 or 8 GB per vCPU for c, g and m flavours).
type CPUConfig struct {
	ID        string `json:"id"`
	VCPUCount int    `json:"vcpuCount"`
	Memory    int    `json:"memory,omitempty"`
}

// EndpointWorkers is v2's EndpointWorkers.
type EndpointWorkers struct {
	Min         *int `json:"min,omitempty"`
	Max         *int `json:"max,omitempty"`
	IdleTimeout *int `json:"idleTimeout,omitempty"`
}

// Scaling is v2's EndpointScaling (QUEUE_DELAY seconds or REQUEST_COUNT).
type Scaling struct {
	Type         string   `json:"type"`
	QueueDelay   *float64 `json:"queueDelay,omitempty"`
	RequestCount *int     `json:"requestCount,omitempty"`
}

// QueueURLs and LBURLs are v2's request URLs, pointing at this Berth.
type QueueURLs struct {
	Run        string `json:"run"`
	RunSync    string `json:"runSync"`
	Status     string `json:"status"`
	Stream     string `json:"stream"`
	Cancel     string `json:"cancel"`
	Retry      string `json:"retry"`
	PurgeQueue string `json:"purgeQueue"`
	Health     string `json:"health"`
}

type LBURLs struct {
	Base   string `json:"base"`
	Health string `json:"health"`
}

// viewEndpoint is viewEndpoint with the models' downloads.
func (a *API) viewEndpoint(e store.Endpoint, t *store.Template, base string) Endpoint {
	v := viewEndpoint(e, t, base)
	if a.cfg.Models != nil {
		v.Models = a.cfg.Models(e)
	}
	return v
}

func viewEndpoint(e store.Endpoint, t *store.Template, base string) Endpoint {
	typ := e.Type
	if typ == "" {
		typ = store.EndpointQueue
	}
	v := Endpoint{
		ID: e.ID, Name: e.Name, Type: typ, Env: map[string]string{}, Ports: []string{},
		Workers:       EndpointWorkers{Min: ptr(e.WorkersMin), Max: ptr(e.WorkersMax), IdleTimeout: ptr(e.IdleTimeout)},
		DataCenterIDs: nonNil(e.DataCenterIDs), NetworkVolumes: []string{}, Timeout: e.ExecutionTimeoutMs,
		Flashboot: "OFF", CreatedAt: e.CreatedAt, TemplateID: e.TemplateID, Version: e.Version, Warnings: e.Warnings,
		ModelReferences: e.ModelReferences, Git: viewGit(e, base),
	}
	u := base + "/v2/" + e.ID
	if typ == store.EndpointLoadBalancer {
		v.RequestURLs = LBURLs{Base: u, Health: u + "/ping"}
	} else {
		v.RequestURLs = QueueURLs{Run: u + "/run", RunSync: u + "/runsync", Status: u + "/status", Stream: u + "/stream",
			Cancel: u + "/cancel", Retry: u + "/retry", PurgeQueue: u + "/purge-queue", Health: u + "/health"}
	}
	if typ == store.EndpointQueue && e.ScalerType == "REQUEST_COUNT" {
		// v2.json: not applicable to a queue endpoint scaling on
		// requestCount, and omitted from responses (the stored value
		// stays, for a later change of scaler).
		v.Workers.IdleTimeout = nil
	}
	if e.Flashboot {
		v.Flashboot = "FLASHBOOT"
	}
	if t != nil {
		tv := viewTemplate(*t)
		v.Image, v.Args, v.Disk, v.Ports, v.Registry = tv.Image, tv.Args, tv.Disk, tv.Ports, tv.Registry
		for k, val := range t.Env {
			v.Env[k] = val
		}
	}
	for k, val := range e.Env { // the endpoint's env wins, as in its workers
		v.Env[k] = val
	}
	if e.NetworkVolumeID != "" {
		v.NetworkVolumes = append(v.NetworkVolumes, e.NetworkVolumeID)
	}
	for _, id := range e.NetworkVolumeIDs {
		if !slices.Contains(v.NetworkVolumes, id) {
			v.NetworkVolumes = append(v.NetworkVolumes, id)
		}
	}
	if e.ScalerType == "REQUEST_COUNT" {
		v.Scaling = Scaling{Type: "REQUEST_COUNT", RequestCount: ptr(e.ScalerValue)}
	} else {
		v.Scaling = Scaling{Type: "QUEUE_DELAY", QueueDelay: ptr(float64(e.ScalerValue))}
	}
	if e.ComputeType == "CPU" {
		ids := e.CPUFlavorIDs
		if len(ids) == 0 {
			ids = []string{"cpu3c"}
		}
		for _, id := range ids {
			v.CPU = append(v.CPU, CPUConfig{ID: id, VCPUCount: e.VCPUCount, Memory: e.VCPUCount * gpu.CPUMemoryPerVCPU(id)})
		}
		return v
	}
	g := &EndpointGPU{Pools: []string{}, Count: e.GPUCount, AllowedCudaVersions: nonNil(e.AllowedCudaVersions)}
	for _, id := range e.GPUTypeIDs {
		if ex, ok := strings.CutPrefix(id, "-"); ok {
			g.ExcludedTypes = append(g.ExcludedTypes, ex)
		} else {
			g.Pools = append(g.Pools, id)
		}
	}
	if len(g.Pools) == 0 {
		// No pool named: any GPU of this host. v2 needs at least one pool,
		// so every pool is shown, which means the same.
		for _, p := range gpu.Pools {
			g.Pools = append(g.Pools, p.ID)
		}
	}
	if e.MinCudaVersion != "" {
		g.MinCudaVersion = ptr(e.MinCudaVersion)
	}
	v.GPU = g
	return v
}

type endpointGPUBody struct {
	Pools               *[]string `json:"pools"`
	ExcludedTypes       *[]string `json:"excludedTypes"`
	Count               *int      `json:"count"`
	AllowedCudaVersions *[]string `json:"allowedCudaVersions"`
	MinCudaVersion      *string   `json:"minCudaVersion"`
}

type cpuBody struct {
	ID        string `json:"id"`
	VCPUCount int    `json:"vcpuCount"`
}

type endpointBody struct {
	ContainerConfig
	Name           *string          `json:"name"`
	Type           *string          `json:"type"`
	TemplateID     *string          `json:"templateId"`
	GPU            *endpointGPUBody `json:"gpu"`
	CPU            *[]cpuBody       `json:"cpu"`
	Workers        *EndpointWorkers `json:"workers"`
	Scaling        *Scaling         `json:"scaling"`
	DataCenterIDs  *[]string        `json:"dataCenterIds"`
	NetworkVolumes *[]string        `json:"networkVolumes"`
	Timeout        *int64           `json:"timeout"`
	Flashboot      *string          `json:"flashboot"`
	// Berth: see Endpoint.ModelReferences; [] clears.
	ModelReferences *[]string `json:"modelReferences"`
	// Berth: the repository to track (gitBody); null stops tracking.
	Git json.RawMessage `json:"git"`
}

// input is the body as mgmt's endpoint input (templateId is set by the
// caller). cur is the endpoint being updated, nil on create.
func (b endpointBody) input(cur *store.Endpoint) (mgmt.EndpointInput, error) {
	in := mgmt.EndpointInput{Name: b.Name, Type: b.Type, Env: nil}
	// v2.json: "Callers specify exactly one of gpu or cpu; neither or both
	// returns 400"; on a PATCH, omitted compute keeps the selection.
	switch {
	case b.GPU != nil && b.CPU != nil:
		return in, mgmt.InvalidInput("gpu", "give gpu or cpu, not both")
	case cur == nil && b.GPU == nil && b.CPU == nil:
		return in, mgmt.InvalidInput("gpu", "give gpu (GPU pools) or cpu (CPU types): an endpoint runs on one of them")
	}
	if b.CPU != nil {
		// cpu names a CPU endpoint; mgmt refuses it on a GPU one.
		in.ComputeType = ptr("CPU")
		ids := []string{}
		for i, c := range *b.CPU {
			if c.VCPUCount != (*b.CPU)[0].VCPUCount {
				return in, mgmt.InvalidInput("cpu", "cpu[%d].vcpuCount: every CPU type of a Berth endpoint has the same vcpuCount (%d)", i, (*b.CPU)[0].VCPUCount)
			}
			ids = append(ids, c.ID)
		}
		in.CPUFlavorIDs, in.VCPUCount = ids, ptr((*b.CPU)[0].VCPUCount)
	}
	if g := b.GPU; g != nil {
		in.ComputeType = ptr("GPU") // gpu names a GPU endpoint
		if g.Pools != nil {
			// pools replace the selection, exclusions with them.
			ids := slices.Clone(*g.Pools)
			if g.ExcludedTypes != nil {
				for _, x := range *g.ExcludedTypes {
					ids = append(ids, "-"+strings.TrimSpace(x))
				}
			}
			in.GPUTypeIDs = ids
		}
		in.GPUCount = g.Count
		if g.AllowedCudaVersions != nil {
			in.AllowedCudaVersions = nonNil(*g.AllowedCudaVersions)
		}
		in.MinCudaVersion = g.MinCudaVersion
	}
	if wk := b.Workers; wk != nil {
		in.WorkersMin, in.WorkersMax, in.IdleTimeout = wk.Min, wk.Max, wk.IdleTimeout
	}
	if sc := b.Scaling; sc != nil {
		// The schema has checked the type and its field.
		if sc.Type == "REQUEST_COUNT" {
			in.ScalerType, in.ScalerValue = ptr("REQUEST_COUNT"), sc.RequestCount
		} else {
			if err := mgmt.LimitQueueDelay.CheckFloat("scaling.queueDelay", math.Ceil(*sc.QueueDelay)); err != nil {
				return in, mgmt.LimitQueueDelay.CheckFloat("scaling.queueDelay", *sc.QueueDelay)
			}
			// Berth's scaler counts whole seconds.
			in.ScalerType, in.ScalerValue = ptr("QUEUE_DELAY"), ptr(int(math.Ceil(*sc.QueueDelay)))
		}
	}
	if b.DataCenterIDs != nil {
		in.DataCenterIDs = nonNil(*b.DataCenterIDs)
	}
	if b.NetworkVolumes != nil {
		in.NetworkVolumeIDs = nonNil(*b.NetworkVolumes)
		in.NetworkVolumeID = ptr("")
	}
	in.ExecutionTimeoutMs = b.Timeout
	if b.ModelReferences != nil {
		in.ModelReferences = nonNil(*b.ModelReferences)
	}
	if b.Flashboot != nil {
		in.Flashboot = ptr(*b.Flashboot != "OFF") // FLASHBOOT, PRIORITY_FLASHBOOT
	}
	if b.Env != nil {
		in.Env = b.Env
	}
	return in, nil
}

// rename names mgmt's fields as this body gave them: computeType is the
// gpu or cpu object sent, scalerValue the scaling field of its type.
func (b endpointBody) rename(err error) error {
	var me *mgmt.Error
	if !errors.As(err, &me) {
		return err
	}
	names := map[string]string{}
	switch {
	case b.CPU != nil:
		names["computeType"] = "cpu"
	case b.GPU != nil:
		names["computeType"] = "gpu"
	}
	if b.Scaling != nil {
		names["scalerValue"] = "scaling.queueDelay"
		if b.Scaling.Type == "REQUEST_COUNT" {
			names["scalerValue"] = "scaling.requestCount"
		}
	}
	return v2Names(me, names)
}

// EndpointList is v2's ListEndpointsResponse.
type EndpointList struct {
	Endpoints []Endpoint `json:"endpoints"`
}

func (a *API) listEndpoints(w http.ResponseWriter, r *http.Request) {
	eps, ts, err := a.cfg.Mgmt.Endpoints(r.Context(), "", true)
	out := EndpointList{Endpoints: []Endpoint{}}
	for _, e := range eps {
		out.Endpoints = append(out.Endpoints, a.viewEndpoint(e, tmplOf(ts, e.TemplateID), baseURL(r)))
	}
	a.answer(w, r, http.StatusOK, out, err)
}

func tmplOf(ts map[string]store.Template, id string) *store.Template {
	if t, ok := ts[id]; ok {
		return &t
	}
	return nil
}

func (a *API) endpoint(r *http.Request, id string) (store.Endpoint, *store.Template, error) {
	eps, ts, err := a.cfg.Mgmt.Endpoints(r.Context(), id, true)
	if err != nil {
		return store.Endpoint{}, nil, err
	}
	if len(eps) == 0 {
		return store.Endpoint{}, nil, &mgmt.Error{Kind: mgmt.NotFound, Msg: "endpoint " + id + " not found"}
	}
	return eps[0], tmplOf(ts, eps[0].TemplateID), nil
}

func (a *API) getEndpoint(w http.ResponseWriter, r *http.Request) {
	e, t, err := a.endpoint(r, pathID(r))
	a.answer(w, r, http.StatusOK, a.viewEndpoint(e, t, baseURL(r)), err)
}

// createEndpoint: the endpoint gets a template of its own (bound to it,
// deleted with it), made from templateId's and the inline container
// fields, in one mgmt operation — RunPod's v2 model: a template is a
// snapshot applied when the endpoint is created.
func (a *API) createEndpoint(w http.ResponseWriter, r *http.Request) {
	var b endpointBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	in, err := b.input(nil)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	tin, err := b.container()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	git, err := gitInput(b.Git)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	in.TemplateID = b.TemplateID
	e, err := a.cfg.Mgmt.CreateEndpointWith(r.Context(), in, mgmt.EndpointOptions{V2Rules: true, Template: &tin, Git: git})
	if err != nil {
		a.fail(w, r, b.rename(err))
		return
	}
	e2, t, err := a.endpoint(r, e.ID)
	a.answer(w, r, http.StatusCreated, withSecret(a.viewEndpoint(e2, t, baseURL(r)), e), err)
}

// container is the template part of an endpoint body: the container
// fields but env, which is the endpoint's (v1's endpoint env).
func (b endpointBody) container() (mgmt.TemplateInput, error) {
	cc := b.ContainerConfig
	cc.Env = nil
	return cc.templateInput()
}

// updateEndpoint: container fields or a templateId change the endpoint's
// own template (made when it has none), which rolls its workers; one mgmt
// operation.
func (a *API) updateEndpoint(w http.ResponseWriter, r *http.Request) {
	var b endpointBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	cur, _, err := a.endpoint(r, pathID(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	in, err := b.input(&cur)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	git, err := gitInput(b.Git)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	opt := mgmt.EndpointOptions{V2Rules: true, Git: git}
	cc := b.ContainerConfig
	cc.Env = nil
	if cc.given() || (b.TemplateID != nil && *b.TemplateID != "") {
		tin, err := b.container()
		if err != nil {
			a.fail(w, r, err)
			return
		}
		opt.Template = &tin
		if b.TemplateID != nil && *b.TemplateID != "" {
			in.TemplateID = b.TemplateID
		}
	}
	done, err := a.cfg.Mgmt.UpdateEndpointWith(r.Context(), cur.ID, in, opt)
	if err != nil {
		a.fail(w, r, b.rename(err))
		return
	}
	e, t, err := a.endpoint(r, cur.ID)
	a.answer(w, r, http.StatusOK, withSecret(a.viewEndpoint(e, t, baseURL(r)), done), err)
}

// withSecret adds the webhook secret a change has just generated (done's)
// to its one answer.
func withSecret(v Endpoint, done store.Endpoint) Endpoint {
	if v.Git != nil && done.Git != nil {
		v.Git.WebhookSecret = done.Git.NewWebhookSecret
	}
	return v
}

func (a *API) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeleteEndpoint(r.Context(), pathID(r)))
}

// ---- workers and releases ----

// WorkerView is v2's Worker.
type WorkerView struct {
	ID            string     `json:"id"`
	Status        string     `json:"status"`
	IsStale       bool       `json:"isStale"`
	Version       *int       `json:"version"`
	GPUCount      int        `json:"gpuCount"`
	Image         *string    `json:"image"`
	UptimeSeconds *int       `json:"uptimeSeconds"`
	GPUTypeID     *string    `json:"gpuTypeId"`
	DataCenterID  *string    `json:"dataCenterId"`
	StartedAt     *time.Time `json:"startedAt"`
}

// WorkerSummary is v2's WorkerSummary.
type WorkerSummary struct {
	Running      int `json:"running"`
	Idle         int `json:"idle"`
	Initializing int `json:"initializing"`
	Throttled    int `json:"throttled"`
	Unhealthy    int `json:"unhealthy"`
	Total        int `json:"total"`
}

// WorkerList is v2's ListEndpointWorkersResponse.
type WorkerList struct {
	Workers         []WorkerView  `json:"workers"`
	Summary         WorkerSummary `json:"summary"`
	EndpointVersion *int          `json:"endpointVersion"`
}

func (a *API) workerViews(e store.Endpoint) ([]WorkerView, WorkerSummary) {
	var ws []mgmt.Worker
	if a.cfg.Workers != nil {
		ws = a.cfg.Workers(e.ID)
	}
	now := a.cfg.Clock.Now()
	out := []WorkerView{}
	var sum WorkerSummary
	for _, w := range ws {
		st := strings.ToUpper(w.State)
		if st == "FROZEN" {
			// A FlashBoot worker paused by Berth: v2 has no such state, and
			// it is idle (the next job thaws it).
			st = "IDLE"
		}
		switch st {
		case "RUNNING":
			sum.Running++
		case "IDLE":
			sum.Idle++
		case "INITIALIZING":
			sum.Initializing++
		case "THROTTLED":
			sum.Throttled++
		case "UNHEALTHY":
			sum.Unhealthy++
		default:
			continue // exited: no longer a worker
		}
		v := WorkerView{ID: w.ID, Status: st, IsStale: w.Version < e.Version, Version: ptr(w.Version), GPUCount: w.GPUCount,
			DataCenterID: ptr(mgmt.DataCenterID)}
		if w.ImageName != "" { // not known until the container is made
			v.Image = ptr(w.ImageName)
		}
		if w.GPUTypeID != "" {
			v.GPUTypeID = ptr(w.GPUTypeID)
		}
		if !w.LastStartedAt.IsZero() {
			v.StartedAt = ptr(w.LastStartedAt.UTC())
			v.UptimeSeconds = ptr(max(0, int(now.Sub(w.LastStartedAt).Seconds())))
		}
		out = append(out, v)
	}
	if a.cfg.Health != nil && len(ws) == 0 {
		// Workers outside Docker (worker-env) are known to the queue only.
		h := a.cfg.Health(e.ID)
		sum.Running, sum.Idle = h.Workers.Running, h.Workers.Idle
		sum.Initializing, sum.Throttled, sum.Unhealthy = h.Workers.Initializing, h.Workers.Throttled, h.Workers.Unhealthy
	}
	sum.Total = sum.Running + sum.Idle + sum.Initializing + sum.Throttled + sum.Unhealthy
	return out, sum
}

func (a *API) listWorkers(w http.ResponseWriter, r *http.Request) {
	e, _, err := a.endpoint(r, pathID(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ws, sum := a.workerViews(e)
	writeJSON(w, http.StatusOK, WorkerList{Workers: ws, Summary: sum, EndpointVersion: ptr(e.Version)})
}

// Release is v2's Release: a recorded endpoint version.
type Release struct {
	ID          string      `json:"id"`
	Version     *int        `json:"version"`
	Source      string      `json:"source"`
	BuildID     *string     `json:"buildId"`
	WorkerCount int         `json:"workerCount"`
	CreatedAt   time.Time   `json:"createdAt"`
	Diff        []DiffEntry `json:"diff"`
}

// DiffEntry is one changed field of a release.
type DiffEntry struct {
	Field string `json:"field"`
	Old   any    `json:"old"`
	New   any    `json:"new"`
}

// Rollout is v2's RolloutSummary.
type Rollout struct {
	InProgress      bool `json:"inProgress"`
	WorkersOnLatest int  `json:"workersOnLatest"`
	WorkersTotal    int  `json:"workersTotal"`
	PercentOnLatest int  `json:"percentOnLatest"`
}

// ReleaseList is v2's ListEndpointReleasesResponse.
type ReleaseList struct {
	EndpointVersion *int      `json:"endpointVersion"`
	Rollout         Rollout   `json:"rollout"`
	Releases        []Release `json:"releases"`
}

func (a *API) listReleases(w http.ResponseWriter, r *http.Request) {
	e, _, err := a.endpoint(r, pathID(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	rels, err := a.cfg.Mgmt.Releases(r.Context(), e.ID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var ws []mgmt.Worker
	if a.cfg.Workers != nil {
		ws = a.cfg.Workers(e.ID)
	}
	onVersion := map[int]int{}
	total := 0
	for _, wk := range ws {
		if wk.State != "exited" {
			onVersion[wk.Version]++
			total++
		}
	}
	out := ReleaseList{EndpointVersion: ptr(e.Version), Releases: []Release{}}
	out.Rollout = Rollout{WorkersOnLatest: onVersion[e.Version], WorkersTotal: total, PercentOnLatest: 100}
	if total > 0 {
		out.Rollout.PercentOnLatest = 100 * onVersion[e.Version] / total
	}
	out.Rollout.InProgress = out.Rollout.WorkersOnLatest < total
	for i := len(rels) - 1; i >= 0; i-- { // newest first
		rel := rels[i]
		v := Release{ID: e.ID + "-v" + itoa(rel.Version), Version: ptr(rel.Version), Source: "MANUAL",
			WorkerCount: onVersion[rel.Version], CreatedAt: rel.CreatedAt, Diff: []DiffEntry{}}
		if rel.Source != "" {
			v.Source = rel.Source
		}
		if rel.BuildID != "" {
			v.BuildID = ptr(rel.BuildID)
		}
		for _, d := range rel.Diff {
			v.Diff = append(v.Diff, DiffEntry{Field: d.Field, Old: d.Old, New: d.New})
		}
		out.Releases = append(out.Releases, v)
	}
	writeJSON(w, http.StatusOK, out)
}

var errNoLogs = errors.New("no container runtime: Docker is not reachable")
