package graphqlapi

import (
	"berth/mgmt"
	"berth/store"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestToolDocumentsAreFarUnderTheLimits: every document runpod-python and
// runpodctl send (testdata), and the introspection query of GraphQL tools,
// is measured well under each limit (at most a quarter of it; depth within
// it), so the limits refuse only what no client of RunPod's API sends.
func TestToolDocumentsAreFarUnderTheLimits(t *testing.T) {
	shape, err := newSchemaShape(Schema)
	if err != nil {
		t.Fatal(err)
	}
	l := Limits{}.withDefaults()
	files, _ := filepath.Glob("testdata/*/*.graphql")
	if len(files) < 30 {
		t.Fatalf("only %d documents in testdata", len(files))
	}
	slot := regexp.MustCompile(`\{\{[a-zA-Z0-9_]+\}\}`)
	var most Cost
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc := slot.ReplaceAllString(string(b), "x")
		c, qerr := l.measure(shape, doc)
		if qerr != nil {
			t.Errorf("%s: refused: %s", f, qerr.Message)
			continue
		}
		if c.Fields*4 > l.Fields || c.Aliases*4 > l.Aliases || c.Mutations*4 > l.Mutations || c.FanOut*4 > l.FanOut || c.Depth > l.Depth {
			t.Errorf("%s: %+v is too close to the limits %+v", f, c, l)
		}
		most = Cost{max(most.Fields, c.Fields), max(most.Aliases, c.Aliases), max(most.Depth, c.Depth), max(most.Mutations, c.Mutations), max(most.FanOut, c.FanOut), most.Mutating || c.Mutating, nil}
	}
	t.Logf("the most any of %d tool documents asks: %+v; limits %+v", len(files), most, l)
}

// TestMeasureRefusesBeforeAnythingRuns: the hostile documents of the
// sweep, and fragment and nesting bombs, are refused by the limit they
// pass, in milliseconds.
func TestMeasureRefusesBeforeAnythingRuns(t *testing.T) {
	shape, err := newSchemaShape(Schema)
	if err != nil {
		t.Fatal(err)
	}
	l := Limits{}.withDefaults()
	repeat := func(n int, f func(i int) string) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(f(i))
			b.WriteByte(' ')
		}
		return b.String()
	}
	bomb := "query { ...F30 }\nfragment F0 on Query { __typename }\n"
	for i := 1; i <= 30; i++ {
		bomb += "fragment F" + itoa(i) + " on Query { ...F" + itoa(i-1) + " ...F" + itoa(i-1) + " }\n"
	}
	for _, tc := range []struct {
		name, doc, limit string
	}{
		{"10,000 __typename", "{ " + repeat(10000, func(int) string { return "__typename" }) + "}", "fields"},
		{"50,000 __typename", "{ " + repeat(50000, func(int) string { return "__typename" }) + "}", "tokens"},
		{"10,000 aliases", "{ " + repeat(10000, func(i int) string { return "a" + itoa(i) + ": myself { endpoints { id } }" }) + "}", "tokens"},
		{"1,000 aliases", "{ " + repeat(1000, func(i int) string { return "a" + itoa(i) + ": myself { endpoints { id } }" }) + "}", "fields"},
		{"150 aliases", "{ " + repeat(150, func(i int) string { return "a" + itoa(i) + ": myself { id }" }) + "}", "aliases"},
		{"20 saveTemplate", "mutation { " + repeat(20, func(i int) string {
			return "a" + itoa(i) + `: saveTemplate(input: {name: "t` + itoa(i) + `", imageName: "x:1"}) { id }`
		}) + "}", "mutations"},
		{"fan-out", "{ " + repeat(30, func(i int) string { return "a" + itoa(i) + ": myself { pods { runtime { ports { ip } } } }" }) + "}", "fanOut"},
		{"fragment bomb", bomb, "fields"},
		{"deep", "{" + strings.Repeat("myself{", 40) + "id" + strings.Repeat("}", 40) + "}", "depth"},
		{"deeper than the parser goes", "{" + strings.Repeat("a{", 5000) + "b" + strings.Repeat("}", 5000) + "}", "depth"},
	} {
		start := time.Now()
		_, qerr := l.measure(shape, tc.doc)
		took := time.Since(start)
		if qerr == nil || qerr.Extensions["limit"] != tc.limit {
			t.Errorf("%s: got %v, want refused by %s", tc.name, qerr, tc.limit)
			continue
		}
		if !strings.Contains(qerr.Message, "query too costly: "+tc.limit) {
			t.Errorf("%s: message %q does not name the limit", tc.name, qerr.Message)
		}
		if took > 2*time.Second {
			t.Errorf("%s: measured in %s", tc.name, took)
		}
		t.Logf("%s (%d bytes): %s in %s", tc.name, len(tc.doc), qerr.Message, took.Round(time.Microsecond))
	}
}

