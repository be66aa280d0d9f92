package graphqlapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gqlerrors "github.com/graph-gophers/graphql-go/errors"
	"github.com/graph-gophers/graphql-go/introspection"
	"github.com/graph-gophers/graphql-go/trace/tracer"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"berth/httplimit"
)

// One GraphQL document can ask for far more work than its size suggests:
// graphql-go's validation compares every pair of same-named fields (10,000
// `__typename`s took 80 s and 3.7 GB), every alias runs its resolvers again
// over whole lists (10,000 aliases of `myself { endpoints { id } }` took
// 53 s and 1.8 GB), and every aliased mutation writes. So a document is
// measured before graphql-go sees it, by a linear parse of its own
// (github.com/vektah/gqlparser/v2's parser, which also bounds nesting and
// tokens), and refused with an error naming the limit; what lists actually
// hold is counted while it runs. The figures for the documents the tools
// send are in docs/hardening.md; every limit is far above them.

// Limits bound one request. The zero value of a field is its default.
type Limits struct {
	// Tokens: lexical tokens of the document [20,000]. The biggest
	// document the tools send has ≈ 500.
	Tokens int
	// Fields: field selections of the document with fragment spreads
	// expanded, over all its operations [2,000].
	Fields int
	// Aliases: aliased fields, fragments expanded [100]. The tools
	// send none.
	Aliases int
	// Depth: nesting of fields, fragments expanded [15]. The standard
	// introspection query of GraphQL tools (graphql-js) reaches 13.
	Depth int
	// Mutations: mutation fields (root fields of mutation operations)
	// [10]. The tools send one per request.
	Mutations int
	// FanOut: fields the operation would resolve if each list held
	// ListSize objects [250,000].
	FanOut   int
	ListSize int // [100]
	// Resolved: fields actually resolved while the request runs, whatever
	// the lists hold [200,000]: past it the request is stopped.
	Resolved int
	// OverlapPairs: pairs of same-named fields graphql-go's validation
	// may compare [20,000] (its OverlapValidationLimit).
	OverlapPairs int

	// InFlight bounds the sum over concurrent requests of the fields they
	// resolve [400,000]: memory follows it (≈1 KB a field), and the limits
	// above bound one request only. A request is admitted with its FanOut
	// (at most Resolved) and takes more as it resolves past that; one
	// that finds no room waits up to InFlightWait [2s] in arrival order,
	// then is refused — 503, Retry-After, code SERVER_BUSY — and one that
	// runs out of room while it resolves is stopped the same way. A
	// request of CheapFields [1,000] or fewer is never made to wait.
	InFlight     int
	InFlightWait time.Duration
	CheapFields  int
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Tokens, 20000)
	def(&l.Fields, 2000)
	def(&l.Aliases, 100)
	def(&l.Depth, 15)
	def(&l.Mutations, 10)
	def(&l.FanOut, 250000)
	def(&l.ListSize, 100)
	def(&l.Resolved, 200000)
	def(&l.OverlapPairs, 20000)
	def(&l.InFlight, 400000)
	def(&l.CheapFields, 1000)
	if l.InFlightWait <= 0 {
		l.InFlightWait = 2 * time.Second
	}
	return l
}

// Cost is what a document asks for.
type Cost struct {
	Fields, Aliases, Depth, Mutations, FanOut int
	// Mutating: the document has a mutation operation.
	Mutating bool
	// touched is every "Type.field" the document selects (access.go).
	touched map[string]bool
}

// errTooCostly is a refusal of a document before it runs: a GraphQL error
// naming the limit, with the figure and the limit as extensions.
func errTooCostly(limit string, got, max int, what string) *gqlerrors.QueryError {
	return &gqlerrors.QueryError{
		Message:    fmt.Sprintf("query too costly: %s %d %s (the limit is %d); split it into smaller requests", limit, got, what, max),
		Extensions: map[string]any{"code": "QUERY_TOO_COSTLY", "limit": limit, "value": got, "max": max},
	}
}

// schemaShape is what the cost walk needs of the schema: for each object
// or interface type, each field's named type and whether it is a list of
// objects (a list of scalars resolves once).
type schemaShape struct {
	fields       map[string]map[string]fieldShape
	query, mutat string
}

type fieldShape struct {
	typ  string
	list bool // a list, whose elements' fields resolve once per element
}

