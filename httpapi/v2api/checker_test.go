package v2api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"berth/internal/apitest"
)

// The v2 checker: an instrument built from RunPod's v2.json alone, as the
// outside checker of issue 16 was — kin-openapi's JSON Schema 2020-12
// validator, proven on the document's own examples (no false alarm) and
// on known-bad payloads derived from its schemas (each one caught) —
// then turned on Berth: every request the document calls valid must not
// be refused as invalid (422), every known-bad one must be (422, an RFC
// 9457 problem listing the violations).

// checkerOp is one v2 operation with a request body.
type checkerOp struct {
	method, path, id string
	schema           *openapi3.SchemaRef
	examples         map[string]any
}

// v2BodyOps lists the operations of v2.json with a JSON request body,
// but the families Berth answers 501 (clusters, registry delegations).
func v2BodyOps(t *testing.T, doc *openapi3.T) []checkerOp {
	var out []checkerOp
	for path, item := range doc.Paths.Map() {
		if strings.Contains(path, "/clusters") || strings.Contains(path, "/delegations") {
			continue
		}
		for method, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			mt := op.RequestBody.Value.Content.Get("application/json")
			if mt == nil || mt.Schema == nil {
				t.Fatalf("%s %s: no JSON body schema", method, path)
			}
			ex := map[string]any{}
			for name, e := range mt.Examples {
				if e.Value != nil {
					ex[name] = e.Value.Value
				}
			}
			out = append(out, checkerOp{method, path, op.OperationID, mt.Schema, ex})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// props are a schema's properties, allOf's included; required its
// required names.
func props(s *openapi3.Schema) (map[string]*openapi3.Schema, []string) {
	out := map[string]*openapi3.Schema{}
	var req []string
	var walk func(s *openapi3.Schema)
	walk = func(s *openapi3.Schema) {
		for n, p := range s.Properties {
			if p.Value != nil {
				out[n] = p.Value
			}
		}
		req = append(req, s.Required...)
		for _, a := range s.AllOf {
			if a.Value != nil {
				walk(a.Value)
			}
		}
	}
	walk(s)
	return out, req
}

// flat is a property's schema with allOf's constraints merged enough to
// derive bad values: type, enum, bounds, lengths, pattern, items.
func flat(s *openapi3.Schema) openapi3.Schema {
	f := *s
	for _, a := range s.AllOf {
		if a.Value == nil {
			continue
		}
		sub := flat(a.Value)
		if f.Type == nil || f.Type.IsEmpty() {
			f.Type = sub.Type
		}
		if len(f.Enum) == 0 {
			f.Enum = sub.Enum
		}
		if f.Min == nil {
			f.Min = sub.Min
		}
		if f.Max == nil {
			f.Max = sub.Max
		}
	}
	return f
}

// mutation is one payload derived from a valid one.
type mutation struct {
	what string
	body any
}

// mutate derives payloads from a valid body: at every property present,
// a value of the wrong type, outside its enum, its bounds, its length,
// its pattern or its item count; a required property removed; an unknown
// property added (at the top and in every object).
func mutate(s *openapi3.Schema, body map[string]any, at string) []mutation {
	var out []mutation
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range body {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	ps, required := props(s)
	out = append(out, mutation{at + ".bogusProperty added", with("bogusProperty", 1)})
	for _, r := range required {
		if _, ok := body[r]; ok {
			out = append(out, mutation{at + "." + r + " removed", with(r, nil)})
		}
	}
	keys := make([]string, 0, len(body))
	for k := range body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p, ok := ps[k]
		if !ok {
			continue
		}
		f := flat(p)
		where := at + "." + k
		add := func(what string, v any) { out = append(out, mutation{where + ": " + what, with(k, v)}) }
		switch {
		case f.Type.Is("string"):
			add("a number", 12345)
		case f.Type.Is("integer"), f.Type.Is("number"):
			add("a string", "12")
		case f.Type.Is("boolean"):
			add("a string", "true")
		case f.Type.Is("array"):
			add("a string", "x")
		case f.Type.Is("object"):
			add("a string", "x")
		}
		if len(f.Enum) > 0 {
			add("not in its enum", "NOT_IN_ENUM")
		}
		if f.Min != nil {
			add("below its minimum", *f.Min-1)
		}
		if f.Max != nil {
			add("above its maximum", *f.Max+1)
		}
		if f.MinLength > 0 {
			add("shorter than its minLength", "")
		}
		if f.Pattern != "" {
			add("not matching its pattern", "!")
		}
		if arr, ok := body[k].([]any); ok {
			if f.MinItems > 0 {
				add("fewer items than its minItems", []any{})
			}
			if f.MaxItems != nil && len(arr) > 0 {
				more := make([]any, *f.MaxItems+1)
				for i := range more {
					more[i] = arr[0]
				}
				add("more items than its maxItems", more)
			}
			if f.Items != nil && f.Items.Value != nil && len(arr) > 0 {
				it := flat(f.Items.Value)
				if it.Pattern != "" || len(it.Enum) > 0 {
					add("an item not matching", []any{"!"})
				}
				if obj, ok := arr[0].(map[string]any); ok {
					for _, m := range mutate(f.Items.Value, obj, where+"[0]") {
						add(m.what, []any{m.body})
					}
				}
			}
		}
		if obj, ok := body[k].(map[string]any); ok && f.Type.Is("object") || (ok && len(p.AllOf) > 0) {
			for _, m := range mutate(p, obj, where) {
				out = append(out, mutation{m.what, with(k, m.body)})
			}
		}
	}
	return out
}

// validBody validates v against RunPod's schema with the 2020-12
// validator.
func validBody(s *openapi3.SchemaRef, v any) error {
	return s.Value.VisitJSON(roundTrip(v), openapi3.EnableJSONSchema2020(), openapi3.MultiErrors())
}

// roundTrip gives v the shape encoding/json decodes JSON to (float64
// numbers, []any, map[string]any), as the validator expects.
func roundTrip(v any) any {
	b, _ := json.Marshal(v)
	var out any
	json.Unmarshal(b, &out)
	return out
}

// TestV2CheckerIsSound: the instrument itself. Every example the document
// gives of a response or a request passes its schema; every known-bad
// payload derived from a request example fails it. The counts are the
// instrument's coverage.
func TestV2CheckerIsSound(t *testing.T) {
	doc, _ := apitest.RunPodDoc(t, "v2")
	examples := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, r := range op.Responses.Map() {
				if r.Value == nil {
					continue
				}
				for ct, mt := range r.Value.Content {
					if mt.Schema == nil || !strings.Contains(ct, "json") {
						continue
					}
					all := map[string]any{}
					for name, e := range mt.Examples {
						if e.Value != nil {
							all[name] = e.Value.Value
						}
					}
					if mt.Example != nil {
						all["example"] = mt.Example
					}
					for name, v := range all {
						examples++
						if err := validBody(mt.Schema, v); err != nil {
							t.Errorf("%s %s → %s, example %q fails its own schema: %v", method, path, code, name, err)
						}
					}
				}
			}
		}
	}
	bad := 0
	for _, op := range v2BodyOps(t, doc) {
		if len(op.examples) == 0 {
			t.Errorf("%s has no request example to derive payloads from", op.id)
		}
		for name, ex := range op.examples {
			examples++
			if err := validBody(op.schema, ex); err != nil {
				t.Errorf("%s: request example %q fails its own schema: %v", op.id, name, err)
				continue
			}
			body, ok := roundTrip(ex).(map[string]any)
			if !ok {
				continue
			}
			for _, m := range mutate(op.schema.Value, body, "$") {
				if validBody(op.schema, m.body) == nil {
					continue // a mutation the schema allows (e.g. a bare string type): not a known-bad payload
				}
				bad++
			}
		}
	}
	t.Logf("v2.json: %d examples pass their schemas; %d known-bad payloads derived from its request examples fail them", examples, bad)
	if examples < 100 || bad < 100 {
		t.Errorf("too few examples (%d) or known-bad payloads (%d) to trust the instrument", examples, bad)
	}
}

