// Package graphqlapi serves POST /graphql: the management calls that
// runpod-python (inline query strings) and runpodctl (with variables) send
// to RunPod's GraphQL API. The schema is schema.graphql, parsed strictly by
// github.com/graph-gophers/graphql-go against the resolvers here; every
// resolver calls berth/mgmt, the same rules as /v1 and /v2.
//
// The HTTP server (httpapi) mounts the Handler behind the API key.
package graphqlapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/graph-gophers/graphql-go"
	gqlerrors "github.com/graph-gophers/graphql-go/errors"
	gqllog "github.com/graph-gophers/graphql-go/log"
	"github.com/jonboulle/clockwork"

	"berth/gpu"
	"berth/httplimit"
	"berth/mgmt"
	"berth/store"
)

// Schema is the GraphQL schema served.
//
//go:embed schema.graphql
var Schema string

// maxBody bounds a request body; query documents are small.
const maxBody = 1 << 20

// Config holds a Handler's dependencies.
type Config struct {
	Mgmt   *mgmt.Service
	Logger *slog.Logger    // default: slog.Default()
	Clock  clockwork.Clock // default: the real clock
	// GPUs lists this host's GPUs with their holders. Optional: nil is a
	// host without GPUs.
	GPUs func() []gpu.Status
	// Workers lists an endpoint's workers. Optional: nil lists none.
	Workers func(endpointID string) []mgmt.Worker
	// Models is an endpoint's models with their downloads. Optional.
	Models func(e store.Endpoint) []mgmt.ModelStatus
	// Limits bound what one request may cost (cost.go); zero fields are
	// the defaults.
	Limits Limits
	// Timeout stops a query that runs longer [60s]; mutations are not
	// cut by a timer.
	Timeout time.Duration
}

// Handler answers GraphQL requests.
type Handler struct {
	gate    *httplimit.Gate // Limits.InFlight
	schema  *graphql.Schema
	log     *slog.Logger
	limits  Limits
	shape   *schemaShape
	timeout time.Duration
	mg      *mgmt.Service // the audit trail (access.go)
}

