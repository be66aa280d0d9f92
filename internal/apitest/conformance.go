package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// The conformance harness holds Berth to RunPod's own OpenAPI documents
// (shared/spec/runpod-openapi/v1.json and v2.json, beside the repository,
// as in CI): a client whose round-tripper validates every request and
// response against them. Berth may answer more fields than RunPod
// documents, never fewer required ones or other types. Where Berth
// knowingly differs, runpodAllow says so and why; docs/management.md lists
// the same differences.

func init() {
	// GET /v1/docs answers a page.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	// v2's log routes answer Server-Sent Events.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
}

// allowed is one known difference from RunPod's document: a validation
// error of operation op ("v1 CreatePod", or "*v1" for any v1 operation)
// whose text matches re.
type allowed struct {
	op  string
	re  *regexp.Regexp
	why string
}

func allow(op, pattern, why string) *allowed {
	return &allowed{op: op, re: regexp.MustCompile(pattern), why: why}
}

// runpodAllow is the explicit allow-list. Every entry must be met by
// TestRunPodV1Conformance / TestRunPodV2Conformance (an unused entry fails
// them), so the list cannot outlive the difference it excuses.
var runpodAllow = []*allowed{
	allow("v1 RestartPod", `status is not supported`,
		"v1.json documents no success answer for POST /pods/{podId}/restart (only 400 and 401); Berth answers 200 with the pod, as start, stop and reset do"),
	allow("*v1", `(gpuTypeIds|dataCenterIds)/\d+": value is not one of the allowed values`,
		"RunPod GPU pool ids (AMPERE_16…) and unknown-but-well-formed GPU and data-centre ids are accepted and recorded as given, with a warning; they read back as given"),
}

// runpodSpecDir finds shared/spec/runpod-openapi beside the repository
// root (the directory holding go.mod).
func runpodSpecDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	spec := filepath.Join(dir, "..", "shared", "spec", "runpod-openapi")
	if _, err := os.Stat(filepath.Join(spec, "v2.json")); err != nil {
		// CI runs with shared/ beside the clone; without it the contract
		// is missing, which is a failure, not a skip.
		t.Fatalf("RunPod's OpenAPI documents are not at %s: %v", spec, err)
	}
	return spec
}

var runpodDocs struct {
	sync.Mutex
	routers map[string]routers.Router
	docs    map[string]*openapi3.T
}

// RunPodDoc loads RunPod's v1.json or v2.json once per test binary and
// returns it with a router matching Berth's paths: v1's server is
// https://rest.runpod.io/v1, v2's https://api.runpod.io with /v2 paths.
func RunPodDoc(t testing.TB, version string) (*openapi3.T, routers.Router) {
	t.Helper()
	runpodDocs.Lock()
	defer runpodDocs.Unlock()
	if d := runpodDocs.docs[version]; d != nil {
		return d, runpodDocs.routers[version]
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join(runpodSpecDir(t), version+".json"))
	if err != nil {
		t.Fatalf("load RunPod's %s.json: %v", version, err)
	}
	// v1.json gives PATCH /x/{id} and POST /x/{id}/update one operation id;
	// the validator wants them unique, so the POST form gets a suffix.
	for _, path := range doc.Paths.InMatchingOrder() {
		if o := doc.Paths.Value(path).Post; o != nil && strings.HasSuffix(path, "/update") {
			o.OperationID += "ViaPost"
		}
	}
	// RunPod's own examples and defaults do not all match its schemas
	// (v1's PodCreateInput.ports defaults to the string "8888/http,22/tcp"
	// for an array); the schemas are the contract.
	if err := doc.Validate(loader.Context, openapi3.DisableExamplesValidation(), openapi3.DisableSchemaDefaultsValidation()); err != nil {
		t.Fatalf("RunPod's %s.json does not validate: %v", version, err)
	}
	// v2.json is OpenAPI 3.1: kin-openapi v0.152 validates its requests
	// and responses with the JSON Schema 2020-12 validator
	// (openapi3filter adds openapi3.EnableJSONSchema2020() for every
	// route whose Spec.IsOpenAPI31OrLater(); doc.Validate adds
	// IsOpenAPI31OrLater() itself). TestConformanceHarnessCatches proves
	// it with a keyword only that validator enforces.
	if want := version == "v2"; doc.IsOpenAPI31OrLater() != want {
		t.Fatalf("RunPod's %s.json is OpenAPI %s: the 2020-12 validator would be %v, want %v", version, doc.OpenAPI, !want, want)
	}
	base := "/"
	if version == "v1" {
		base = "/v1"
	}
	doc.Servers = openapi3.Servers{{URL: base}}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("router for RunPod's %s.json: %v", version, err)
	}
	if runpodDocs.docs == nil {
		runpodDocs.docs, runpodDocs.routers = map[string]*openapi3.T{}, map[string]routers.Router{}
	}
	runpodDocs.docs[version], runpodDocs.routers[version] = doc, r
	return doc, r
}

