// Command openaiworker is a test worker that behaves like worker-vllm on
// RunPod's OpenAI route: a job whose input is {"openai_route": "/v1/…",
// "openai_input": {…}} is answered as an OpenAI-compatible server would. It
// speaks the worker protocol through package berth/worker as a generator
// handler with return_aggregate_stream, like worker-vllm, so a non-streamed
// reply is the job output [response] and a streamed one is a series of
// chunks, each a string of raw SSE text ("data: {…}\n\n", batched), the
// last one ending with "data: [DONE]\n\n".
//
// Routes: /v1/models; /v1/chat/completions and /v1/completions, which
// "generate" by repeating the words of the last user message (or prompt) up
// to max_tokens (default: one pass over the words). Errors as vLLM answers
// them, an object {"object": "error", "message", "type", "param", "code"}:
// an unknown model (404), a missing messages/prompt (400), an unknown route
// (404). A last message of exactly "FAIL" makes the handler raise (the job
// FAILS); "EXIT" makes the process exit mid-job.
//
// Environment: OPENAI_SERVED_MODEL_NAME [berth-test-model],
// OPENAI_TOKEN_DELAY_MS [0] (pause before each token, stop-aware; a request
// field "berth_token_delay_ms" overrides it),
// OPENAI_BATCH_SIZE [1] (tokens per streamed chunk), RAW_OPENAI_OUTPUT [1]
// (0: chunks are lists of parsed event objects, worker-vllm's other mode),
// OPENAI_CONCURRENCY [8], and the RUNPOD_* variables read by package worker.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"berth/worker"
)

var (
	model     = envOr("OPENAI_SERVED_MODEL_NAME", "berth-test-model")
	delay     = time.Duration(envInt("OPENAI_TOKEN_DELAY_MS", 0)) * time.Millisecond
	batchSize = max(envInt("OPENAI_BATCH_SIZE", 1), 1)
	raw       = os.Getenv("RAW_OPENAI_OUTPUT") != "0"
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return n
	}
	return def
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := worker.Start(ctx, worker.Config{
		StreamHandler:         handle,
		ReturnAggregateStream: true,
		Concurrency:           max(envInt("OPENAI_CONCURRENCY", 8), 1),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "openaiworker:", err)
		os.Exit(1)
	}
}

type jobInput struct {
	Route string          `json:"openai_route"`
	Input json.RawMessage `json:"openai_input"`
}

type request struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	MaxCompTokens *int            `json:"max_completion_tokens"`
	Stream        bool            `json:"stream"`
	DelayMS       *int            `json:"berth_token_delay_ms"` // overrides OPENAI_TOKEN_DELAY_MS
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// vllmError is vLLM's ErrorResponse.
func vllmError(code int, typ, msg string) map[string]any {
	return map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": code}
}

func handle(ctx context.Context, job *worker.Job, yield func(any) error) error {
	var in jobInput
	if err := json.Unmarshal(job.Input, &in); err != nil || in.Route == "" {
		return yield(map[string]any{"error": "openaiworker serves only openai_route jobs"})
	}
	switch in.Route {
	case "/v1/models":
		return yield(map[string]any{"object": "list", "data": []any{
			map[string]any{"id": model, "object": "model", "created": 1700000000, "owned_by": "berth", "root": model},
		}})
	case "/v1/chat/completions", "/v1/completions":
	default:
		return yield(vllmError(404, "NotFoundError", "route "+in.Route+" is not served"))
	}
	var req request
	if err := json.Unmarshal(in.Input, &req); err != nil {
		return yield(vllmError(400, "BadRequestError", "invalid request: "+err.Error()))
	}
	if req.Model != model {
		return yield(vllmError(404, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model)))
	}
	chat := in.Route == "/v1/chat/completions"
	text, err := promptText(chat, req)
	if err != nil {
		return yield(vllmError(400, "BadRequestError", err.Error()))
	}
	switch text {
	case "FAIL":
		return errors.New("the engine failed on purpose")
	case "EXIT":
		os.Exit(3)
	}
	words := strings.Fields(text)
	if len(words) == 0 {
		words = []string{"…"}
	}
	n := len(words)
	for _, p := range []*int{req.MaxTokens, req.MaxCompTokens} {
		if p != nil && *p > 0 {
			n = *p
		}
	}
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = words[i%len(words)]
		if i > 0 {
			tokens[i] = " " + tokens[i]
		}
	}
	delay := delay
	if req.DelayMS != nil {
		delay = time.Duration(*req.DelayMS) * time.Millisecond
	}
	id := "cmpl-" + job.ID
	usage := map[string]any{"prompt_tokens": len(words), "completion_tokens": n, "total_tokens": len(words) + n}
	if !req.Stream {
		for range tokens {
			if err := sleep(ctx, delay); err != nil {
				return err
			}
		}
		full := strings.Join(tokens, "")
		if chat {
			return yield(map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
				"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": full}, "finish_reason": "length", "logprobs": nil}},
				"usage":   usage})
		}
		return yield(map[string]any{"id": id, "object": "text_completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "text": full, "finish_reason": "length", "logprobs": nil}}, "usage": usage})
	}

	// Streaming: batches of SSE events, as worker-vllm yields them.
	var batch []string
	flush := func(force bool) error {
		if len(batch) == 0 || (!force && len(batch) < batchSize) {
			return nil
		}
		var out any
		if raw {
			out = strings.Join(batch, "")
		} else {
			objs := make([]json.RawMessage, 0, len(batch))
			for _, ev := range batch {
				if s := strings.TrimSuffix(strings.TrimPrefix(ev, "data: "), "\n\n"); s != "[DONE]" {
					objs = append(objs, json.RawMessage(s))
				}
			}
			out = objs
		}
		batch = batch[:0]
		return yield(out)
	}
	event := func(delta map[string]any, text string, finish any) string {
		choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
		obj := "text_completion"
		if chat {
			choice["delta"], obj = delta, "chat.completion.chunk"
		} else {
			choice["text"] = text
		}
		b, _ := json.Marshal(map[string]any{"id": id, "object": obj, "created": time.Now().Unix(), "model": model, "choices": []any{choice}})
		return "data: " + string(b) + "\n\n"
	}
	if chat {
		batch = append(batch, event(map[string]any{"role": "assistant", "content": ""}, "", nil))
	}
	for _, tok := range tokens {
		if err := sleep(ctx, delay); err != nil {
			return err
		}
		batch = append(batch, event(map[string]any{"content": tok}, tok, nil))
		if err := flush(false); err != nil {
			return err
		}
	}
	batch = append(batch, event(map[string]any{}, "", "length"))
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		obj := "text_completion"
		if chat {
			obj = "chat.completion.chunk"
		}
		b, _ := json.Marshal(map[string]any{"id": id, "object": obj, "created": time.Now().Unix(), "model": model, "choices": []any{}, "usage": usage})
		batch = append(batch, "data: "+string(b)+"\n\n")
	}
	batch = append(batch, "data: [DONE]\n\n")
	return flush(true)
}

// promptText is the last user message (chat) or the prompt (completions).
func promptText(chat bool, req request) (string, error) {
	if !chat {
		var s string
		if json.Unmarshal(req.Prompt, &s) == nil {
			return s, nil
		}
		var ss []string
		if json.Unmarshal(req.Prompt, &ss) == nil && len(ss) > 0 {
			return ss[0], nil
		}
		return "", errors.New("prompt is required")
	}
	if len(req.Messages) == 0 {
		return "", errors.New("messages is required")
	}
	m := req.Messages[len(req.Messages)-1]
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) != nil {
		return "", errors.New("messages: content must be a string or a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
