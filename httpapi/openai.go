package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/httpapi/internal/httpx"
	"berth/queue"
	"berth/store"
)

// The OpenAI-compatible route of a queue endpoint:
// POST|GET /v2/{endpointId}/openai/v1/<route> becomes a job whose input is
// {"openai_route": "/v1/<route>", "openai_input": <request body>}, the shape
// RunPod sends and worker-vllm reads. The reply is the worker's output as the
// HTTP body, or, for a body with "stream": true, the stream chunks the
// worker yields relayed as text/event-stream.

// openaiJobHeader names the job behind an OpenAI request (a Berth
// extension: the job can be looked up with /status while it runs).
const openaiJobHeader = "X-Berth-Job-Id"

// openaiWait bounds one wait for the job; the handler waits again until the
// job finishes or the client goes (the job's own timeouts end it).
const openaiWait = 5 * time.Minute

// openaiErr answers with OpenAI's error shape, which OpenAI clients parse.
func openaiErr(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

// openaiRoutes mounts the common OpenAI routes by name (documented one by
// one) and a prefix route for anything else under /openai/v1/.
func (s *Server) openaiRoutes(v2 *mux.Router, job func(string, http.HandlerFunc) http.Handler) {
	h := job("openai", s.openai)
	for _, r := range []string{"chat/completions", "completions", "embeddings", "responses"} {
		v2.Handle("/openai/v1/"+r, h).Methods(http.MethodPost)
	}
	v2.Handle("/openai/v1/models", h).Methods(http.MethodGet)
	v2.PathPrefix("/openai/v1/").Handler(h).Methods(http.MethodPost, http.MethodGet)
}

func (s *Server) openai(w http.ResponseWriter, r *http.Request) {
	ep := endpointOf(r)
	if ep.LoadBalancer() {
		openaiErr(w, http.StatusBadRequest, "invalid_request_error",
			"endpoint "+ep.ID+" is a LOAD_BALANCER endpoint: send requests to its workers at /lb/"+ep.ID+"/… instead")
		return
	}
	_, rest, _ := strings.Cut(r.URL.Path, "/openai/v1/")
	if rest == "" {
		openaiErr(w, http.StatusNotFound, "invalid_request_error", "no route given after /openai/v1/")
		return
	}
	route := "/v1/" + rest
	input := json.RawMessage("{}")
	stream := false
	if r.Method == http.MethodPost {
		b, err := readLimited(r, maxRunsyncBody)
		if err != nil {
			code, msg := http.StatusBadRequest, "read request body: "+err.Error()
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				code, msg = http.StatusRequestEntityTooLarge, "request body larger than the 20 MB limit"
			}
			openaiErr(w, code, "invalid_request_error", msg)
			return
		}
		b = bytes.TrimSpace(b)
		var body struct {
			Stream json.RawMessage `json:"stream"`
		}
		if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &body) != nil {
			openaiErr(w, http.StatusBadRequest, "invalid_request_error", "request body must be a JSON object")
			return
		}
		if !isNull(body.Stream) && json.Unmarshal(body.Stream, &stream) != nil {
			openaiErr(w, http.StatusBadRequest, "invalid_request_error", "stream must be a boolean")
			return
		}
		input = b
	}
	job, _ := json.Marshal(map[string]json.RawMessage{"openai_route": mustJSON(route), "openai_input": input})
	res, err := s.cfg.Queue.Submit(queue.SubmitRequest{EndpointID: ep.ID, Input: job, Sync: true,
		ExecutionTimeout: time.Duration(ep.ExecutionTimeoutMs) * time.Millisecond, TTL: queue.DefaultTTL})
	if err != nil {
		s.cfg.Logger.Error("openai: submit", "endpoint", ep.ID, "err", err)
		openaiErr(w, httpx.FailureCode(w, err), "server_error", "submit job: "+err.Error())
		return
	}
	w.Header().Set(openaiJobHeader, res.ID)
	// A client that goes away cancels the job: nobody could read its result.
	defer func() {
		if r.Context().Err() != nil {
			if _, err := s.cfg.Queue.Cancel(ep.ID, res.ID); err != nil && !errors.Is(err, queue.ErrNotFound) {
				s.cfg.Logger.Warn("openai: cancel after disconnect", "job", res.ID, "err", err)
			}
		}
	}()
	if stream {
		s.openaiStream(w, r, ep.ID, res.ID)
		return
	}
	s.openaiOnce(w, r, ep.ID, res.ID)
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func readLimited(r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, limit))
	return buf.Bytes(), err
}

