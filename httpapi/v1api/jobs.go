package v1api

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"berth/mgmt"
	"berth/queue"
	"berth/store"
)

// Read-only views of an endpoint's jobs (Berth extensions, for the
// dashboard and for scripts): the retained jobs with their input and
// output, one job with the stream chunks not yet read, and the queue with
// the age of its oldest job. Nothing here changes a job or drains a stream.

const maxJobList = 1000

var jobStatuses = []store.JobStatus{store.InQueue, store.InProgress, store.Completed, store.Failed, store.Cancelled, store.TimedOut}

// parseJobFilter reads status (repeated or comma-joined) and limit.
func parseJobFilter(r *http.Request) (queue.JobFilter, error) {
	var f queue.JobFilter
	q := r.URL.Query()
	for _, v := range q["status"] {
		for _, st := range strings.Split(v, ",") {
			st = strings.TrimSpace(st)
			if st == "" {
				continue
			}
			js := store.JobStatus(strings.ToUpper(st))
			if !slices.Contains(jobStatuses, js) {
				return f, bad("status must be one of IN_QUEUE, IN_PROGRESS, COMPLETED, FAILED, CANCELLED, TIMED_OUT, got %q", st)
			}
			f.Statuses = append(f.Statuses, js)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxJobList {
			return f, bad("limit must be an integer from 1 to %d, got %q", maxJobList, v)
		}
		f.Limit = n
	}
	return f, nil
}

// listJobs is GET /v1/endpoints/{endpointId}/jobs.
func (a *API) listJobs(w http.ResponseWriter, r *http.Request) {
	f, err := parseJobFilter(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	f.MaxBytes = a.cfg.JobListBytes
	e, ok := a.endpoint(w, r, mux.Vars(r)["endpointId"])
	if !ok {
		return
	}
	list, damaged := a.cfg.Queue.Jobs(e.ID, f)
	if damaged > 0 {
		// The list stays whole: the jobs whose stored record is damaged
		// are left out, and said to be (each was logged with its id).
		w.Header().Set(DamagedHeader, strconv.Itoa(damaged))
	}
	writeJSON(w, http.StatusOK, list)
}

// DamagedHeader on a job list counts the endpoint's jobs left out because
// their stored record is damaged ('berth check' names them).
const DamagedHeader = "X-Berth-Damaged-Jobs"

// getJob is GET /v1/endpoints/{endpointId}/jobs/{jobId}.
func (a *API) getJob(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	e, ok := a.endpoint(w, r, vars["endpointId"])
	if !ok {
		return
	}
	v, err := a.cfg.Queue.Job(e.ID, vars["jobId"])
	if errors.Is(err, queue.ErrNotFound) {
		writeErr(w, http.StatusNotFound, "job "+mgmt.ShortID(vars["jobId"])+" not found")
		return
	}
	if err != nil {
		a.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// queueView is GET /v1/endpoints/{endpointId}/queue: /health's job counts
// plus the age of the job at the head of the queue.
type queueView struct {
	queue.QueueView
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Retried   int `json:"retried"`
}

func (a *API) getQueue(w http.ResponseWriter, r *http.Request) {
	e, ok := a.endpoint(w, r, mux.Vars(r)["endpointId"])
	if !ok {
		return
	}
	h := a.cfg.Queue.Health(e.ID)
	writeJSON(w, http.StatusOK, queueView{QueueView: a.cfg.Queue.Queue(e.ID), Completed: h.Jobs.Completed, Failed: h.Jobs.Failed, Retried: h.Jobs.Retried})
}
