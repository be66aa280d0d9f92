package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"berth/internal/apitest"
)

// takeWait takes the next job, polling until one is there, and returns
// its id and input.
func (w *testWorker) takeWait() (string, json.RawMessage) {
	w.e.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		code, out, err := w.req("GET", "/job-take/"+w.id+"?job_in_progress=0", "")
		if err != nil {
			w.e.T.Errorf("job-take: %v", err)
			return "", nil
		}
		if code == 200 {
			var j struct {
				ID    string
				Input json.RawMessage
			}
			json.Unmarshal(out, &j)
			return j.ID, j.Input
		}
	}
	w.e.T.Errorf("no job within 30 s")
	return "", nil
}

// answerOpenAI runs a worker in the background that takes one job, sends
// it on the returned channel, and reports done (a job-done body).
func answerOpenAI(w *testWorker, done string) <-chan json.RawMessage {
	ch := make(chan json.RawMessage, 1)
	go func() {
		id, in := w.takeWait()
		if id == "" {
			close(ch)
			return
		}
		ch <- in
		if code, out, err := w.req("POST", "/job-done/"+w.id+"/"+id+"?isStream=true", done); err != nil || code != 200 {
			w.e.T.Errorf("job-done: %d %v %s", code, err, out)
		}
	}()
	return ch
}

// openaiErrBody is OpenAI's error shape.
type openaiErrBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