// openaiOnce waits for the job and answers its output.
func (s *Server) openaiOnce(w http.ResponseWriter, r *http.Request, ep, id string) {
	var v queue.StatusResponse
	for {
		var err error
		v, err = s.cfg.Queue.Wait(r.Context(), ep, id, openaiWait)
		if err != nil {
			openaiErr(w, http.StatusInternalServerError, "server_error", "job "+id+": "+err.Error())
			return
		}
		if v.Status.Terminal() || r.Context().Err() != nil {
			break
		}
	}
	if r.Context().Err() != nil {
		return
	}
	if v.Status != store.Completed {
		jobFailed(w, v.Status, v.Error)
		return
	}
	out := v.Output
	if isNull(out) || string(out) == "[]" {
		// A streaming worker without an aggregated result: its chunks are
		// the output.
		sr, err := s.cfg.Queue.Stream(r.Context(), ep, id, 0)
		if err == nil {
			var outs []json.RawMessage
			for _, c := range sr.Stream {
				outs = append(outs, chunkOutput(c))
			}
			out = mustJSON(outs)
		}
	}
	writeOpenAIOutput(w, unwrapOne(out))
}

// jobFailed answers a job that did not complete the way an OpenAI client
// expects a server-side failure.
func jobFailed(w http.ResponseWriter, st store.JobStatus, errText *string) {
	msg := "the worker failed"
	if errText != nil {
		msg += ": " + *errText
	}
	switch st {
	case store.TimedOut:
		openaiErr(w, http.StatusGatewayTimeout, "timeout", "the job exceeded its execution timeout")
	case store.Cancelled:
		openaiErr(w, http.StatusServiceUnavailable, "server_error", "the job was cancelled")
	default:
		openaiErr(w, http.StatusInternalServerError, "server_error", msg)
	}
}

// unwrapOne takes the one element of a one-element array: a generator
// handler with return_aggregate_stream (worker-vllm) reports [response].
func unwrapOne(out json.RawMessage) json.RawMessage {
	var arr []json.RawMessage
	if len(out) > 0 && out[0] == '[' && json.Unmarshal(out, &arr) == nil && len(arr) == 1 {
		return arr[0]
	}
	return out
}

// chunkOutput is a stream chunk's output ({"output": v} → v).
func chunkOutput(c json.RawMessage) json.RawMessage {
	var m struct {
		Output json.RawMessage `json:"output"`
	}
	if json.Unmarshal(c, &m) != nil {
		return c
	}
	return m.Output
}

