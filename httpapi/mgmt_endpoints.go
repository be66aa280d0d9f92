package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/queue"
	"berth/store"
)

// Endpoints: list, get, update, delete (create is in mgmt.go).

// WorkerInfo is the runtime's view of one worker container, shown by
// includeWorkers (Config.WorkerInfo).
type WorkerInfo struct {
	ID            string    // worker id (its RUNPOD_POD_ID)
	State         string    // initializing, idle, running, throttled, unhealthy or exited
	ImageName     string    // image the container runs
	Version       int       // endpoint version the container runs
	GPUTypeID     string    // "" for CPU workers
	GPUCount      int       //
	GPUUUIDs      []string  // pinned devices
	VCPUCount     int       //
	LastStartedAt time.Time //
	Message       string    // why it is initializing, throttled or unhealthy
}

// workerView is a worker in includeWorkers: Pod-shaped, as RunPod's, with
// Berth's state fields.
type workerView struct {
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

// endpointWorkers merges the runtime's containers with the queue's view of
// the workers that talk to it (external workers only appear there).
func (s *Server) endpointWorkers(e *store.Endpoint) []workerView {
	byID := map[string]*workerView{}
	add := func(id string) *workerView {
		if v := byID[id]; v != nil {
			return v
		}
		v := &workerView{ID: id, Name: e.Name + "-" + id, DesiredStatus: store.PodRunning, EndpointID: e.ID, AIApiID: e.ID, SlsVersion: e.Version, State: "idle"}
		byID[id] = v
		return v
	}
	if s.cfg.WorkerInfo != nil {
		for _, wi := range s.cfg.WorkerInfo(e.ID) {
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
	for _, wl := range s.cfg.Queue.Workers(e.ID) {
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
	out := make([]workerView, 0, len(byID))
	for _, v := range byID {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b workerView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// endpointView is an Endpoint with the optional template and workers.
type endpointView struct {
	store.Endpoint
	Template *store.Template `json:"template,omitempty"`
	Workers  *[]workerView   `json:"workers,omitempty"`
	// Status is the runtime's view (Config.EndpointStatus): workers by
	// state and why jobs are held back. A Berth extension.
	Status any `json:"status,omitempty"`
}

func (s *Server) viewEndpoint(e store.Endpoint, templates map[string]store.Template, withWorkers bool) endpointView {
	v := endpointView{Endpoint: e, Status: s.endpointStatus(e.ID)}
	if templates != nil {
		if t, ok := templates[e.TemplateID]; ok {
			v.Template = &t
		}
	}
	if withWorkers {
		ws := s.endpointWorkers(&e)
		v.Workers = &ws
	}
	return v
}

func (s *Server) listEndpoints(w http.ResponseWriter, r *http.Request) {
	s.showEndpoints(w, r, "")
}

func (s *Server) getEndpoint(w http.ResponseWriter, r *http.Request) {
	s.showEndpoints(w, r, mux.Vars(r)["endpointId"])
}

func (s *Server) showEndpoints(w http.ResponseWriter, r *http.Request, id string) {
	flags, err := queryBools(r, "includeTemplate", "includeWorkers")
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	eps, tmpl, err := s.mg.Endpoints(r.Context(), id, flags["includeTemplate"])
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	out := make([]endpointView, 0, len(eps))
	for _, e := range eps {
		out = append(out, s.viewEndpoint(e, tmpl, flags["includeWorkers"]))
	}
	if id != "" {
		writeJSON(w, http.StatusOK, out[0])
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// updateEndpoint is PATCH and POST …/update (EndpointUpdateInput: the
// creation fields minus computeType).
func (s *Server) updateEndpoint(w http.ResponseWriter, r *http.Request) {
	var in EndpointInput
	if !decodeBody(w, r, &in) {
		return
	}
	e, err := s.mg.UpdateEndpoint(r.Context(), mux.Vars(r)["endpointId"], in.mgmt())
	s.answer(w, r, http.StatusOK, e, err)
}

// deleteEndpoint removes the endpoint: its job routes answer 404 at once,
// every job not yet finished (queued or running) is cancelled — webhooks
// fire with CANCELLED — and the runtime is told to stop its workers (see
// endpointDeleted). A running job's result could not be fetched after the
// endpoint is gone, so it is cancelled rather than left to finish.
func (s *Server) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, http.StatusNoContent, nil, s.mg.DeleteEndpoint(r.Context(), mux.Vars(r)["endpointId"]))
}

// endpointChanged is mgmt's hook for a created or changed endpoint.
func (s *Server) endpointChanged(id string) {
	s.forgetEndpoint(id)
	if s.cfg.EndpointChanged != nil {
		s.cfg.EndpointChanged(id)
	}
}

// endpointDeleted is mgmt's hook for a deleted endpoint.
func (s *Server) endpointDeleted(id string) {
	s.forgetEndpoint(id)
	if err := s.cancelEndpointJobs(id); err != nil {
		s.cfg.Logger.Error("cancel jobs of deleted endpoint", "endpoint", id, "err", err)
	}
	if s.cfg.EndpointDeleted != nil {
		s.cfg.EndpointDeleted(id)
	}
}

// cancelEndpointJobs cancels every unfinished job of an endpoint.
func (s *Server) cancelEndpointJobs(id string) error {
	type jobState struct {
		ID         string          `json:"id"`
		EndpointID string          `json:"endpointId"`
		Status     store.JobStatus `json:"status"`
	}
	var ids []string
	err := s.cfg.Store.Scan(store.Jobs, func(_ string, raw []byte) error {
		var j jobState
		if json.Unmarshal(raw, &j) == nil && j.EndpointID == id && !j.Status.Terminal() {
			ids = append(ids, j.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var firstErr error
	for _, jid := range ids {
		if _, err := s.cfg.Queue.Cancel(id, jid); err != nil && !errors.Is(err, queue.ErrNotFound) && firstErr == nil {
			firstErr = err
		}
	}
	// A job submitted while the endpoint was being deleted: still queued.
	if _, err := s.cfg.Queue.Purge(id); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}