func TestOpenAIRouteJobAndReplies(t *testing.T) {
	e := newValidatingServer(t)
	tpl := e.NewTemplate("t", "alpine:3", nil)
	ep := e.NewEndpoint(tpl.ID, nil)
	w := e.newWorker(ep.ID)
	base := "/v2/" + ep.ID + "/openai/v1"
	chat := J{"model": "m", "messages": []J{{"role": "user", "content": "hi"}}}

	// The job input is RunPod's shape; a one-element output is unwrapped.
	taken := answerOpenAI(w, `{"output": [{"object": "chat.completion", "id": "c1"}]}`)
	var got map[string]any
	e.Must(200, "POST", base+"/chat/completions", chat, &got)
	var in struct {
		Route string         `json:"openai_route"`
		Input map[string]any `json:"openai_input"`
	}
	json.Unmarshal(<-taken, &in)
	if in.Route != "/v1/chat/completions" || in.Input["model"] != "m" || in.Input["messages"] == nil {
		t.Errorf("job input %+v", in)
	}
	if got["object"] != "chat.completion" || got["id"] != "c1" {
		t.Errorf("reply %v", got)
	}

	// GET: openai_input is {}; any route under /openai/v1/ is passed on.
	taken = answerOpenAI(w, `{"output": [{"object": "list", "data": []}]}`)
	e.Must(200, "GET", base+"/models", nil, &got)
	in.Input = nil
	json.Unmarshal(<-taken, &in)
	if in.Route != "/v1/models" || in.Input == nil || len(in.Input) != 0 || got["object"] != "list" {
		t.Errorf("models: input %+v, reply %v", in, got)
	}
	for _, r := range []string{"/completions", "/embeddings", "/responses"} {
		taken = answerOpenAI(w, `{"output": {"object": "x"}}`)
		e.Must(200, "POST", base+r, J{"model": "m"}, &got)
		json.Unmarshal(<-taken, &in)
		if in.Route != "/v1"+r || got["object"] != "x" {
			t.Errorf("%s: input %+v, reply %v", r, in, got)
		}
	}
	// A route not named in the document goes through the prefix route
	// (not validated: the document cannot list every path).
	raw := httptest.NewServer(e.API.Handler())
	defer raw.Close()
	taken = answerOpenAI(w, `{"output": ["{\"ok\": true}"]}`)
	code, body := postRaw(t, raw.URL+base+"/audio/speech/extra", `{"input": "x"}`)
	json.Unmarshal(<-taken, &in)
	if code != 200 || in.Route != "/v1/audio/speech/extra" || strings.TrimSpace(body) != `{"ok": true}` {
		t.Errorf("deep route: %d %s, input %+v", code, body, in)
	}

	// The worker's error reply keeps its status, in OpenAI's error shape.
	for _, c := range []struct {
		output string
		code   int
		msg    string
	}{
		{`{"object": "error", "message": "The model x does not exist.", "type": "NotFoundError", "param": null, "code": 404}`, 404, "does not exist"},
		{`[{"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}]`, 400, "bad"},
		{`{"error": {"message": "slow down", "type": "rate_limit", "code": 429}}`, 429, "slow down"},
	} {
		answerOpenAI(w, `{"output": `+c.output+`}`)
		var eb openaiErrBody
		e.Must(c.code, "POST", base+"/chat/completions", chat, &eb)
		if !strings.Contains(eb.Error.Message, c.msg) || eb.Error.Type == "" {
			t.Errorf("%s → %+v", c.output, eb)
		}
	}
	// A failed job is a server error.
	answerOpenAI(w, `{"error": "{\"error_message\": \"engine died\"}"}`)
	var eb openaiErrBody
	e.Must(500, "POST", base+"/chat/completions", chat, &eb)
	if !strings.Contains(eb.Error.Message, "engine died") || eb.Error.Type != "server_error" {
		t.Errorf("failed job: %+v", eb)
	}

	// Bad input: nothing queued.
	for _, b := range []any{"[1]", J{"stream": "yes"}} {
		e.Must(400, "POST", base+"/chat/completions", b, &eb)
		if eb.Error.Message == "" {
			t.Errorf("%v: no message", b)
		}
	}
	e.Must(404, "POST", base+"/", J{}, &eb)
	e.Must(404, "GET", base+"/", nil, &eb)
	lb := e.NewEndpoint(tpl.ID, J{"type": "LOAD_BALANCER"})
	e.Must(400, "POST", "/v2/"+lb.ID+"/openai/v1/chat/completions", chat, &eb)
	if !strings.Contains(eb.Error.Message, "LOAD_BALANCER") {
		t.Errorf("LB endpoint: %+v", eb)
	}
	var h struct{ Jobs struct{ InQueue int } }
	e.Must(200, "GET", "/v2/"+ep.ID+"/health", nil, &h)
	if h.Jobs.InQueue != 0 {
		t.Errorf("%d jobs queued after refused requests", h.Jobs.InQueue)
	}
	if code, _ := e.CallWith("POST", base+"/chat/completions", chat, nil); code != 401 {
		t.Errorf("without a key: %d", code)
	}
}

