package v1api

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/store"
	"berth/v1input"
)

// Endpoints: list, get, update, delete (create is in api.go).

// WorkerView is a worker in includeWorkers: Pod-shaped, as RunPod's, with
// Berth's state fields.
type WorkerView struct {
	ID             string         `json:"id"`
	Name           string         `json:"name"`
	DesiredStatus  string         `json:"desiredStatus"`
	EndpointID     string         `json:"endpointId"`
	AIApiID        string         `json:"aiApiId"`
	SlsVersion     int            `json:"slsVersion"`
	Image          string         `json:"image,omitempty"`
	ImageName      string         `json:"imageName,omitempty"`
	GPU            *store.PodGPU  `json:"gpu,omitempty"`
	GPUCount       int            `json:"gpuCount"`
	VCPUCount      int            `json:"vcpuCount"`
	LastStartedAt  time.Time      `json:"lastStartedAt,omitzero"`
	State          string         `json:"state"`
	StatusMessage  string         `json:"statusMessage,omitempty"`
	JobsInProgress int            `json:"jobsInProgress"`
	LastSeenAt     time.Time      `json:"lastSeenAt,omitzero"`
	External       bool           `json:"external"`
	PortMappings   map[string]int `json:"portMappings"`
}

// EndpointWorkers merges the runtime's containers with the queue's view of
// the workers that talk to it (external workers only appear there).
func (a *API) EndpointWorkers(e *store.Endpoint) []WorkerView {
	byID := map[string]*WorkerView{}
	add := func(id string) *WorkerView {
		if v := byID[id]; v != nil {
			return v
		}
		v := &WorkerView{ID: id, Name: e.Name + "-" + id, DesiredStatus: store.PodRunning, EndpointID: e.ID, AIApiID: e.ID, SlsVersion: e.Version, State: "idle"}
		byID[id] = v
		return v
	}
	if a.cfg.Workers != nil {
		for _, wi := range a.cfg.Workers(e.ID) {
			v := add(wi.ID)
			v.State, v.StatusMessage, v.SlsVersion = wi.State, wi.Message, wi.Version
			v.Image, v.ImageName = wi.ImageName, wi.ImageName
			v.GPUCount, v.VCPUCount, v.LastStartedAt = wi.GPUCount, wi.VCPUCount, wi.LastStartedAt
			if wi.GPUTypeID != "" {
				v.GPU = &store.PodGPU{ID: wi.GPUTypeID, Count: wi.GPUCount, DisplayName: wi.GPUTypeID, UUIDs: wi.GPUUUIDs}
			}
			if wi.State == "exited" {
				v.DesiredStatus = store.PodExited
			}
		}
	}
	for _, wl := range a.cfg.Queue.Workers(e.ID) {
		v := add(wl.WorkerID)
		v.JobsInProgress, v.LastSeenAt, v.External = wl.Running, wl.LastSeen, wl.External
		switch {
		case wl.Lost:
			v.State = "lost"
		case wl.Running > 0:
			v.State = "running"
		case v.State == "" || v.State == "idle":
			v.State = "idle"
		}
	}
	out := make([]WorkerView, 0, len(byID))
	for _, v := range byID {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b WorkerView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// endpointView is an Endpoint with the optional template and workers.
type endpointView struct {
	store.Endpoint
	Template *store.Template `json:"template,omitempty"`
	Workers  *[]WorkerView   `json:"workers,omitempty"`
	// Status is the runtime's view (Config.EndpointStatus): workers by
	// state and why jobs are held back. A Berth extension.
	Status any `json:"status,omitempty"`
}

func (a *API) viewEndpoint(e store.Endpoint, templates map[string]store.Template, withWorkers bool) endpointView {
	v := endpointView{Endpoint: e, Status: a.endpointStatus(e.ID)}
	if templates != nil {
		if t, ok := templates[e.TemplateID]; ok {
			v.Template = &t
		}
	}
	if withWorkers {
		ws := a.EndpointWorkers(&e)
		v.Workers = &ws
	}
	return v
}

func (a *API) listEndpoints(w http.ResponseWriter, r *http.Request) {
	a.showEndpoints(w, r, "")
}

func (a *API) getEndpoint(w http.ResponseWriter, r *http.Request) {
	a.showEndpoints(w, r, mux.Vars(r)["endpointId"])
}

func (a *API) showEndpoints(w http.ResponseWriter, r *http.Request, id string) {
	flags, err := queryBools(r, "includeTemplate", "includeWorkers")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	eps, tmpl, err := a.cfg.Mgmt.Endpoints(r.Context(), id, flags["includeTemplate"])
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]endpointView, 0, len(eps))
	for _, e := range eps {
		out = append(out, a.viewEndpoint(e, tmpl, flags["includeWorkers"]))
	}
	if id != "" {
		writeJSON(w, http.StatusOK, out[0])
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// updateEndpoint is PATCH and POST …/update (EndpointUpdateInput: the
// creation fields minus computeType).
func (a *API) updateEndpoint(w http.ResponseWriter, r *http.Request) {
	var in v1input.EndpointInput
	if !decodeBody(w, r, &in) {
		return
	}
	e, err := a.cfg.Mgmt.UpdateEndpoint(r.Context(), mux.Vars(r)["endpointId"], in.Mgmt())
	a.answer(w, r, http.StatusOK, e, err)
}

// deleteEndpoint removes the endpoint: its job routes answer 404 at once,
// every job not yet finished (queued or running) is cancelled — webhooks
// fire with CANCELLED — and the runtime is told to stop its workers (mgmt's
// EndpointDeleted hook, wired by httpapi). A running job's result could not be fetched after the
// endpoint is gone, so it is cancelled rather than left to finish.
func (a *API) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeleteEndpoint(r.Context(), mux.Vars(r)["endpointId"]))
}
