package graphqlapi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// FuzzGraphQLCost: whatever the document, measuring it never panics; and
// a query the limits accept never resolves more fields than its measured
// fan-out says it may — on a store whose lists all hold fewer than
// ListSize objects — so no spelling (fragments, inline fragments, aliases,
// __typename, repeated fields) slips work past the estimate. Refused
// documents never run (the handler returns before graphql-go sees them).
func FuzzGraphQLCost(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.graphql")
	slot := regexp.MustCompile(`\{\{[a-zA-Z0-9_]+\}\}`)
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(slot.ReplaceAllString(string(b), "x"))
	}
	for _, s := range []string{
		"{ __typename __typename a: __typename }",
		"{ a: myself { endpoints { id env { key value } } } b: myself { ...U } } fragment U on User { pods { id ...P } } fragment P on Pod { runtime { ports { ip } } }",
		"query { ...F2 } fragment F0 on Query { myself { id } } fragment F1 on Query { ...F0 ...F0 } fragment F2 on Query { ...F1 ...F1 }",
		"{ myself { ... on User { endpoints { ... { id workers { id } } } } } }",
		"fragment A on Query { ...B } fragment B on Query { ...A } { ...A }",
		"{ gpuTypes { id lowestPrice(input: {gpuCount: 1}) { uninterruptablePrice } } dataCenters { id } serverlessGpuPools { id } }",
		"query A { myself { id } } query B { myself { pods { id } } }",
		"{ myself { endpoints { id } endpoints { name } } }",
		"mutation { a: saveTemplate(input: {name: \"t\", imageName: \"x:1\"}) { id } }",
		"{" + strings.Repeat("myself{", 20) + "}",
	} {
		f.Add(s)
	}
	h := fuzzHandler(f)
	l := Limits{FanOut: 20000}.withDefaults()
	f.Fuzz(func(t *testing.T, doc string) {
		c, qerr := l.measure(h.shape, doc)
		if qerr != nil {
			return
		}
		if c.Fields > l.Fields || c.Aliases > l.Aliases || c.Depth > l.Depth || c.Mutations > l.Mutations || c.FanOut > l.FanOut {
			t.Fatalf("accepted %q although %+v passes %+v", doc, c, l)
		}
		// Run queries only (a mutation would grow the lists), and not
		// introspection, whose lists (the schema's types and fields) are
		// counted only as they run.
		qd, err := parser.ParseQuery(&ast.Source{Input: doc})
		if err != nil || introspects.MatchString(doc) {
			return
		}
		for _, op := range qd.Operations {
			if op.Operation != ast.Query {
				return
			}
		}
		budget := &resolveBudget{max: 1 << 40, cancel: func(error) {}}
		for _, op := range qd.Operations {
			h.schema.Exec(context.WithValue(context.Background(), budgetKey{}, budget), doc, op.Name, map[string]any{})
		}
		if n := budget.n.Load(); n > int64(c.FanOut) {
			t.Fatalf("%q was measured at %d fields to resolve and resolved %d", doc, c.FanOut, n)
		}
	})
}

var introspects = regexp.MustCompile(`__(schema|type)\b`)

// fuzzHandler is a Handler over a store with a template, three endpoints
// with env, and nothing else.
func fuzzHandler(t testing.TB) *Handler {
	h, do := handlerOn(t, Config{})
	ctx := context.Background()
	_, out := do(ctx, `mutation { saveTemplate(input: {name: "t", imageName: "x:1", containerDiskInGb: 5, volumeInGb: 0, dockerArgs: "", env: [{key: "A", value: "1"}]}) { id } }`)
	tpl := out["data"].(map[string]any)["saveTemplate"].(map[string]any)["id"].(string)
	for i := range 3 {
		_, out := do(ctx, fmt.Sprintf(`mutation { saveEndpoint(input: {name: "e%d", templateId: "%s", gpuIds: "AMPERE_16", env: [{key: "K", value: "v"}]}) { id } }`, i, tpl))
		if msg, _ := firstError(out); msg != "" {
			t.Fatalf("saveEndpoint: %s", msg)
		}
	}
	return h
}
