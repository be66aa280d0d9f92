package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"berth/httpapi/internal/httpx"
	"berth/mgmt"
	"berth/queue"
	"berth/store"
)

// Payload limits of the specification (MB taken as MiB).
const (
	maxRunBody     = 10 << 20
	maxRunsyncBody = 20 << 20
)

func withValue(r *http.Request, k, v any) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), k, v))
}

// submission is the job submission body.
type submission struct {
	Input    json.RawMessage `json:"input"`
	Webhook  json.RawMessage `json:"webhook"`
	Policy   json.RawMessage `json:"policy"`
	S3Config json.RawMessage `json:"s3Config"`
}

type policy struct {
	ExecutionTimeout json.RawMessage `json:"executionTimeout"`
	TTL              json.RawMessage `json:"ttl"`
	LowPriority      json.RawMessage `json:"lowPriority"`
}

type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func bad(format string, a ...any) error { return badRequest{fmt.Sprintf(format, a...)} }

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// msField decodes an integer millisecond field within [min, max].
func msField(name string, raw json.RawMessage, min, max time.Duration) (time.Duration, error) {
	var n json.Number
	dec := json.NewDecoder(bytesReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return 0, bad("%s must be an integer number of milliseconds", name)
	}
	v, err := n.Int64()
	if err != nil {
		return 0, bad("%s must be an integer number of milliseconds", name)
	}
	d := time.Duration(v) * time.Millisecond
	if d < min || d > max {
		return 0, bad("%s must be between %d and %d ms, got %d", name, min.Milliseconds(), max.Milliseconds(), v)
	}
	return d, nil
}

// parseSubmission validates a /run or /runsync body.
func parseSubmission(body []byte, ep string, defExec time.Duration, sync bool) (queue.SubmitRequest, error) {
	var sub submission
	if err := json.Unmarshal(body, &sub); err != nil {
		return queue.SubmitRequest{}, bad("request body must be a JSON object with an input field: %v", err)
	}
	if isNull(sub.Input) {
		return queue.SubmitRequest{}, bad("input is required")
	}
	if sub.Input[0] != '{' {
		return queue.SubmitRequest{}, bad("input must be a JSON object")
	}
	req := queue.SubmitRequest{EndpointID: ep, Input: sub.Input, Sync: sync, ExecutionTimeout: defExec, TTL: queue.DefaultTTL}
	if !isNull(sub.Webhook) {
		var u string
		if json.Unmarshal(sub.Webhook, &u) != nil {
			return req, bad("webhook must be a URL string")
		}
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return req, bad("webhook must be an http or https URL, got %q", u)
		}
		req.Webhook = u
	}
	if !isNull(sub.Policy) {
		var p policy
		if sub.Policy[0] != '{' || json.Unmarshal(sub.Policy, &p) != nil {
			return req, bad("policy must be a JSON object")
		}
		var err error
		if !isNull(p.ExecutionTimeout) {
			if req.ExecutionTimeout, err = msField("policy.executionTimeout", p.ExecutionTimeout, queue.MinExecutionTimeout, queue.MaxExecutionTimeout); err != nil {
				return req, err
			}
		}
		if !isNull(p.TTL) {
			if req.TTL, err = msField("policy.ttl", p.TTL, queue.MinTTL, queue.MaxTTL); err != nil {
				return req, err
			}
		}
		if !isNull(p.LowPriority) {
			if json.Unmarshal(p.LowPriority, &req.LowPriority) != nil {
				return req, bad("policy.lowPriority must be a boolean")
			}
		}
		req.Policy = sub.Policy
	}
	if !isNull(sub.S3Config) {
		var m map[string]json.RawMessage
		if sub.S3Config[0] != '{' || json.Unmarshal(sub.S3Config, &m) != nil {
			return req, bad("s3Config must be a JSON object")
		}
		for k, v := range m {
			var str string
			if !isNull(v) && json.Unmarshal(v, &str) != nil {
				return req, bad("s3Config.%s must be a string", k)
			}
		}
		req.S3Config = sub.S3Config
	}
	return req, nil
}