// Conformance is an http.RoundTripper that validates each exchange with a
// running Berth against RunPod's documents. /v1/... goes to v1.json and
// /v2/... to v2.json; a path neither documents (the job API, Berth's own
// extensions) passes unvalidated.
type Conformance struct {
	t    testing.TB
	base http.RoundTripper
	v1   routers.Router
	v2   routers.Router

	// requests: also fail on a request RunPod's document calls invalid
	// that Berth accepted. The conformance tests send what RunPod's users
	// send; the other tests also probe liberal acceptance on purpose.
	Requests bool

	// own, when set, is Berth's generated /v2/openapi.json: v2 exchanges
	// are held to it too, so the document cannot drift from the code.
	Own routers.Router

	mu   sync.Mutex
	seen map[string]int   // "v1 POST /pods" → exchanges validated
	used map[*allowed]int // allow-list entries met
}

func NewConformance(t testing.TB) *Conformance {
	_, r1 := RunPodDoc(t, "v1")
	_, r2 := RunPodDoc(t, "v2")
	return &Conformance{t: t, base: http.DefaultTransport, v1: r1, v2: r2, seen: map[string]int{}, used: map[*allowed]int{}}
}

// ConformanceOpts are the validator's options.
var ConformanceOpts = &openapi3filter.Options{
	AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	IncludeResponseStatus: true,
	SkipSettingDefaults:   true,
	MultiError:            true,
}

func (c *Conformance) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	res, err := c.base.RoundTrip(req)
	if err != nil {
		return res, err
	}
	var router routers.Router
	version := ""
	switch {
	case strings.HasPrefix(req.URL.Path, "/v1/"):
		router, version = c.v1, "v1"
	case strings.HasPrefix(req.URL.Path, "/v2/"):
		router, version = c.v2, "v2"
	default:
		return res, nil
	}
	vr := req.Clone(context.Background())
	vr.Body = io.NopCloser(bytes.NewReader(body))
	vr.Host, vr.URL.Host, vr.URL.Scheme = "", "", ""
	route, params, ferr := router.FindRoute(vr)
	if ferr != nil {
		return res, nil // not RunPod's: the job API or a Berth extension
	}
	// Streamed answers (logs) are read whole: the tests ask for bounded ones.
	out, rerr := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(out))
	if rerr != nil {
		return res, nil
	}
	op := version + " " + route.Operation.OperationID
	c.mu.Lock()
	c.seen[version+" "+req.Method+" "+route.Path]++
	c.mu.Unlock()

	what := fmt.Sprintf("%s (%s %s → %d)", op, req.Method, req.URL.RequestURI(), res.StatusCode)
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: ConformanceOpts}
	if err := openapi3filter.ValidateRequest(vr.Context(), in); err != nil && res.StatusCode < 400 && c.Requests {
		c.report(op, what+": the test sent a request RunPod's document calls invalid, and Berth accepted it", err, nil)
	}
	if version == "v1" && res.StatusCode >= 400 && route.Operation.Responses.Status(res.StatusCode) == nil {
		// v1.json lists a few error statuses per operation (most lack 401
		// and 404, none has 409 or 503); its one error schema is
		// {"message": string}. An undocumented error status must carry it.
		var m map[string]any
		json.Unmarshal(out, &m)
		if msg, _ := m["message"].(string); msg == "" {
			c.t.Errorf("%s: an error answer without v1's {\"message\": string} shape: %.300s", what, out)
		}
		return res, nil
	}
	vout := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Body: io.NopCloser(bytes.NewReader(out)), Options: ConformanceOpts,
	}
	if err := openapi3filter.ValidateResponse(vr.Context(), vout); err != nil {
		c.report(op, what+": the answer does not match RunPod's document", err, out)
	}
	if version == "v2" && c.Own != nil {
		c.checkOwn(vr, body, res, out, what)
	}
	return res, nil
}

