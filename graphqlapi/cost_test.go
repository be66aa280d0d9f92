package graphqlapi_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"berth/store"
)

// aliases is "{ a0: body a1: body … }" with n aliases.
func aliases(op string, n int, body func(i int) string) string {
	var b strings.Builder
	b.WriteString(op + "{ ")
	for i := range n {
		fmt.Fprintf(&b, "a%d: %s ", i, body(i))
	}
	b.WriteString("}")
	return b.String()
}

// TestHostileDocumentsAreRefusedFast: the documents of the sweep that took
// the host down are refused before anything runs, each with an error naming
// its limit, in well under a second, without allocating more than a few
// times the document's size — and an aliased batch of mutations writes
// nothing. (Before: 80 s and 3.7 GB; 53 s and 1.8 GB over 50 endpoints;
// over 13 GB; 88 s of writes.)
func TestHostileDocumentsAreRefusedFast(t *testing.T) {
	e := newEnv(t)
	tpl := createTemplate(t, e, "cost-tpl", "berth/echo:1", "")
	for i := range 50 {
		e.rest("POST", "/v1/endpoints", map[string]any{"name": fmt.Sprintf("e%d", i), "templateId": tpl.ID}, 200, nil)
	}
	rich := "myself { endpoints { id name gpuIds templateId env { key value } networkVolume { id } workersMax } pods { id name env } podTemplates { id name env { key value } } }"
	save := func(i int) string {
		return fmt.Sprintf(`saveTemplate(input: {name: "flood-%d", imageName: "x:1", containerDiskInGb: 5, volumeInGb: 0, dockerArgs: "", env: []}) { id }`, i)
	}
	templates := e.count(store.Templates)
	for _, tc := range []struct {
		name, doc, limit string
	}{
		{"10,000 __typename", "{ " + strings.Repeat("__typename ", 10000) + "}", "fields"},
		{"50,000 __typename (550 KB)", "{ " + strings.Repeat("__typename ", 50000) + "}", "tokens"},
		{"10,000 aliases of myself.endpoints", aliases("", 10000, func(int) string { return "myself { endpoints { id } }" }), "tokens"},
		{"2,000 aliases of a richer query", aliases("", 2000, func(int) string { return rich }), "tokens"},
		{"1,000 saveTemplate", aliases("mutation ", 1000, save), "tokens"},
		{"200 saveTemplate", aliases("mutation ", 200, save), "aliases"},
		{"50 saveTemplate", aliases("mutation ", 50, save), "mutations"},
		{"150 aliases", aliases("", 150, func(int) string { return "myself { id }" }), "aliases"},
		{"40 aliases of pods' ports", aliases("", 40, func(int) string { return "myself { pods { runtime { ports { ip publicPort } } } }" }), "fanOut"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		r := e.python(tc.doc)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if r.Code != 200 || len(r.Errors) != 1 || r.Errors[0].Extensions["limit"] != tc.limit ||
			!strings.Contains(r.Errors[0].Message, "query too costly: "+tc.limit) {
			t.Errorf("%s: got %d %+v, want one error naming the %s limit", tc.name, r.Code, r.Errors, tc.limit)
			continue
		}
		if took > 5*time.Second {
			t.Errorf("%s: refused after %s", tc.name, took)
		}
		// The document is held a few times over (body, JSON string, its
		// parse); nothing like the gigabytes it used to cost.
		if limit := uint64(64<<20 + 40*len(tc.doc)); alloc > limit {
			t.Errorf("%s: %d MB allocated to refuse it", tc.name, alloc>>20)
		}
		t.Logf("%s (%d KB): refused in %s, %.1f MB allocated: %s", tc.name, len(tc.doc)>>10, took.Round(time.Millisecond), float64(alloc)/(1<<20), r.Errors[0].Message)
	}
	if n := e.count(store.Templates); n != templates {
		t.Errorf("templates: %d → %d; a refused batch wrote", templates, n)
	}
	// What the tools send still runs, beside the refused documents.
	r := e.python(fixture(t, "runpod-python/get_endpoints.graphql"))
	var me struct{ Endpoints []struct{ ID string } }
	r.ok(t, "myself", &me)
	if len(me.Endpoints) != 50 {
		t.Errorf("get_endpoints: %d endpoints", len(me.Endpoints))
	}
	// Ten aliased mutations, the limit, are fine.
	r = e.python(aliases("mutation ", 10, save))
	if len(r.Errors) != 0 {
		t.Errorf("10 aliased saveTemplate: %+v", r.Errors)
	}
}
