package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gorilla/mux"
)

// The OpenAPI checks Env wraps around Berth's handler: Validating checks
// each request and response against the served OpenAPI document.

func init() {
	// runpod-python posts job-done and job-stream bodies as JSON under
	// application/x-www-form-urlencoded; the document describes that body
	// as a string, which kin-openapi's form decoder does not take.
	openapi3filter.RegisterBodyDecoder("application/x-www-form-urlencoded",
		func(body io.Reader, h http.Header, schema *openapi3.SchemaRef, enc openapi3filter.EncodingFn) (any, error) {
			if schema != nil && schema.Value != nil && schema.Value.Type.Is("string") {
				return openapi3filter.PlainBodyDecoder(body, h, schema, enc)
			}
			return openapi3filter.UrlencodedBodyDecoder(body, h, schema, enc)
		})
}

// Validating wraps h so every request and response passing through is
// checked against doc; a mismatch fails t. A request the document calls
// invalid must be refused (4xx); a route the document lacks must not be
// served (a 2xx or 3xx for it fails). It also reports each operation id
// seen.
// Requests other matches (the REST v2 routes, described by their own
// document) pass unchecked.
func Validating(t *testing.T, doc *openapi3.T, h http.Handler, seen func(opID string), other *mux.Router) http.Handler {
	t.Helper()
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("openapi router: %v", err)
	}
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		SkipSettingDefaults:   true,
		MultiError:            true,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		vr := r.Clone(context.WithoutCancel(r.Context()))
		vr.Body = io.NopCloser(bytes.NewReader(body))

		if other != nil && other.Match(vr, &mux.RouteMatch{}) {
			h.ServeHTTP(w, r)
			return
		}
		route, params, ferr := router.FindRoute(vr)
		rec := &teeRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		if !rec.wrote && r.Context().Err() != nil {
			return // the client left and nothing was answered: no response to check
		}
		what := r.Method + " " + r.URL.RequestURI()
		if ferr != nil {
			if rec.code < 400 {
				t.Errorf("%s: answered %d but the OpenAPI document has no such operation (%v)", what, rec.code, ferr)
			}
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(vr.Context(), in); err != nil && rec.code < 400 {
			t.Errorf("%s: the document calls this request invalid but Berth answered %d:\n%v", what, rec.code, err)
		}
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: rec.code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(rec.buf.Bytes())), Options: opts,
		}
		if err := openapi3filter.ValidateResponse(vr.Context(), out); err != nil {
			t.Errorf("%s → %d: the response does not match the document:\n%v\nbody: %.600s", what, rec.code, err, rec.buf.String())
		}
		if seen != nil {
			seen(route.Operation.OperationID)
		}
	})
}

// teeRecorder writes through and keeps a copy of status and body.
type teeRecorder struct {
	http.ResponseWriter
	code  int
	buf   bytes.Buffer
	wrote bool // the handler answered (a header or a byte)
}

func (r *teeRecorder) WriteHeader(code int) {
	r.code, r.wrote = code, true
	r.ResponseWriter.WriteHeader(code)
}

func (r *teeRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	r.buf.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *teeRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// RouterOf matches the routes given as "METHOD /path".
func RouterOf(routes map[string]string) *mux.Router {
	r := mux.NewRouter()
	for route := range routes {
		method, path, _ := strings.Cut(route, " ")
		r.Handle(path, http.NotFoundHandler()).Methods(method)
	}
	return r
}

// LoadDoc fetches the document from h and checks it loads and validates.
func LoadDoc(t testing.TB, h http.Handler, path string) *openapi3.T {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+Key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	if doc, ok := loadedDocs.Load(rec.Body.String()); ok {
		return doc.(*openapi3.T)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("load OpenAPI document: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("OpenAPI document does not validate: %v", err)
	}
	loadedDocs.Store(rec.Body.String(), doc)
	return doc
}

// loadedDocs keeps each served document loaded and validated, by its text:
// that takes seconds under -race on a busy machine, and most tests of the
// package are served the same document.
var loadedDocs sync.Map

// Must sends a request and fails unless it answers want; it decodes the
// JSON answer into v when v is not nil.
func (e *Env) Must(want int, method, path string, body any, v any) []byte {
	e.T.Helper()
	code, out := e.Call(method, path, body)
	if code != want {
		e.T.Fatalf("%s %s: got %d, want %d: %s", method, path, code, want, out)
	}
	if v != nil {
		// Decode into a zero value: fields the answer omits must not
		// keep what an earlier answer said.
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer {
			rv.Elem().SetZero()
		}
		if err := json.Unmarshal(out, v); err != nil {
			e.T.Fatalf("%s %s: decode %s: %v", method, path, out, err)
		}
	}
	return out
}

// MustErr checks an error answer: its status and that its message
// mentions each of words.
func (e *Env) MustErr(want int, method, path string, body any, words ...string) {
	e.T.Helper()
	code, out := e.Call(method, path, body)
	if code != want {
		e.T.Fatalf("%s %s: got %d, want %d: %s", method, path, code, want, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		e.T.Fatalf("%s %s: error body is not JSON: %s", method, path, out)
	}
	msg, _ := m["message"].(string)
	if !strings.HasPrefix(path, "/v1/") {
		msg, _ = m["error"].(string)
	}
	if msg == "" {
		e.T.Fatalf("%s %s: error body has no message: %s", method, path, out)
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			e.T.Errorf("%s %s: message %q does not mention %q", method, path, msg, w)
		}
	}
}

// DocOps returns "METHOD /path" → operation id for every documented
// operation.
func DocOps(doc *openapi3.T) map[string]string {
	out := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, o := range item.Operations() {
			out[method+" "+path] = o.OperationID
		}
	}
	return out
}

// ServedRoutes walks Berth's router: "METHOD /path" of every route.
func ServedRoutes(t testing.TB, h http.Handler) []string {
	t.Helper()
	r, ok := h.(*mux.Router)
	if !ok {
		t.Fatalf("Handler() is a %T, not a *mux.Router", h)
	}
	var out []string
	err := r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			return nil // a prefix with a subrouter
		}
		for _, m := range methods {
			out = append(out, m+" "+tpl)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}