// errorStatus reads an error reply of an OpenAI server out of a worker's
// output: vLLM's {"object": "error", "message", "type", "code": 400} or
// OpenAI's {"error": {…, "code": 400}}. It returns the HTTP status and the
// body in OpenAI's shape, or ok false for a normal output.
func errorStatus(out json.RawMessage) (code int, body json.RawMessage, ok bool) {
	if len(out) == 0 || out[0] != '{' {
		return 0, nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(out, &m) != nil {
		return 0, nil, false
	}
	statusOf := func(raw json.RawMessage) int {
		var n int
		if json.Unmarshal(raw, &n) == nil && n >= 400 && n <= 599 {
			return n
		}
		return http.StatusInternalServerError
	}
	if string(m["object"]) == `"error"` {
		inner := map[string]json.RawMessage{}
		for _, k := range []string{"message", "type", "param", "code"} {
			if v, ok := m[k]; ok {
				inner[k] = v
			}
		}
		return statusOf(m["code"]), mustJSON(map[string]any{"error": inner}), true
	}
	e, has := m["error"]
	if !has || isNull(e) {
		return 0, nil, false
	}
	if e[0] == '{' {
		var inner map[string]json.RawMessage
		json.Unmarshal(e, &inner)
		return statusOf(inner["code"]), out, true
	}
	var msg string
	if json.Unmarshal(e, &msg) != nil {
		msg = string(e)
	}
	return http.StatusInternalServerError, mustJSON(map[string]any{"error": map[string]any{"message": msg, "type": "server_error", "param": nil, "code": nil}}), true
}

// writeOpenAIOutput answers a completed job's output as the HTTP body.
func writeOpenAIOutput(w http.ResponseWriter, out json.RawMessage) {
	if code, body, ok := errorStatus(out); ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		w.Write(body)
		return
	}
	var str string
	if len(out) > 0 && out[0] == '"' && json.Unmarshal(out, &str) == nil {
		// A handler that returned the body as text.
		ct := "text/plain; charset=utf-8"
		if json.Valid([]byte(str)) {
			ct = "application/json"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(str))
		return
	}
	if isNull(out) {
		out = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

// sseText turns one chunk's output into event-stream text: a string is
// already SSE (worker-vllm's raw OpenAI output, several events batched per
// chunk); an array of strings is joined; anything else is one data event.
func sseText(out json.RawMessage) string {
	var str string
	if len(out) > 0 && out[0] == '"' && json.Unmarshal(out, &str) == nil {
		return str
	}
	var strs []string
	if len(out) > 0 && out[0] == '[' && json.Unmarshal(out, &strs) == nil {
		return strings.Join(strs, "")
	}
	var objs []json.RawMessage
	if len(out) > 0 && out[0] == '[' && json.Unmarshal(out, &objs) == nil {
		// worker-vllm with RAW_OPENAI_OUTPUT=0: a batch of parsed events.
		var b strings.Builder
		for _, o := range objs {
			b.WriteString("data: " + string(o) + "\n\n")
		}
		return b.String()
	}
	return "data: " + string(out) + "\n\n"
}

// openaiStream relays the job's stream chunks as they arrive. The status
// line waits for the first chunk, so a worker's error reply (vLLM answers
// a bad request with an error object, not a stream) keeps its status code.
func (s *Server) openaiStream(w http.ResponseWriter, r *http.Request, ep, id string) {
	ctx := r.Context()
	flusher, _ := w.(http.Flusher)
	started, sawDone, sawChunk := false, false, false
	start := func() {
		if started {
			return
		}
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
	}
	for {
		sr, err := s.cfg.Queue.Stream(ctx, ep, id, openaiWait)
		if err != nil {
			if !started {
				openaiErr(w, http.StatusInternalServerError, "server_error", "job "+id+": "+err.Error())
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		for _, c := range sr.Stream {
			out := chunkOutput(c)
			sawChunk = true
			if !started {
				if code, body, ok := errorStatus(out); ok {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(code)
					w.Write(body)
					return
				}
			}
			start()
			text := sseText(out)
			sawDone = sawDone || strings.Contains(text, "data: [DONE]")
			if _, err := w.Write([]byte(text)); err != nil {
				return
			}
		}
		if started && flusher != nil {
			flusher.Flush()
		}
		if !sr.Status.Terminal() {
			continue
		}
		if sr.Status != store.Completed {
			if !started {
				jobFailed(w, sr.Status, sr.Error)
				return
			}
			msg := "the job ended " + string(sr.Status)
			if sr.Error != nil {
				msg += ": " + *sr.Error
			}
			w.Write([]byte("data: " + string(mustJSON(map[string]any{"error": map[string]any{"message": msg, "type": "server_error"}})) + "\n\n"))
			return
		}
		if !sawChunk {
			// A handler that returned its whole reply instead of streaming.
			v, err := s.cfg.Queue.Status(ep, id, 0)
			if err == nil {
				out := unwrapOne(v.Output)
				if code, body, ok := errorStatus(out); ok {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(code)
					w.Write(body)
					return
				}
				start()
				if !isNull(out) {
					text := sseText(out)
					sawDone = strings.Contains(text, "data: [DONE]")
					w.Write([]byte(text))
				}
			}
		}
		start()
		if !sawDone {
			w.Write([]byte("data: [DONE]\n\n"))
		}
		if flusher != nil {
			flusher.Flush()
		}
		return
	}
}
