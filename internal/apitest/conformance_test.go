package apitest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"berth/internal/apitest"
)

// failRecorder is a testing.TB whose Errorf is recorded, for testing the
// harness itself.
type failRecorder struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (f *failRecorder) Errorf(format string, a ...any) {
	f.mu.Lock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, a...))
	f.mu.Unlock()
}

// TestConformanceHarnessCatches: the harness fails a test on a missing
// required field, a wrong type, an undocumented status and an invalid
// request Berth accepted, and lets a conformant exchange through.
func TestConformanceHarnessCatches(t *testing.T) {
	answer := map[string]struct {
		code int
		body string
	}{
		"/v1/containerregistryauth":            {200, `[{"id":"a","name":"n"}]`},
		"/v1/containerregistryauth/wrongtype":  {200, `{"id":5,"name":"n"}`},
		"/v1/containerregistryauth/nostatus":   {202, `{}`},
		"/v1/containerregistryauth/noshape":    {409, `{"error":"x"}`},
		"/v2/templates/missing":                {200, `{"id":"x"}`},
		"/v2/templates":                        {201, `{}`},
		"/v2/serverless":                       {201, `{}`},
		"/v1/containerregistryauth/acceptsbad": {200, `{"id":"a","name":"n"}`},
	}
	srv := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answer[r.URL.Path]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.code)
		io.WriteString(w, a.body)
	}))
	cases := []struct {
		method, path, body string
		want               string // "" = conformant
	}{
		{"GET", "/v1/containerregistryauth", "", ""},
		{"GET", "/v1/containerregistryauth/wrongtype", "", `"id"`},
		{"GET", "/v1/containerregistryauth/nostatus", "", "status is not supported"},
		{"GET", "/v1/containerregistryauth/noshape", "", `{"message": string}`},
		{"GET", "/v2/templates/missing", "", "required"},
		{"POST", "/v1/containerregistryauth", `{"name": 5}`, "calls invalid"},
		// Only the JSON Schema 2020-12 validator enforces these keywords
		// (the OpenAPI 3.0 one ignores them): unevaluatedProperties, and
		// a LOAD_BALANCER endpoint's if/then on its scaling.
		{"POST", "/v2/templates", `{"name":"t","image":"alpine:3","bogus":1}`, "calls invalid"},
		{"POST", "/v2/serverless", `{"name":"e","type":"LOAD_BALANCER","image":"a","gpu":{"pools":["ADA_24"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`, "calls invalid"},
	}
	for _, tc := range cases {
		rec := &failRecorder{TB: t}
		c := apitest.NewConformance(rec)
		c.Requests = true
		var rd io.Reader
		if tc.body != "" {
			rd = strings.NewReader(tc.body)
		}
		req, _ := http.NewRequest(tc.method, srv+tc.path, rd)
		if rd != nil {
			req.Header.Set("Content-Type", "application/json")
			answer[tc.path] = answer["/v1/containerregistryauth/acceptsbad"]
		}
		res, err := (&http.Client{Transport: c}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got := strings.Join(rec.msgs, "\n")
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s %s: conformant exchange reported: %s", tc.method, tc.path, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s %s: harness reported %q, want a failure mentioning %q", tc.method, tc.path, got, tc.want)
		}
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConformanceUses2020Validator: the harness validates v2 exchanges
// with JSON Schema 2020-12, not OpenAPI 3.0's validator: a keyword only
// 2020-12 has (unevaluatedProperties: false on CreateTemplateRequest) is
// enforced by the harness's request validation, while the 3.0 validator
// — what calling openapi3.EnableJSONSchema2020() and dropping its result
// left in place — lets the same body through.
func TestConformanceUses2020Validator(t *testing.T) {
	doc, router := apitest.RunPodDoc(t, "v2")
	validate := func(body string) error {
		req := httptest.NewRequest("POST", "/v2/templates", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatal(err)
		}
		return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route, Options: apitest.ConformanceOpts})
	}
	const good, bad = `{"name":"t","image":"alpine:3"}`, `{"name":"t","image":"alpine:3","bogus":1}`
	if err := validate(good); err != nil {
		t.Fatalf("a valid body refused: %v", err)
	}
	if err := validate(bad); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("the harness let an unevaluated property through: %v", err)
	}
	var v any
	json.Unmarshal([]byte(bad), &v)
	s := doc.Components.Schemas["CreateTemplateRequest"].Value
	if err := s.VisitJSON(v); err != nil {
		t.Errorf("the OpenAPI 3.0 validator now refuses unevaluatedProperties (%v): this test no longer tells them apart", err)
	}
	if err := s.VisitJSON(v, openapi3.EnableJSONSchema2020()); err == nil {
		t.Error("the 2020-12 validator accepted an unevaluated property")
	}
}