func newSchemaShape(sdl string) (*schemaShape, error) {
	doc, err := parser.ParseSchema(&ast.Source{Name: "schema.graphql", Input: sdl})
	if err != nil {
		return nil, err
	}
	s := &schemaShape{fields: map[string]map[string]fieldShape{}, query: "Query", mutat: "Mutation"}
	for _, d := range doc.Definitions {
		if d.Kind != ast.Object && d.Kind != ast.Interface {
			continue
		}
		m := map[string]fieldShape{}
		for _, f := range d.Fields {
			t, list := f.Type, false
			for t.Elem != nil {
				list, t = true, t.Elem
			}
			m[f.Name] = fieldShape{typ: t.NamedType, list: list}
		}
		s.fields[d.Name] = m
	}
	for _, sd := range doc.Schema {
		for _, ot := range sd.OperationTypes {
			switch ot.Operation {
			case ast.Query:
				s.query = ot.Type
			case ast.Mutation:
				s.mutat = ot.Type
			}
		}
	}
	return s, nil
}

// measure parses query and adds up what it asks for, refusing it with the
// first limit it passes. It never runs anything and is linear in the
// document: fragments are measured once each (a cycle is left to
// graphql-go's validation, which refuses it).
func (l Limits) measure(s *schemaShape, query string) (Cost, *gqlerrors.QueryError) {
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Name: "query", Input: query}, l.Tokens)
	if err != nil {
		msg := err.Error()
		var ge interface{ Unwrap() []error }
		if errors.As(err, &ge) && len(ge.Unwrap()) > 0 {
			msg = ge.Unwrap()[0].Error()
		}
		switch {
		case strings.Contains(msg, "exceeded token limit"):
			return Cost{}, errTooCostly("tokens", l.Tokens+1, l.Tokens, "lexical tokens or more")
		case strings.Contains(msg, "exceeded maximum nesting depth"):
			return Cost{}, errTooCostly("depth", parser.MaxNestingDepth, l.Depth, "levels of nesting or more")
		}
		// Not measured is not run: a document this parser refuses is
		// refused, so none escapes the limits by being read differently
		// by graphql-go.
		return Cost{}, &gqlerrors.QueryError{Message: "syntax error: " + msg, Extensions: map[string]any{"code": "GRAPHQL_PARSE_FAILED"}}
	}
	w := &costWalk{s: s, l: l, doc: doc, frags: map[string]*fragCost{}, touched: map[string]bool{}}
	total := Cost{touched: w.touched}
	for _, op := range doc.Operations {
		root := s.query
		if op.Operation == ast.Mutation {
			root = s.mutat
		}
		c := w.selections(op.SelectionSet, root, 1)
		total.Fields += c.fields
		total.Aliases += c.aliases
		total.Depth = max(total.Depth, c.depth)
		total.FanOut = satAdd(total.FanOut, c.fanOut)
		if op.Operation == ast.Mutation {
			total.Mutations += c.roots
			total.Mutating = true
		}
	}
	switch {
	case total.Fields > l.Fields:
		return total, errTooCostly("fields", total.Fields, l.Fields, "field selections with fragments expanded")
	case total.Aliases > l.Aliases:
		return total, errTooCostly("aliases", total.Aliases, l.Aliases, "aliased fields with fragments expanded")
	case total.Depth > l.Depth:
		return total, errTooCostly("depth", total.Depth, l.Depth, "levels of nested selections")
	case total.Mutations > l.Mutations:
		return total, errTooCostly("mutations", total.Mutations, l.Mutations, "mutation fields in one request")
	case total.FanOut > l.FanOut:
		return total, errTooCostly("fanOut", total.FanOut, l.FanOut, fmt.Sprintf("fields to resolve, counting %d objects per list", l.ListSize))
	}
	return total, nil
}

// selCost is the cost of one selection set under a parent of one type.
type selCost struct {
	fields, aliases, depth, fanOut int
	roots                          int // fields directly in the set (spreads expanded)
}

type fragCost struct {
	c    selCost
	done bool
}

type costWalk struct {
	s     *schemaShape
	l     Limits
	doc   *ast.QueryDocument
	frags map[string]*fragCost // by name; a fragment's cost does not depend on where it is spread
	// touched collects "Type.field" of every selection (bounded by the
	// document's tokens).
	touched map[string]bool
}

// satAdd and satMul saturate: the counts only need to say "over".
func satAdd(a, b int) int {
	if a > 1<<40 || b > 1<<40 {
		return 1 << 41
	}
	return a + b
}

func satMul(a, b int) int {
	if a != 0 && b > (1<<41)/a {
		return 1 << 41
	}
	return a * b
}