func postRaw(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apitest.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestOpenAIRouteStreams checks that each chunk reaches the client before
// the worker sends the next, that [DONE] ends the stream, and that a
// client that goes away cancels the job.
func TestOpenAIRouteStreams(t *testing.T) {
	e := newValidatingServer(t)
	tpl := e.NewTemplate("t", "alpine:3", nil)
	ep := e.NewEndpoint(tpl.ID, nil)
	w := e.newWorker(ep.ID)
	raw := httptest.NewServer(e.API.Handler()) // the validator buffers replies
	defer raw.Close()
	url := raw.URL + "/v2/" + ep.ID + "/openai/v1/chat/completions"

	type result struct {
		res *http.Response
		err error
	}
	do := func(ctx context.Context) <-chan result {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"model": "m", "stream": true, "messages": []}`))
		req.Header.Set("Authorization", "Bearer "+apitest.Key)
		ch := make(chan result, 1)
		go func() { res, err := http.DefaultClient.Do(req); ch <- result{res, err} }()
		return ch
	}
	chunk := func(id, text string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"output": text})
		w.must(200, "POST", "/job-stream/"+w.id+"/"+id+"?isStream=true", string(b))
	}
	readEvent := func(r *bufio.Reader) string {
		t.Helper()
		var ev strings.Builder
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("read stream: %v (so far %q)", err, ev.String())
			}
			if line == "\n" {
				return ev.String()
			}
			ev.WriteString(line)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reply := do(ctx)
	id, _ := w.takeWait()
	chunk(id, "data: {\"n\": 1}\n\n")
	rs := <-reply
	if rs.err != nil {
		t.Fatal(rs.err)
	}
	defer rs.res.Body.Close()
	if ct := rs.res.Header.Get("Content-Type"); rs.res.StatusCode != 200 || ct != "text/event-stream" || rs.res.Header.Get("X-Berth-Job-Id") != id {
		t.Fatalf("stream reply %d %q %v", rs.res.StatusCode, ct, rs.res.Header)
	}
	r := bufio.NewReader(rs.res.Body)
	if ev := readEvent(r); ev != "data: {\"n\": 1}\n" {
		t.Errorf("first event %q", ev)
	}
	// The first event arrived while the worker has sent nothing else.
	chunk(id, "data: {\"n\": 2}\n\ndata: {\"n\": 3}\n\n")
	if a, b := readEvent(r), readEvent(r); a != "data: {\"n\": 2}\n" || b != "data: {\"n\": 3}\n" {
		t.Errorf("batched events %q %q", a, b)
	}
	chunk(id, "data: [DONE]\n\n")
	w.must(200, "POST", "/job-done/"+w.id+"/"+id+"?isStream=true", `{"output": []}`)
	if ev := readEvent(r); ev != "data: [DONE]\n" {
		t.Errorf("last event %q", ev)
	}
	if rest, _ := io.ReadAll(r); len(rest) != 0 {
		t.Errorf("after [DONE]: %q", rest)
	}

	// A worker that does not end with [DONE] gets one added; a worker
	// error before any chunk keeps its status.
	reply = do(ctx)
	id, _ = w.takeWait()
	chunk(id, "data: {\"n\": 1}\n\n")
	w.must(200, "POST", "/job-done/"+w.id+"/"+id+"?isStream=true", `{"output": []}`)
	rs = <-reply
	all, _ := io.ReadAll(rs.res.Body)
	rs.res.Body.Close()
	if string(all) != "data: {\"n\": 1}\n\ndata: [DONE]\n\n" {
		t.Errorf("stream without [DONE]: %q", all)
	}
	reply = do(ctx)
	id, _ = w.takeWait()
	b, _ := json.Marshal(map[string]any{"output": map[string]any{"object": "error", "message": "no such model", "type": "NotFoundError", "code": 404}})
	w.must(200, "POST", "/job-stream/"+w.id+"/"+id+"?isStream=true", string(b))
	rs = <-reply
	all, _ = io.ReadAll(rs.res.Body)
	rs.res.Body.Close()
	if rs.res.StatusCode != 404 || !strings.Contains(string(all), "no such model") {
		t.Errorf("stream error: %d %s", rs.res.StatusCode, all)
	}

	// The client goes away mid-stream: the job is cancelled and the worker
	// told to stop.
	cctx, ccancel := context.WithCancel(ctx)
	reply = do(cctx)
	id, _ = w.takeWait()
	chunk(id, "data: {\"n\": 1}\n\n")
	rs = <-reply
	readEvent(bufio.NewReader(rs.res.Body))
	ccancel()
	rs.res.Body.Close()
	var st struct{ Status string }
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.Must(200, "GET", "/v2/"+ep.ID+"/status/"+id, nil, &st)
		if st.Status == "CANCELLED" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Status != "CANCELLED" {
		t.Fatalf("job after the client left: %s", st.Status)
	}
	var stop struct{ JobsToStop []string }
	json.Unmarshal(w.must(200, "GET", "/job-stop/"+w.id, ""), &stop)
	if len(stop.JobsToStop) != 1 || stop.JobsToStop[0] != id {
		t.Errorf("job-stop after the disconnect: %+v", stop)
	}
}
