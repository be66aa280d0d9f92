package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"berth/queue"
)

// The worker protocol of runpod-python (runpod-wire.md §1). Bodies of
// job-done and job-stream are raw JSON sent as form content: never parse
// them as a form.

// WorkerRoute is one call of the worker protocol, under /v2/{endpointId}.
type WorkerRoute struct {
	Method, Path, Op string
}

// workerRoute is a WorkerRoute with its handler.
type workerRoute struct {
	WorkerRoute
	h http.HandlerFunc
}

// workerRoutes is the one table of the worker protocol: the API's router
// and WorkerHandler (the listener containers reach) are both built from it,
// so a call cannot be served on one and missing on the other.
func (s *Server) workerRoutes() []workerRoute {
	const get, post = http.MethodGet, http.MethodPost
	return []workerRoute{
		{WorkerRoute{get, "/job-take/{workerId}", "job-take"}, s.jobTake(false)},
		{WorkerRoute{post, "/job-done/{workerId}/{jobId}", "job-done"}, s.jobDone},
		{WorkerRoute{post, "/job-stream/{workerId}/{jobId}", "job-stream"}, s.jobStream},
		{WorkerRoute{get, "/job-stop/{workerId}", "job-stop"}, s.jobStop},
		{WorkerRoute{get, "/ping/{workerId}", "ping"}, s.ping},
		{WorkerRoute{get, "/job-take-batch/{workerId}", "job-take-batch"}, s.jobTake(true)},
	}
}

// WorkerRoutes lists the worker protocol's calls (paths under
// /v2/{endpointId}).
func (s *Server) WorkerRoutes() []WorkerRoute {
	var out []WorkerRoute
	for _, rt := range s.workerRoutes() {
		out = append(out, rt.WorkerRoute)
	}
	return out
}

// workerProtocol registers the worker routes on v2, the /v2/{endpointId}
// subrouter. Each route is named "worker:<op>".
func (s *Server) workerProtocol(v2 *mux.Router) {
	for _, rt := range s.workerRoutes() {
		h := s.instrument(rt.Op, s.workerAuth(s.withWorkerEndpoint(s.polls.wrap(rt.Op, true, rt.h))))
		v2.Handle(rt.Path, h).Methods(rt.Method).Name("worker:" + rt.Op)
	}
}

// WorkerHandler serves the worker protocol and nothing else: the handler
// of the listener on the Docker bridge, which containers reach (the job
// API and management stay where --addr put them). It shares the API's
// limits, deadlines and metrics.
func (s *Server) WorkerHandler() http.Handler {
	r := s.newRouter()
	s.workerProtocol(r.PathPrefix("/v2/{endpointId}").Subrouter())
	return r
}

const (
	maxDoneBody   = 64 << 20
	maxStreamBody = 32 << 20
	maxBatch      = 256
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func (s *Server) jobTake(batch bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		vars := mux.Vars(r)
		n := 1
		if batch {
			if v := r.URL.Query().Get("batch_size"); v != "" {
				var err error
				n, err = strconv.Atoi(v)
				if err != nil || n < 1 || n > maxBatch {
					writeErr(w, r, http.StatusBadRequest, "batch_size must be an integer from 1 to 256")
					return
				}
			}
		}
		jobs, err := s.cfg.Queue.Take(r.Context(), vars["endpointId"], vars["workerId"], n)
		if err != nil {
			s.internal(w, r, err)
			return
		}
		if len(jobs) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.Context().Err() != nil {
			s.untake(vars, jobs)
			return
		}
		var v any = jobs[0]
		if batch {
			v = jobs
		}
		b, _ := json.Marshal(v)
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write(b); err != nil {
			s.untake(vars, jobs)
		}
	}
}

func (s *Server) untake(vars map[string]string, jobs []queue.TakenJob) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	s.cfg.Queue.Untake(vars["endpointId"], vars["workerId"], ids)
}

func (s *Server) jobDone(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, maxDoneBody)
	if !ok {
		return
	}
	vars := mux.Vars(r)
	rep, err := queue.ParseDone(body, r.URL.Query().Get("isStream") == "true")
	if err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	accepted, err := s.cfg.Queue.Done(vars["endpointId"], vars["workerId"], vars["jobId"], rep)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	// A report for a job no longer the worker's (cancelled, timed out,
	// expired) is answered 200 so the SDK does not retry it; it changes
	// nothing.
	writeAccepted(w, accepted)
}

var (
	acceptedTrue  = []byte(`{"accepted":true}`)
	acceptedFalse = []byte(`{"accepted":false}`)
)

// writeAccepted answers job-done and job-stream without reflection: they
// are on every job's path.
func writeAccepted(w http.ResponseWriter, accepted bool) {
	w.Header().Set("Content-Type", "application/json")
	if accepted {
		w.Write(acceptedTrue)
	} else {
		w.Write(acceptedFalse)
	}
}

func (s *Server) jobStream(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, maxStreamBody)
	if !ok {
		return
	}
	vars := mux.Vars(r)
	accepted, err := s.cfg.Queue.StreamChunk(vars["endpointId"], vars["workerId"], vars["jobId"], body)
	if err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	writeAccepted(w, accepted)
}

func (s *Server) jobStop(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	ids := s.cfg.Queue.StopPoll(r.Context(), vars["endpointId"], vars["workerId"])
	if len(ids) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobsToStop": ids})
}

func (s *Server) ping(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	q := r.URL.Query()
	var ids []string
	if v := q.Get("job_id"); v != "" {
		ids = strings.Split(v, ",")
	}
	if q.Get("status") == "unhealthy" {
		s.cfg.Logger.Warn("worker reports unhealthy", "endpoint", vars["endpointId"], "worker", vars["workerId"], "check", q.Get("check"), "reason", q.Get("reason"))
	}
	s.cfg.Queue.Ping(vars["endpointId"], vars["workerId"], ids)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// Health is an endpoint's /health counts: the queue's, with the runtime's
// container states (the series' sampler reads it).
func (s *Server) Health(endpointID string) queue.Health { return s.health(endpointID) }

func (s *Server) health(endpointID string) queue.Health {
	h := s.cfg.Queue.Health(endpointID)
	if s.cfg.Workers != nil {
		c := s.cfg.Workers(endpointID)
		h.Workers.Initializing += c.Initializing
		h.Workers.Ready += c.Ready
		h.Workers.Throttled += c.Throttled
		h.Workers.Unhealthy += c.Unhealthy
	}
	if s.cfg.WorkerInfo != nil {
		// Load-balancing workers never talk to the queue: their idle and
		// running counts are the runtime's (in-flight requests).
		if e, err := s.endpoint(endpointID); err == nil && e.LoadBalancer() {
			for _, wi := range s.cfg.WorkerInfo(endpointID) {
				switch wi.State {
				case "idle":
					h.Workers.Idle++
				case "running", "draining":
					h.Workers.Running++
				}
			}
		}
	}
	return h
}
