package v1api

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/gpu"
	"berth/mgmt"
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

// workers is an endpoint's workers (mgmt.MergeWorkers) in v1's shape.
func (a *API) workers(e *store.Endpoint) []WorkerView {
	out := []WorkerView{}
	if a.cfg.Workers == nil {
		return out
	}
	for _, w := range a.cfg.Workers(e.ID) {
		v := WorkerView{ID: w.ID, Name: w.Name, DesiredStatus: w.DesiredStatus, EndpointID: e.ID, AIApiID: e.ID,
			SlsVersion: w.Version, Image: w.ImageName, ImageName: w.ImageName, GPUCount: w.GPUCount, VCPUCount: w.VCPUCount,
			LastStartedAt: w.LastStartedAt, State: w.State, StatusMessage: w.Message, JobsInProgress: w.JobsInProgress,
			LastSeenAt: w.LastSeenAt, External: w.External}
		if w.GPUTypeID != "" {
			v.GPU = &store.PodGPU{ID: w.GPUTypeID, Count: w.GPUCount, DisplayName: gpu.DisplayName(w.GPUTypeID), UUIDs: w.GPUUUIDs}
		}
		out = append(out, v)
	}
	return out
}

// endpointBody is an endpoint as v1 answers it: the record, its
// dataCenterIds inside v1.json's enum, and the GraphQL-shaped fields
// runpodctl reads from REST beside RunPod's documented ones (it sends
// them back to saveEndpoint when it changes an endpoint's models).
type endpointBody struct {
	store.Endpoint
	// DataCenterIDs is the record's without this host's own name
	// (BERTH-LOCAL, outside v1.json's enum); none chosen reads as RunPod
	// answers an endpoint created without a choice: v1.json's default,
	// every data centre.
	DataCenterIDs []string `json:"dataCenterIds"`
	GPUIDs        string   `json:"gpuIds"`        // gpuTypeIds comma-joined, as GraphQL's gpuIds
	Locations     string   `json:"locations"`     // dataCenterIds as GraphQL's locations
	FlashBootType string   `json:"flashBootType"` // FLASHBOOT or OFF, as GraphQL's
}

// V1DefaultDataCenters is v1.json's default of an endpoint's dataCenterIds
// (EndpointCreateInput, Endpoint): every RunPod data centre, in its order.
var V1DefaultDataCenters = []string{
	"EU-RO-1", "CA-MTL-1", "EU-SE-1", "US-IL-1", "EUR-IS-1", "EU-CZ-1", "US-TX-3", "EUR-IS-2", "US-KS-2",
	"US-GA-2", "US-WA-1", "US-TX-1", "CA-MTL-3", "EU-NL-1", "US-TX-4", "US-CA-2", "US-NC-1", "OC-AU-1",
	"US-DE-1", "EUR-IS-3", "CA-MTL-2", "AP-JP-1", "EUR-NO-1", "EU-FR-1", "US-KS-3", "US-GA-1",
}

func bodyOf(e store.Endpoint) endpointBody {
	b := endpointBody{Endpoint: e, GPUIDs: strings.Join(e.GPUTypeIDs, ","), Locations: strings.Join(e.DataCenterIDs, ","), FlashBootType: "OFF"}
	if e.Flashboot {
		b.FlashBootType = "FLASHBOOT"
	}
	b.DataCenterIDs = slices.DeleteFunc(slices.Clone(e.DataCenterIDs), func(id string) bool { return id == mgmt.DataCenterID })
	if len(b.DataCenterIDs) == 0 {
		b.DataCenterIDs = slices.Clone(V1DefaultDataCenters)
	}
	return b
}

// endpointView is an Endpoint with the optional template and workers.
type endpointView struct {
	endpointBody
	Template *store.Template `json:"template,omitempty"`
	Workers  *[]WorkerView   `json:"workers,omitempty"`
	// Status is the runtime's view (Config.EndpointStatus): workers by
	// state and why jobs are held back. A Berth extension.
	Status any `json:"status,omitempty"`
	// Models: the model references' downloads (Berth; absent when the
	// endpoint names none).
	Models []mgmt.ModelStatus `json:"models,omitempty"`
}

func (a *API) viewEndpoint(e store.Endpoint, templates map[string]store.Template, withWorkers bool) endpointView {
	v := endpointView{endpointBody: bodyOf(e), Status: a.endpointStatus(e.ID)}
	if a.cfg.Models != nil {
		v.Models = a.cfg.Models(e)
	}
	if templates != nil {
		if t, ok := templates[e.TemplateID]; ok {
			v.Template = &t
		}
	}
	if withWorkers {
		ws := a.workers(&e)
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
	a.answer(w, r, http.StatusOK, bodyOf(e), err)
}

// deleteEndpoint removes the endpoint: its job routes answer 404 at once,
// every job not yet finished (queued or running) is cancelled — webhooks
// fire with CANCELLED — and the runtime is told to stop its workers (mgmt's
// EndpointDeleted hook, wired by httpapi). A running job's result could not be fetched after the
// endpoint is gone, so it is cancelled rather than left to finish.
func (a *API) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeleteEndpoint(r.Context(), mux.Vars(r)["endpointId"]))
}