func itoa(i int) string {
	return strconv.Itoa(i)
}

// handlerOn is a Handler over a real store, with cfg's limits.
func handlerOn(t testing.TB, cfg Config) (*Handler, func(ctx context.Context, query string) (int, map[string]any)) {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg.Mgmt = mgmt.New(mgmt.Config{Store: db, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	do := func(ctx context.Context, query string) (int, map[string]any) {
		b, _ := json.Marshal(map[string]any{"query": query})
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/graphql", bytes.NewReader(b))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out map[string]any
		json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	return h, do
}

func firstError(out map[string]any) (string, map[string]any) {
	errs, _ := out["errors"].([]any)
	if len(errs) == 0 {
		return "", nil
	}
	e, _ := errs[0].(map[string]any)
	msg, _ := e["message"].(string)
	ext, _ := e["extensions"].(map[string]any)
	return msg, ext
}

// TestResolveBudgetStopsARequest: a document under every static limit whose
// lists hold more than the estimate is stopped once it has resolved its
// budget of fields, and answered with an error naming the limit, no data.
func TestResolveBudgetStopsARequest(t *testing.T) {
	_, do := handlerOn(t, Config{Limits: Limits{Resolved: 300}})
	ctx := context.Background()
	_, out := do(ctx, `mutation { saveTemplate(input: {name: "t", imageName: "x:1", containerDiskInGb: 5, volumeInGb: 0, dockerArgs: "", env: []}) { id } }`)
	tplID := out["data"].(map[string]any)["saveTemplate"].(map[string]any)["id"].(string)
	for i := range 30 {
		_, out := do(ctx, fmt.Sprintf(`mutation { saveEndpoint(input: {name: "e%d", templateId: "%s", gpuIds: "AMPERE_16"}) { id } }`, i, tplID))
		if msg, _ := firstError(out); msg != "" {
			t.Fatalf("saveEndpoint: %s", msg)
		}
	}
	// 20 × (myself + endpoints + 30 × 2) = 1,240 fields to resolve.
	doc := "{ "
	for i := range 20 {
		doc += fmt.Sprintf("a%d: myself { endpoints { id name } } ", i)
	}
	doc += "}"
	start := time.Now()
	code, out := do(ctx, doc)
	msg, ext := firstError(out)
	if code != 200 || ext["limit"] != "resolved" || !strings.Contains(msg, "query too costly: resolved") || out["data"] != nil {
		t.Fatalf("got %d %v, want the resolved limit named and no data", code, out)
	}
	if n := ext["value"].(float64); n < 300 || n > 600 {
		t.Errorf("stopped after %v fields; the budget is 300", n)
	}
	t.Logf("stopped in %s: %s", time.Since(start).Round(time.Millisecond), msg)
	// Under the budget, the same shape runs.
	if _, out := do(ctx, "{ a: myself { endpoints { id } } }"); out["errors"] != nil {
		t.Errorf("a small query: %v", out["errors"])
	}
}

// TestAbandonedOrLateRequestsStop: a request whose client has gone runs no
// resolver and answers nothing; one past its timeout is stopped with an
// error saying so.
func TestAbandonedOrLateRequestsStop(t *testing.T) {
	h, do := handlerOn(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b, _ := json.Marshal(map[string]any{"query": `mutation { saveTemplate(input: {name: "gone", imageName: "x:1"}) { id } }`})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "/graphql", bytes.NewReader(b)))
	if rec.Body.Len() != 0 {
		t.Errorf("answered a client that had gone: %s", rec.Body)
	}
	if _, out := do(context.Background(), `{ myself { podTemplates { id name } } }`); strings.Contains(fmt.Sprint(out), "gone") {
		t.Errorf("the abandoned mutation ran: %v", out)
	}

	_, late := handlerOn(t, Config{Timeout: time.Nanosecond})
	_, out := late(context.Background(), `{ myself { id } }`)
	if msg, ext := firstError(out); ext["code"] != "TIMEOUT" || !strings.Contains(msg, "ran longer than") {
		t.Errorf("a query past the timeout: %v", out)
	}
	// A mutation is not cut by the timer (a pod create waits for its
	// image; mgmt finishes what it began).
	_, out = late(context.Background(), `mutation { saveTemplate(input: {name: "slow", imageName: "x:1"}) { id } }`)
	if msg, _ := firstError(out); msg != "" {
		t.Errorf("a mutation under the same timeout: %v", out)
	}
}