// selections measures set, whose fields belong to type typ, at depth
// level (the operation's own set is level 1).
func (w *costWalk) selections(set ast.SelectionSet, typ string, level int) selCost {
	var c selCost
	add := func(o selCost) {
		c.fields = satAdd(c.fields, o.fields)
		c.aliases = satAdd(c.aliases, o.aliases)
		c.depth = max(c.depth, o.depth)
		c.fanOut = satAdd(c.fanOut, o.fanOut)
		c.roots = satAdd(c.roots, o.roots)
	}
	for _, sel := range set {
		switch sel := sel.(type) {
		case *ast.Field:
			w.touched[typ+"."+sel.Name] = true
			f := selCost{fields: 1, fanOut: 1, roots: 1, depth: level}
			if sel.Alias != "" && sel.Alias != sel.Name {
				f.aliases = 1
			}
			if len(sel.SelectionSet) > 0 {
				shape := w.s.fields[typ][sel.Name]
				sub := w.selections(sel.SelectionSet, shape.typ, level+1)
				f.fields = satAdd(f.fields, sub.fields)
				f.aliases = satAdd(f.aliases, sub.aliases)
				f.depth = max(f.depth, sub.depth)
				per := sub.fanOut
				if shape.list {
					per = satMul(per, w.l.ListSize)
				}
				f.fanOut = satAdd(f.fanOut, per)
			}
			add(f)
		case *ast.InlineFragment:
			t := typ
			if sel.TypeCondition != "" {
				t = sel.TypeCondition
			}
			add(w.selections(sel.SelectionSet, t, level))
		case *ast.FragmentSpread:
			add(w.fragment(sel.Name, level))
		}
	}
	return c
}

// fragment measures a named fragment once, at level 1, and shifts its
// depth to where it is spread.
func (w *costWalk) fragment(name string, level int) selCost {
	fc := w.frags[name]
	if fc == nil {
		def := w.doc.Fragments.ForName(name)
		if def == nil {
			return selCost{} // an unknown fragment: graphql-go refuses it
		}
		fc = &fragCost{}
		w.frags[name] = fc // a cycle finds it unfinished and counts nothing
		fc.c = w.selections(def.SelectionSet, def.TypeCondition, 1)
		fc.done = true
	}
	if !fc.done {
		return selCost{}
	}
	c := fc.c
	if c.depth > 0 {
		c.depth += level - 1
	}
	return c
}

// resolveBudget counts the fields a request resolves (graphql-go's tracer
// sees each) and stops the request past its limit.
type resolveBudget struct {
	max    int64
	n      atomic.Int64
	cancel context.CancelCauseFunc

	// The request's share of the in-flight bound (Limits.InFlight): held
	// fields, taken from gate in steps of at least growStep as n passes
	// them.
	gate *httplimit.Gate
	held atomic.Int64
	mu   sync.Mutex
}

// growStep is the least a running request takes from the gate at a time.
const growStep = 1000

// errInFlight is the cause of a request stopped because the requests in
// flight hold the whole Limits.InFlight.
var errInFlight = errors.New("in-flight bound reached")

// grow takes room for n resolved fields from the gate, or stops the
// request.
func (b *resolveBudget) grow(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	held := b.held.Load()
	if n <= held {
		return
	}
	step := max(n-held, growStep)
	if !b.gate.TryAcquire(step) {
		b.cancel(errInFlight)
		return
	}
	b.held.Add(step)
}

type budgetKey struct{}

// errResolveBudget is the cause of a request stopped by its budget.
var errResolveBudget = errors.New("resolve budget exhausted")

// costTracer is the schema's tracer: it finds the request's budget in the
// context.
type costTracer struct{}

func noopFinish(*gqlerrors.QueryError) {}

func (costTracer) TraceQuery(ctx context.Context, _ string, _ string, _ map[string]any, _ map[string]*introspection.Type) (context.Context, tracer.QueryFinishFunc) {
	return ctx, func([]*gqlerrors.QueryError) {}
}

func (costTracer) TraceField(ctx context.Context, _, _, _ string, _ bool, _ map[string]any) (context.Context, tracer.FieldFinishFunc) {
	if b, ok := ctx.Value(budgetKey{}).(*resolveBudget); ok {
		switch n := b.n.Add(1); {
		case n == b.max+1:
			b.cancel(errResolveBudget)
		case n > b.held.Load() && b.gate != nil:
			b.grow(n)
		}
	}
	return ctx, noopFinish
}