// readBody reads at most limit bytes, answering 413 past it (and 408 for a
// body sent too slowly, 400 for a failed read).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	b, err := httpx.ReadBody(w, r, limit)
	if err != nil {
		writeErr(w, r, err.Code, err.Msg)
		return nil, false
	}
	return b, true
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request, sync bool) (queue.StatusResponse, bool) {
	limit := int64(maxRunBody)
	if sync {
		limit = maxRunsyncBody
	}
	body, ok := readBody(w, r, limit)
	if !ok {
		return queue.StatusResponse{}, false
	}
	ep := endpointOf(r)
	if ep.LoadBalancer() {
		// No worker of a load-balancing endpoint takes jobs: it would wait forever.
		writeErr(w, r, http.StatusBadRequest, "endpoint "+ep.ID+" is a LOAD_BALANCER endpoint: it has no queue; send requests to its workers at /lb/"+ep.ID+"/…")
		return queue.StatusResponse{}, false
	}
	defExec := time.Duration(ep.ExecutionTimeoutMs) * time.Millisecond
	req, err := parseSubmission(body, ep.ID, defExec, sync)
	if err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return queue.StatusResponse{}, false
	}
	if req.Webhook != "" && s.cfg.WebhookURL != nil {
		if err := s.cfg.WebhookURL(req.Webhook); err != nil {
			writeErr(w, r, http.StatusBadRequest, "webhook: "+err.Error())
			return queue.StatusResponse{}, false
		}
	}
	res, err := s.cfg.Queue.Submit(req)
	if err != nil {
		s.internal(w, r, err)
		return queue.StatusResponse{}, false
	}
	return res, true
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	res, ok := s.submit(w, r, false)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, idStatus{res.ID, res.Status})
}

// idStatus is the {id, status} reply of run, cancel, retry and an elapsed
// runsync wait.
type idStatus struct {
	ID     string          `json:"id"`
	Status store.JobStatus `json:"status"`
}

// waitParam reads ?wait in ms within [min, max], default def.
func waitParam(r *http.Request, def, min, max time.Duration) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, bad("wait must be an integer number of milliseconds")
	}
	d := time.Duration(n) * time.Millisecond
	if d < min || d > max {
		return 0, bad("wait must be between %d and %d ms, got %d", min.Milliseconds(), max.Milliseconds(), n)
	}
	return d, nil
}

func (s *Server) runsync(w http.ResponseWriter, r *http.Request) {
	wait, err := waitParam(r, 90*time.Second, time.Second, 300*time.Second)
	if err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	res, ok := s.submit(w, r, true)
	if !ok {
		return
	}
	s.waitAndReply(w, r, endpointOf(r).ID, res.ID, wait)
}

func (s *Server) waitAndReply(w http.ResponseWriter, r *http.Request, ep, id string, wait time.Duration) {
	v, err := s.cfg.Queue.Wait(r.Context(), ep, id, wait)
	if errors.Is(err, queue.ErrNotFound) {
		writeErr(w, r, http.StatusNotFound, "job "+mgmt.ShortID(id)+" not found")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if !v.Status.Terminal() {
		// The wait elapsed: the id and the non-terminal status, as RunPod.
		writeJSON(w, http.StatusOK, idStatus{v.ID, v.Status})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) jobErr(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, queue.ErrNotFound) {
		writeErr(w, r, http.StatusNotFound, "job "+mgmt.ShortID(mux.Vars(r)["jobId"])+" not found")
		return
	}
	s.internal(w, r, err)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	var ttl time.Duration
	if v := r.URL.Query().Get("ttl"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeErr(w, r, http.StatusBadRequest, "ttl must be an integer number of milliseconds")
			return
		}
		ttl = time.Duration(n) * time.Millisecond
		if ttl < queue.MinTTL || ttl > queue.MaxTTL {
			writeErr(w, r, http.StatusBadRequest, fmt.Sprintf("ttl must be between %d and %d ms, got %d", queue.MinTTL.Milliseconds(), queue.MaxTTL.Milliseconds(), n))
			return
		}
	}
	v, err := s.cfg.Queue.Status(endpointOf(r).ID, mux.Vars(r)["jobId"], ttl)
	if err != nil {
		s.jobErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) statusSync(w http.ResponseWriter, r *http.Request) {
	wait, err := waitParam(r, 90*time.Second, time.Second, 300*time.Second)
	if err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	v, err := s.cfg.Queue.Wait(r.Context(), endpointOf(r).ID, mux.Vars(r)["jobId"], wait)
	if err != nil {
		s.jobErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	wait, err := waitParam(r, s.cfg.StreamHold, 0, 300*time.Second)
	if err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return
	}
	v, err := s.cfg.Queue.Stream(r.Context(), endpointOf(r).ID, mux.Vars(r)["jobId"], wait)
	if err != nil {
		s.jobErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Queue.Cancel(endpointOf(r).ID, mux.Vars(r)["jobId"])
	if err != nil {
		s.jobErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, idStatus{v.ID, v.Status})
}

func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Queue.Retry(endpointOf(r).ID, mux.Vars(r)["jobId"])
	if errors.Is(err, queue.ErrNotRetryable) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"id": v.ID, "status": v.Status,
			"error": fmt.Sprintf("job %s is %s; only FAILED or TIMED_OUT jobs can be retried", v.ID, v.Status)})
		return
	}
	if err != nil {
		s.jobErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, idStatus{v.ID, v.Status})
}

func (s *Server) purge(w http.ResponseWriter, r *http.Request) {
	n, err := s.cfg.Queue.Purge(endpointOf(r).ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": n, "status": "completed"})
}

func (s *Server) healthRoute(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.health(endpointOf(r).ID))
}
