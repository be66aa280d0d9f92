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
	"berth/worker"
)

// The worker protocol of runpod-python (runpod-wire.md §1). Bodies of
// job-done and job-stream are raw JSON sent as form content: never parse
// them as a form.

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

// workerEnv registers a worker for a process outside Docker and returns the
// environment the runpod-python SDK needs, URL templates exactly as the SDK
// substitutes them (each already holds a '?', since the SDK appends '&…').
func (s *Server) workerEnv(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["endpointId"]
	if _, ok := s.mustEndpoint(w, r, id); !ok {
		return
	}
	reg, err := s.cfg.Queue.RegisterWorker(id, true)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host
	if v := r.URL.Query().Get("baseUrl"); v != "" {
		base = strings.TrimRight(v, "/")
	}
	writeJSON(w, http.StatusOK, WorkerEnv(base, id, reg.WorkerID, reg.Key, s.cfg.PingInterval.Milliseconds()))
}

// WorkerEnv is the RUNPOD_* environment of one worker.
func WorkerEnv(base, endpointID, workerID, key string, pingMs int64) map[string]string {
	return worker.PlatformEnv(base, endpointID, workerID, key, pingMs)
}