// TestV2CheckerOnBerth: the instrument on Berth. The document's request
// examples are never answered 422; every known-bad payload is, with a
// problem body listing its violations; and known-bad parameters of every
// operation that has parameters are 422 too.
func TestV2CheckerOnBerth(t *testing.T) {
	e := apitest.NewValidating(t, apitest.WithFake(apitest.PodGPUs, "alpine:3"))
	e.Conformant(false)
	doc, router := apitest.RunPodDoc(t, "v2")
	ids := strings.NewReplacer("{id}", "nosuchid123", "{workerId}", "nosuchworker")
	caught, allowed := 0, 0
	for _, op := range v2BodyOps(t, doc) {
		path := ids.Replace(op.path)
		for name, ex := range op.examples {
			code, out := e.Call(op.method, path, roundTrip(ex))
			allowed++
			if code == 422 {
				t.Errorf("%s example %q (valid per v2.json): 422 %s", op.id, name, out)
			}
			body, ok := roundTrip(ex).(map[string]any)
			if !ok {
				continue
			}
			for _, m := range mutate(op.schema.Value, body, "$") {
				if validBody(op.schema, m.body) == nil {
					continue
				}
				code, out := e.Call(op.method, path, m.body)
				var p httpapiProblem
				json.Unmarshal(out, &p)
				if code != 422 || p.Status != 422 || len(p.Errors) == 0 {
					t.Errorf("%s, %s (invalid per v2.json): %d %.300s", op.id, m.what, code, out)
				}
				caught++
			}
		}
	}
	// Parameters: a value of the wrong type, outside its enum, bounds or
	// pattern, for every query parameter v2.json declares.
	params := 0
	for path, item := range doc.Paths.Map() {
		if strings.Contains(path, "/clusters") || strings.Contains(path, "/delegations") {
			continue
		}
		for method, op := range item.Operations() {
			for _, pr := range op.Parameters {
				p := pr.Value
				if p == nil || p.In != "query" || p.Schema == nil || p.Schema.Value == nil {
					continue
				}
				s := flat(p.Schema.Value)
				var bads []string
				switch {
				case s.Type.Is("integer"):
					bads = append(bads, "abc")
				case s.Type.Is("boolean"):
					bads = append(bads, "maybe")
				case s.Type.Is("array") && s.Items != nil && s.Items.Value != nil:
					if it := flat(s.Items.Value); len(it.Enum) > 0 || it.Pattern != "" {
						bads = append(bads, "NOT_IN_ENUM!")
					}
				}
				if len(s.Enum) > 0 {
					bads = append(bads, "NOT_IN_ENUM")
				}
				if s.Min != nil {
					bads = append(bads, fmt.Sprint(*s.Min-1))
				}
				if s.Max != nil {
					bads = append(bads, fmt.Sprint(*s.Max+1))
				}
				if s.Pattern != "" {
					bads = append(bads, "!")
				}
				if s.Format == "date-time" {
					bads = append(bads, "yesterday")
				}
				for _, b := range bads {
					target := ids.Replace(path) + "?" + url.Values{p.Name: {b}}.Encode()
					// Known bad per the document's own validator first.
					req := httptest.NewRequest(method, target, nil)
					route, pp, err := router.FindRoute(req)
					if err != nil {
						t.Fatal(err)
					}
					verr := openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
						Request: req, PathParams: pp, Route: route, Options: apitest.ConformanceOpts})
					if verr == nil {
						continue
					}
					params++
					if code, out := e.Call(method, target, nil); code != http.StatusUnprocessableEntity {
						t.Errorf("%s %s (invalid per v2.json): %d %.300s", method, target, code, out)
					}
				}
			}
		}
	}
	t.Logf("Berth: %d request examples not refused as invalid; %d known-bad bodies and %d known-bad parameters answered 422", allowed, caught, params)
	if caught < 100 || params < 20 {
		t.Errorf("too few known-bad payloads (%d bodies, %d parameters)", caught, params)
	}
}