// checkOwn validates a v2 exchange against Berth's own document.
func (c *Conformance) checkOwn(req *http.Request, body []byte, res *http.Response, out []byte, what string) {
	vr := req.Clone(context.Background())
	vr.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := c.Own.FindRoute(vr)
	if err != nil {
		c.t.Errorf("%s: Berth's /v2/openapi.json has no such operation: %v", what, err)
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: ConformanceOpts}
	if err := openapi3filter.ValidateRequest(vr.Context(), in); err != nil && res.StatusCode < 400 {
		c.t.Errorf("%s: Berth's own document calls the request invalid but Berth accepted it:\n%v", what, err)
	}
	vout := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Body: io.NopCloser(bytes.NewReader(out)), Options: ConformanceOpts}
	if err := openapi3filter.ValidateResponse(vr.Context(), vout); err != nil {
		c.t.Errorf("%s: the answer does not match Berth's own /v2/openapi.json:\n%v\nbody: %.600s", what, err, out)
	}
}

// report fails the test for each part of err not on the allow-list.
func (c *Conformance) report(op, what string, err error, body []byte) {
	var left []string
	for _, e := range flatten(err) {
		msg := e.Error()
		if a, ok := c.allowedFor(op, msg); ok {
			c.mu.Lock()
			c.used[a]++
			c.mu.Unlock()
			continue
		}
		left = append(left, msg)
	}
	if len(left) > 0 {
		c.t.Errorf("%s:\n  %s\nbody: %.800s", what, strings.Join(left, "\n  "), body)
	}
}

func (c *Conformance) allowedFor(op, msg string) (*allowed, bool) {
	for _, a := range runpodAllow {
		if (a.op == op || a.op == "*"+strings.SplitN(op, " ", 2)[0]) && a.re.MatchString(msg) {
			return a, true
		}
	}
	return nil, false
}

// flatten splits kin-openapi's multi-errors into their parts.
func flatten(err error) []error {
	var me openapi3.MultiError
	if errors.As(err, &me) {
		var out []error
		for _, e := range me {
			out = append(out, flatten(e)...)
		}
		return out
	}
	var re *openapi3filter.RequestError
	if errors.As(err, &re) {
		if inner := (openapi3.MultiError{}); errors.As(re.Err, &inner) {
			var out []error
			for _, e := range inner {
				out = append(out, fmt.Errorf("%s: %w", re.Error(), e))
			}
			return out
		}
	}
	var rs *openapi3filter.ResponseError
	if errors.As(err, &rs) {
		if inner := (openapi3.MultiError{}); errors.As(rs.Err, &inner) {
			var out []error
			for _, e := range inner {
				out = append(out, fmt.Errorf("%s: %w", rs.Reason, e))
			}
			return out
		}
	}
	return []error{err}
}

// Conformant puts e's client behind the harness; requests: fail on an
// off-document request Berth accepted too.
func (e *Env) Conformant(requests bool) *Conformance {
	c := NewConformance(e.T)
	c.Requests = requests
	e.Client = &http.Client{Transport: c}
	return c
}

// CheckCovered fails unless every operation of RunPod's document version
// was validated at least once, and every allow-list entry for version was
// met.
func (c *Conformance) CheckCovered(version string) {
	c.t.Helper()
	doc, _ := RunPodDoc(c.t, version)
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method, o := range item.Operations() {
			if c.seen[version+" "+method+" "+path] == 0 {
				missing = append(missing, method+" "+path+" ("+o.OperationID+")")
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		c.t.Errorf("RunPod's %s.json operations never driven: %s", version, strings.Join(missing, ", "))
	}
	for _, a := range runpodAllow {
		if strings.HasPrefix(a.op, version+" ") || a.op == "*"+version {
			if c.used[a] == 0 {
				c.t.Errorf("allow-list entry %q / %q was not needed: remove it", a.op, a.re)
			}
		}
	}
}
