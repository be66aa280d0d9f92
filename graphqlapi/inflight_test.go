package graphqlapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/app"
	"berth/graphqlapi"
)

// gqlPost posts query with the test key from any goroutine: the status,
// Retry-After and the decoded reply.
func gqlPost(base, query string) (int, string, map[string]any, error) {
	b, _ := json.Marshal(map[string]any{"query": query})
	req, _ := http.NewRequest(http.MethodPost, base+"/graphql", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		return res.StatusCode, "", nil, fmt.Errorf("reply is not JSON: %s", out)
	}
	return res.StatusCode, res.Header.Get("Retry-After"), v, nil
}

// The cost limits bound one request; Limits.InFlight bounds the fields
// all requests in flight resolve together. Sixteen concurrent queries the
// per-request limits allow, each resolving ≈120,000 fields, against a
// bound of 150,000: each one either answers in full or is refused with
// 503, Retry-After and SERVER_BUSY — some are — while cheap queries sent
// at the same time all answer; once the burst is over the bound is free
// again (an expensive query alone answers).
func TestInFlightBoundRefusesExpensiveQueriesNotCheapOnes(t *testing.T) {
	e := newEnv(t, func(_ *env, c *app.Config) {
		c.HTTP.GraphQL = graphqlapi.Limits{InFlight: 150000, InFlightWait: 100 * time.Millisecond}
	})
	var tpl struct{ ID string }
	e.rest("POST", "/v1/templates", json.RawMessage(`{"name":"t","imageName":"a:1"}`), 200, &tpl)
	const endpoints = 200
	for i := range endpoints {
		e.rest("POST", "/v1/endpoints", json.RawMessage(fmt.Sprintf(`{"name":"e%d","templateId":%q}`, i, tpl.ID)), 200, nil)
	}
	var b strings.Builder
	b.WriteString("{")
	for i := range 99 {
		fmt.Fprintf(&b, " a%d: myself { endpoints { id name templateId workersMin workersMax gpuIds } }", i)
	}
	b.WriteString(" }")
	expensive := b.String()
	const cheap = "{ myself { id } }"

	type reply struct {
		cheap      bool
		code       int
		retryAfter string
		v          map[string]any
		err        error
	}
	replies := make(chan reply, 32)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 16 + 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := expensive
			if i >= 16 {
				q = cheap
			}
			<-start
			code, ra, v, err := gqlPost(e.base, q)
			replies <- reply{q == cheap, code, ra, v, err}
		}()
	}
	close(start)
	wg.Wait()
	close(replies)

	refused, answered := 0, 0
	for r := range replies {
		if r.err != nil {
			t.Fatal(r.err)
		}
		errs, _ := r.v["errors"].([]any)
		switch {
		case r.code == http.StatusOK && len(errs) == 0:
			if !r.cheap {
				if my, _ := r.v["data"].(map[string]any)["a98"].(map[string]any); len(my["endpoints"].([]any)) != endpoints {
					t.Errorf("an expensive query answered part of the endpoints: %v", my)
				}
			}
			answered++
		case r.cheap:
			t.Errorf("a cheap query was not answered: %d %v", r.code, r.v)
		case r.code == http.StatusServiceUnavailable && r.retryAfter != "" && len(errs) == 1:
			e0 := errs[0].(map[string]any)
			ext, _ := e0["extensions"].(map[string]any)
			if ext["code"] != "SERVER_BUSY" || !strings.Contains(e0["message"].(string), "server busy") || r.v["data"] != nil {
				t.Errorf("refusal: %v", r.v)
			}
			refused++
		default:
			t.Errorf("an expensive query: %d Retry-After %q %v", r.code, r.retryAfter, r.v)
		}
	}
	if refused == 0 {
		t.Errorf("16 concurrent queries of ≈120,000 fields under a bound of 150,000: none refused")
	}
	t.Logf("%d answered (8 cheap), %d refused", answered, refused)

	// Nothing held is left behind.
	code, _, v, err := gqlPost(e.base, expensive)
	if err != nil || code != http.StatusOK || v["errors"] != nil {
		t.Fatalf("an expensive query alone after the burst: %d %v %v", code, err, v["errors"])
	}
}