// New parses the schema against the resolvers: an error means they
// disagree (a field without a resolver, a wrong Go type).
func New(cfg Config) (*Handler, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Models == nil {
		cfg.Models = func(store.Endpoint) []mgmt.ModelStatus { return nil }
	}
	if cfg.Workers == nil {
		cfg.Workers = func(string) []mgmt.Worker { return nil }
	}
	if cfg.GPUs == nil {
		cfg.GPUs = func() []gpu.Status { return nil }
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	shape, err := newSchemaShape(Schema)
	if err != nil {
		return nil, fmt.Errorf("graphql schema: %w", err)
	}
	s, err := graphql.ParseSchema(Schema, &resolver{cfg: cfg}, graphql.UseFieldResolvers(),
		graphql.MaxDepth(cfg.Limits.Depth), graphql.MaxQueryLength(maxBody), graphql.PanicHandler(panicHandler{}),
		graphql.MaxSelections(cfg.Limits.Fields), graphql.OverlapValidationLimit(cfg.Limits.OverlapPairs),
		graphql.Tracer(costTracer{}),
		graphql.Logger(gqllog.LoggerFunc(func(ctx context.Context, v any) {
			cfg.Logger.ErrorContext(ctx, "graphql resolver panic", "panic", v, "stack", string(debug.Stack()))
		})))
	if err != nil {
		return nil, fmt.Errorf("graphql schema: %w", err)
	}
	return &Handler{schema: s, log: cfg.Logger, limits: cfg.Limits, shape: shape, timeout: cfg.Timeout,
		gate: httplimit.NewGate(int64(cfg.Limits.InFlight)), mg: cfg.Mgmt}, nil
}

// Validate checks a document against the schema without running it (the
// errors a request with it would get before any resolver ran).
func (h *Handler) Validate(doc string) []*gqlerrors.QueryError { return h.schema.Validate(doc) }

// request is a GraphQL-over-HTTP request body.
type request struct {
	Query         string         `json:"query"`
	OperationName string         `json:"operationName"`
	Variables     map[string]any `json:"variables"`
}

// response always carries "data" (null when nothing ran): runpod-python
// reads data after checking errors, and a reply without the key crashes it.
type response struct {
	Data   json.RawMessage         `json:"data"`
	Errors []*gqlerrors.QueryError `json:"errors,omitempty"`
	// Extensions holds "warnings" (warnings.go).
	Extensions map[string]any `json:"extensions,omitempty"`
}

// ServeHTTP runs one request. GraphQL errors (syntax, validation, a
// refused mutation) answer 200 with errors[0].message, as RunPod does and
// the tools expect; a body that is not a GraphQL request answers 400 in
// the same shape.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxBody))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return
	}
	if err := httplimit.CheckJSONValues(body); err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	}
	// Numbers decode as float64, which graphql-go coerces to Int when
	// integral.
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "body must be a JSON object {\"query\": ..., \"variables\": {...}, \"operationName\": ...}: "+err.Error())
		return
	}
	if strings.TrimSpace(req.Query) == "" {
		writeError(w, http.StatusBadRequest, "query is required")
		return
	}
	if req.Variables == nil {
		req.Variables = map[string]any{}
	}
	cost, qerr := h.limits.measure(h.shape, req.Query)
	if qerr == nil {
		qerr = checkFields(r.Context(), h.shape, cost.touched) // access.go
		if qerr != nil && cost.Mutating {
			h.auditMutations(r.Context(), cost.touched, nil, []*gqlerrors.QueryError{qerr})
		}
	}
	if qerr != nil {
		writeJSON(w, http.StatusOK, response{Data: json.RawMessage("null"), Errors: []*gqlerrors.QueryError{qerr}})
		return
	}
	// The request's work stops when its client leaves, when it resolves
	// more fields than its budget, or — a query — when it runs past the
	// timeout. A mutation is not cut by a timer: creating a pod waits for
	// its image, and mgmt finishes a change it has begun rather than leave
	// half of it; the mutations limit bounds how many run.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if !cost.Mutating {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, h.timeout, errTimeout)
		defer stop()
	}
	ctx, warnings := withWarnings(ctx)
	budget := &resolveBudget{max: int64(h.limits.Resolved), cancel: cancel, gate: h.gate}
	// Admitted with what it asks for (at most its resolve budget); a cheap
	// request does not wait behind expensive ones.
	admit := h.gate.AcquireN(int64(max(1, min(cost.FanOut, h.limits.Resolved))))
	if admit <= int64(h.limits.CheapFields) {
		h.gate.Force(admit)
	} else if !h.gate.Acquire(ctx, admit, h.limits.InFlightWait) {
		if r.Context().Err() == nil {
			h.busy(w, r, fmt.Sprintf("it waited %s for room", h.limits.InFlightWait))
		}
		return
	}
	budget.held.Store(admit)
	defer func() { h.gate.Release(budget.held.Load()) }()
	res := h.schema.Exec(context.WithValue(ctx, budgetKey{}, budget), req.Query, req.OperationName, req.Variables)
	out := response{Data: res.Data, Errors: res.Errors}
	if cost.Mutating {
		h.auditMutations(r.Context(), cost.touched, res.Data, res.Errors)
	}
	if ws := warnings.all(); len(ws) > 0 {
		out.Extensions = map[string]any{"warnings": ws}
		for _, w := range ws {
			h.log.WarnContext(ctx, "graphql: accepted with a warning", "warning", w)
		}
	}
	switch cause := context.Cause(ctx); {
	case r.Context().Err() != nil:
		return // nobody to answer
	case errors.Is(cause, errInFlight):
		h.busy(w, r, "it was stopped while it ran")
		return
	case errors.Is(cause, errResolveBudget):
		out = response{Errors: []*gqlerrors.QueryError{errTooCostly("resolved", h.limits.Resolved+1, h.limits.Resolved, "fields or more to resolve: it was stopped")}}
	case errors.Is(cause, errTimeout):
		out = response{Errors: []*gqlerrors.QueryError{{Message: fmt.Sprintf("the request ran longer than %s and was stopped", h.timeout),
			Extensions: map[string]any{"code": "TIMEOUT"}}}}
	}
	if len(out.Data) == 0 {
		out.Data = json.RawMessage("null")
	}
	for _, e := range out.Errors {
		explainRefused(e)
		nameVariable(e, req.Variables)
		explainInt(e, req.Query)
		e.Message = mgmt.ClipMessage(e.Message)
		h.logError(r.Context(), e)
	}
	writeJSON(w, http.StatusOK, out)
}

