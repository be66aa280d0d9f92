package v1api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/gorilla/mux"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// Berth's runtime extensions: GET /v1/gpus, container logs of workers and
// pods, and the runtime's status of an endpoint (GET /v1/endpoints…).

// listGPUs is GET /v1/gpus: every GPU with its holder ("" when free).
func (a *API) listGPUs(w http.ResponseWriter, r *http.Request) {
	var out []gpu.Status
	if a.cfg.GPUs != nil {
		out = a.cfg.GPUs()
	}
	if out == nil {
		out = []gpu.Status{}
	}
	writeJSON(w, http.StatusOK, out)
}

// logQuery is the query of the log routes.
type logQuery struct {
	follow bool
	tail   int
	jobID  string
}

func parseLogQuery(r *http.Request, withJob bool) (logQuery, error) {
	var lq logQuery
	var err error
	if lq.follow, err = queryBool(r, "follow"); err != nil {
		return lq, err
	}
	q := r.URL.Query()
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return lq, bad("tail must be a non-negative integer, got %q", v)
		}
		lq.tail = n
	}
	if q.Has("jobId") {
		if !withJob {
			return lq, bad("jobId applies to worker logs only")
		}
		if lq.jobID = q.Get("jobId"); lq.jobID == "" {
			return lq, bad("jobId must not be empty")
		}
	}
	return lq, nil
}

// workerLogs is GET /v1/endpoints/{endpointId}/workers/{workerId}/logs.
func (a *API) workerLogs(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	ep, wid := vars["endpointId"], vars["workerId"]
	lq, err := parseLogQuery(r, true)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if _, ok := a.endpoint(w, r, ep); !ok {
		return
	}
	if a.cfg.WorkerLogs == nil {
		writeErr(w, http.StatusServiceUnavailable, mgmt.ErrNoRuntime.Error())
		return
	}
	rc, err := a.cfg.WorkerLogs(r.Context(), ep, wid, lq.follow, lq.tail, lq.jobID)
	if errors.Is(err, mgmt.ErrNoSuchWorker) || errors.Is(err, store.ErrNotFound) {
		writeErr(w, http.StatusNotFound, "worker "+mgmt.ShortID(wid)+" of endpoint "+mgmt.ShortID(ep)+" not found: it has no container")
		return
	}
	a.sendLogs(w, r, rc, err, lq.follow)
}

// podLogs is GET /v1/pods/{podId}/logs.
func (a *API) podLogs(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["podId"]
	lq, err := parseLogQuery(r, false)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if _, err := a.cfg.Mgmt.GetPod(r.Context(), id); err != nil {
		a.fail(w, r, err)
		return
	}
	if a.cfg.PodLogs == nil {
		writeErr(w, http.StatusServiceUnavailable, mgmt.ErrNoRuntime.Error())
		return
	}
	rc, err := a.cfg.PodLogs(r.Context(), id, lq.follow, lq.tail)
	if errors.Is(err, mgmt.ErrNoSuchPod) || errors.Is(err, store.ErrNotFound) {
		writeErr(w, http.StatusNotFound, "pod "+id+" has no container")
		return
	}
	a.sendLogs(w, r, rc, err, lq.follow)
}

// sendLogs copies a container's log to the client as text. With follow
// every chunk is flushed as it comes; the copy ends when the log does or
// the client goes away (rc is closed then, so a blocked read returns).
func (a *API) sendLogs(w http.ResponseWriter, r *http.Request, rc io.ReadCloser, err error, follow bool) {
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		a.cfg.Logger.Warn("container logs", "path", r.URL.Path, "err", err)
		writeErr(w, http.StatusServiceUnavailable, "container runtime: "+err.Error())
		return
	}
	var once sync.Once
	closeRC := func() { once.Do(func() { rc.Close() }) }
	defer closeRC()
	stop := context.AfterFunc(r.Context(), closeRC)
	defer stop()

	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if follow {
		h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold the stream back
	}
	w.WriteHeader(http.StatusOK)
	rcw := http.NewResponseController(w)
	if follow {
		_ = rcw.Flush() // the client sees the answer before the first line
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := rc.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if follow {
				if rcw.Flush() != nil {
					return
				}
			}
		}
		if rerr != nil {
			if rerr != io.EOF && r.Context().Err() == nil {
				a.cfg.Logger.Warn("container logs ended early", "path", r.URL.Path, "err", rerr)
			}
			return
		}
	}
}

// endpointStatus is the runtime's status of an endpoint, nil without one.
func (a *API) endpointStatus(id string) any {
	if a.cfg.EndpointStatus == nil {
		return nil
	}
	return a.cfg.EndpointStatus(id)
}
