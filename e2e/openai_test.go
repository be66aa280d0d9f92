package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"berth/internal/dockertest"
)

const openaiWorker = "berth/testdata/openaiworker"

// openaiClient is the official OpenAI Go client pointed at an endpoint's
// OpenAI route: the base URL is the only change a user makes.
func openaiClient(s *stack, endpointID string) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(s.base+"/v2/"+endpointID+"/openai/v1"),
		option.WithAPIKey(apiKey),
		option.WithMaxRetries(0),
	)
}

// TestOpenAIRouteWithOpenAIClient runs a worker-vllm-like worker in a real
// container and talks to it through the OpenAI route with openai-go: model
// list, chat completions, streamed chat completions (chunks arrive while
// the job still runs), errors with their status codes, and a client that
// goes away cancelling its job.
func TestOpenAIRouteWithOpenAIClient(t *testing.T) {
	s := newStack(t)
	image := dockertest.BuildGoImage(t, openaiWorker)
	ep := s.endpoint(image, map[string]string{"OPENAI_SERVED_MODEL_NAME": "berth/test-llm"}, nil)
	client := openaiClient(s, ep.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The first request scales the endpoint from zero.
	models, err := client.Models.List(ctx)
	if err != nil {
		t.Fatalf("models: %v", err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "berth/test-llm" {
		t.Fatalf("models %+v", models.Data)
	}

	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "berth/test-llm",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello from berth")},
		MaxTokens: openai.Int(5),
	})
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if len(chat.Choices) != 1 || chat.Choices[0].Message.Content != "hello from berth hello from" || chat.Usage.CompletionTokens != 5 {
		t.Errorf("chat reply %+v", chat)
	}

	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:  "berth/test-llm",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("one two")},
	})
	if err != nil || len(comp.Choices) != 1 || comp.Choices[0].Text != "one two" {
		t.Errorf("completion %+v, %v", comp, err)
	}

	// Streaming: 12 tokens 150 ms apart; the first arrives while the job
	// is still running, and the stream ends cleanly.
	var resp *http.Response
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "berth/test-llm",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a b c")},
		MaxTokens:     openai.Int(12),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithJSONSet("berth_token_delay_ms", 150), option.WithResponseInto(&resp))
	var text strings.Builder
	chunks, firstWhileRunning := 0, false
	var usage int64
	for stream.Next() {
		c := stream.Current()
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			if text.Len() == 0 {
				var st struct{ Status string }
				s.call("GET", "/v2/"+ep.ID+"/status/"+resp.Header.Get("X-Berth-Job-Id"), nil, 200, &st)
				firstWhileRunning = st.Status == "IN_PROGRESS"
			}
			text.WriteString(c.Choices[0].Delta.Content)
		}
		if c.Usage.CompletionTokens > 0 {
			usage = c.Usage.CompletionTokens
		}
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if got := text.String(); got != "a b c a b c a b c a b c" {
		t.Errorf("streamed text %q", got)
	}
	if chunks < 14 || usage != 12 { // role, 12 tokens, finish, usage
		t.Errorf("%d chunks, usage %d", chunks, usage)
	}
	if !firstWhileRunning {
		t.Errorf("the first token reached the client only after the job finished: not streamed")
	}

	// Errors keep the status an OpenAI client expects.
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "no-such-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var aerr *openai.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != 404 || !strings.Contains(aerr.Message, "does not exist") {
		t.Errorf("unknown model: %v", err)
	}
	bad := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "no-such-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	for bad.Next() {
	}
	if !errors.As(bad.Err(), &aerr) || aerr.StatusCode != 404 {
		t.Errorf("unknown model, streamed: %v", bad.Err())
	}
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "berth/test-llm", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("FAIL")}})
	if !errors.As(err, &aerr) || aerr.StatusCode != 500 || !strings.Contains(aerr.Message, "failed on purpose") {
		t.Errorf("failing worker: %v", err)
	}

	// The client goes away mid-stream: its job is cancelled.
	cctx, ccancel := context.WithCancel(ctx)
	long := client.Chat.Completions.NewStreaming(cctx, openai.ChatCompletionNewParams{
		Model: "berth/test-llm", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go on")},
		MaxTokens: openai.Int(100000)}, option.WithJSONSet("berth_token_delay_ms", 20), option.WithResponseInto(&resp))
	if !long.Next() {
		t.Fatalf("long stream: %v", long.Err())
	}
	jobID := resp.Header.Get("X-Berth-Job-Id")
	ccancel()
	long.Close()
	s.eventually("the abandoned job is cancelled", func() bool {
		var st struct{ Status string }
		s.call("GET", "/v2/"+ep.ID+"/status/"+jobID, nil, 200, &st)
		return st.Status == "CANCELLED"
	})
}