// busy refuses a request for which the requests in flight leave no room
// (Limits.InFlight): 503 with Retry-After and a GraphQL error, which
// runpod-python raises with its message and runpodctl prints.
func (h *Handler) busy(w http.ResponseWriter, r *http.Request, what string) {
	e := &gqlerrors.QueryError{
		Message: fmt.Sprintf("server busy: the GraphQL requests running hold all %d fields Berth resolves at once, and %s; retry in a moment, or ask for less (fewer aliases, smaller lists)",
			h.limits.InFlight, what),
		Extensions: map[string]any{"code": "SERVER_BUSY", "limit": "inFlight", "max": h.limits.InFlight},
	}
	h.log.WarnContext(r.Context(), "graphql: refused, server busy", "inFlight", h.gate.InUse(), "max", h.limits.InFlight, "why", what)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, response{Data: json.RawMessage("null"), Errors: []*gqlerrors.QueryError{e}})
}

// errTimeout is the cause of a request stopped by Config.Timeout.
var errTimeout = errors.New("graphql request timeout")

// refusedFields are RunPod operations the schema leaves out on purpose
// (the Hub and the model repository are declared in the schema and refused
// by their resolvers, refused.go): asked for, they answer why instead of
// graphql-go's "Cannot query field".
var refusedFields = map[string]string{
	"secretCreate": "secrets: Berth keeps none; put the value in the template's or endpoint's env",
	"secretDelete": "secrets: Berth keeps none; put the value in the template's or endpoint's env",
}

var unknownRootRe = regexp.MustCompile(`^Cannot query field "([A-Za-z0-9_]+)" on type "(Query|Mutation)"`)

// explainRefused turns the validation error about a RunPod operation Berth
// refuses into one that says why.
func explainRefused(e *gqlerrors.QueryError) {
	m := unknownRootRe.FindStringSubmatch(e.Message)
	if m == nil {
		return
	}
	why, ok := refusedFields[m[1]]
	if !ok {
		return
	}
	e.Message = m[1] + ": " + why
	if e.Extensions == nil {
		e.Extensions = map[string]any{}
	}
	e.Extensions["code"], e.Extensions["field"] = "UNSUPPORTED", m[1]
}

// nameVariable adds the variable path to graphql-go's message about a
// explainInt completes graphql-go's refusal of an integer too large for
// GraphQL's Int ("Int cannot represent non 32-bit signed integer value",
// or a variable's "not a 32-bit integer") with the field — found left of
// the value's location in the query — and mgmt's range for it; and its
// refusal of a literal with a fraction (3.5, a Float) with the field.
func explainInt(e *gqlerrors.QueryError, query string) {
	tooLarge := strings.Contains(e.Message, "32-bit")
	if !tooLarge && !strings.HasPrefix(e.Message, "Int cannot represent non-integer value") {
		return
	}
	field, _ := e.Extensions["field"].(string)
	if field == "" && len(e.Locations) == 1 {
		lines := strings.Split(query, "\n")
		if l := e.Locations[0]; l.Line >= 1 && l.Line <= len(lines) && l.Column >= 1 && l.Column-1 <= len(lines[l.Line-1]) {
			left := strings.TrimRight(lines[l.Line-1][:l.Column-1], " \t:")
			field = left[strings.LastIndexFunc(left, func(r rune) bool {
				return !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
			})+1:]
		}
	}
	if field == "" {
		return
	}
	if e.Extensions == nil {
		e.Extensions = map[string]any{}
	}
	e.Extensions["code"], e.Extensions["field"] = "BAD_USER_INPUT", field
	if !strings.HasPrefix(e.Message, "variable $") {
		e.Message = field + ": " + e.Message
	}
	if l, ok := mgmt.LimitOf(field); ok && tooLarge {
		e.Message += fmt.Sprintf(" (%s must be %s)", field, l.Range())
	}
}

// variable of the wrong JSON type ("could not unmarshal "many" (string)
// into int32"), which names the value but not the field: it finds the
// value among the variables.
func nameVariable(e *gqlerrors.QueryError, vars map[string]any) {
	const prefix = "could not unmarshal "
	rest, ok := strings.CutPrefix(e.Message, prefix)
	if !ok {
		return
	}
	var find func(path string, v any) string
	find = func(path string, v any) string {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				if p := find(path+"."+k, v[k]); p != "" {
					return p
				}
			}
		case []any:
			for i, el := range v {
				if p := find(fmt.Sprintf("%s[%d]", path, i), el); p != "" {
					return p
				}
			}
		default:
			if strings.HasPrefix(rest, fmt.Sprintf("%#v (%T) ", v, v)) {
				return path
			}
		}
		return ""
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if p := find(k, vars[k]); p != "" {
			field := p[strings.LastIndexAny(p, ".")+1:]
			e.Message = "variable $" + p + ": " + e.Message
			if e.Extensions == nil {
				e.Extensions = map[string]any{}
			}
			e.Extensions["code"], e.Extensions["field"] = "BAD_USER_INPUT", field
			return
		}
	}
}

// logError logs internal failures; refusals are the caller's business.
func (h *Handler) logError(ctx context.Context, e *gqlerrors.QueryError) {
	var me *mgmt.Error
	if e.ResolverError != nil && !errors.As(e.ResolverError, &me) {
		h.log.ErrorContext(ctx, "graphql resolver failed", "path", e.Path, "err", e.ResolverError)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"data":null,"errors":[{"message":"encode response"}]}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// writeError answers a request that never reached the executor.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, response{Data: json.RawMessage("null"), Errors: []*gqlerrors.QueryError{{Message: mgmt.ClipMessage(msg)}}})
}

// WriteError answers in the GraphQL error shape: httpapi uses it for the
// 401 of a missing key and its other refusals on /graphql.
func WriteError(w http.ResponseWriter, code int, msg string) { writeError(w, code, msg) }

// panicHandler answers a resolver's panic (logged by the Logger option)
// as an internal error, without the panic's text.
type panicHandler struct{}

func (panicHandler) MakePanicError(context.Context, any) *gqlerrors.QueryError {
	return &gqlerrors.QueryError{Message: "internal error"}
}

// gqlError is a mgmt refusal as a GraphQL error: its message (naming the
// field) and extensions the tools ignore but people can read.
type gqlError struct{ e *mgmt.Error }

func (g gqlError) Error() string { return g.e.Msg }
func (g gqlError) Unwrap() error { return g.e }
func (g gqlError) Extensions() map[string]any {
	ext := map[string]any{"code": codeOf(g.e.Kind)}
	if g.e.Field != "" {
		ext["field"] = g.e.Field
	}
	return ext
}

func codeOf(k mgmt.Kind) string {
	switch k {
	case mgmt.Invalid:
		return "BAD_USER_INPUT"
	case mgmt.NotFound:
		return "NOT_FOUND"
	case mgmt.Conflict:
		return "CONFLICT"
	case mgmt.Unavailable:
		return "UNAVAILABLE"
	case mgmt.Unsupported:
		return "UNSUPPORTED"
	case mgmt.Forbidden:
		return "FORBIDDEN"
	}
	return "INTERNAL_SERVER_ERROR"
}

// wrap turns a mgmt error into one with extensions; internal errors keep
// their text (the operator's own server) and are logged by logError.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	switch e := err.(type) {
	case gqlError, internalError:
		return e // already wrapped
	}
	var me *mgmt.Error
	if errors.As(err, &me) {
		return gqlError{me}
	}
	return internalError{err}
}

// internalError is a failure that is not a refusal (a database error).
type internalError struct{ err error }

func (e internalError) Error() string { return "internal error: " + e.err.Error() }
func (e internalError) Unwrap() error { return e.err }

// renamed is err with mgmt's field names replaced by the ones the
// GraphQL input uses (gpuTypeIds → gpuIds), in Field and the message.
func renamed(err error, names map[string]string) error {
	var me *mgmt.Error
	if !errors.As(err, &me) {
		return err
	}
	to, ok := names[me.Field]
	if !ok {
		return err
	}
	c := *me
	c.Field, c.Msg = to, strings.ReplaceAll(me.Msg, me.Field, to)
	return &c
}

// unsupported is a refusal of what one host can never do.
func unsupported(field, format string, a ...any) error {
	return gqlError{&mgmt.Error{Kind: mgmt.Unsupported, Field: field, Msg: fmt.Sprintf(format, a...)}}
}

// invalid is a refusal of bad input decoded here.
func invalid(field, format string, a ...any) error {
	return wrap(mgmt.InvalidInput(field, format, a...))
}
