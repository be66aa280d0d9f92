// Package v1api serves RunPod's REST v1 management API under /v1 and
// Berth's /v1 extensions (container logs, GPUs, job views, worker-env,
// backup): thin adapters that decode v1's shapes (package v1input), call
// package mgmt, and encode its answers, mapping its typed errors to v1's
// statuses and {"message": …} bodies. They decide nothing: the rules are
// mgmt's. httpapi mounts it beside REST v2 (httpapi/v2api).
package v1api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/apply"
	"berth/gpu"
	"berth/httpapi/internal/httpx"
	"berth/httplimit"
	"berth/mgmt"
	"berth/queue"
	"berth/series"
	"berth/store"
	"berth/v1input"
)

// Queue is what v1 reads of the job queue.
type Queue interface {
	Health(endpointID string) queue.Health
	Jobs(endpointID string, f queue.JobFilter) ([]queue.JobView, int)
	Job(endpointID, id string) (queue.JobView, error)
	Queue(endpointID string) queue.QueueView
	RegisterWorker(endpointID string, external bool) (queue.Registration, error)
}

// Config holds the API's dependencies; the optional ones may be nil.
type Config struct {
	Mgmt   *mgmt.Service
	Queue  Queue
	Store  *store.DB // GET /v1/backup
	Logger *slog.Logger

	// Authorized reports whether r carries the operator's key.
	Authorized func(r *http.Request) bool
	// Instrument wraps a handler with metrics under a route name.
	// Optional.
	Instrument func(route string, h http.Handler) http.Handler

	// Workers lists an endpoint's workers (includeWorkers). Optional.
	Workers func(endpointID string) []mgmt.Worker
	// EndpointStatus is the runtime's status of an endpoint, shown as the
	// endpoint's "status" (JSON as is). Optional.
	EndpointStatus func(endpointID string) any
	// Models is an endpoint's models with their downloads. Optional.
	Models func(e store.Endpoint) []mgmt.ModelStatus
	// GPUs lists this host's GPUs with their holders (GET /v1/gpus).
	// Optional: nil lists none.
	GPUs func() []gpu.Status
	// WorkerLogs and PodLogs return a container's log as text (tail > 0:
	// its last tail lines; follow: stream until ctx ends or the container
	// stops; jobID: only that job's runpod JSON lines). They wrap
	// ErrNoSuchWorker / ErrNoSuchPod when there is no such container.
	// Optional: nil answers 503.
	WorkerLogs func(ctx context.Context, endpointID, workerID string, follow bool, tail int, jobID string) (io.ReadCloser, error)
	PodLogs    func(ctx context.Context, podID string, follow bool, tail int) (io.ReadCloser, error)
	// PingInterval is the RUNPOD_PING_INTERVAL worker-env gives [10s].
	PingInterval time.Duration
	// BackupReserve is the free space GET /v1/backup leaves in the data
	// directory after its temporary copy [256 MiB]; below it the backup
	// is refused (507).
	BackupReserve int64
	// JobListBytes bounds the inputs, outputs and errors one job list
	// carries (queue.JobFilter.MaxBytes) [32 MiB].
	JobListBytes int
	// Series is an endpoint's last hour or day (GET
	// /v1/endpoints/ID/metrics). Optional: nil answers 503.
	Series func(endpointID string, w series.Window) series.View
	// Builds runs the builds of POST /v1/apply (*builder.Service).
	// Optional: nil refuses a file that builds.
	Builds apply.Builder
}

// API is the /v1 management API.
type API struct {
	cfg     Config
	backups chan struct{} // backups being made (maxBackups)
}

// New returns the API.
func New(cfg Config) *API {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Instrument == nil {
		cfg.Instrument = func(_ string, h http.Handler) http.Handler { return h }
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 10 * time.Second
	}
	if cfg.BackupReserve <= 0 {
		cfg.BackupReserve = 256 << 20
	}
	if cfg.JobListBytes <= 0 {
		cfg.JobListBytes = 32 << 20
	}
	return &API{cfg: cfg, backups: make(chan struct{}, maxBackups)}
}

// Mount adds the /v1 routes to r; extra routes (httpapi's /v1/openapi.json
// and /v1/docs) come first so they share v1's prefix.
func (a *API) Mount(r *mux.Router) {
	const get, post, patch, del = http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete
	v1 := r.PathPrefix("/v1").Subrouter()
	route := func(method, path, name string, h http.HandlerFunc) {
		v1.Handle(path, a.cfg.Instrument(name, a.auth(h))).Methods(method)
	}

	route(post, "/templates", "templates.create", a.createTemplate)
	route(get, "/templates", "templates.list", a.listTemplates)
	route(get, "/templates/{templateId}", "templates.get", a.getTemplate)
	route(patch, "/templates/{templateId}", "templates.update", a.updateTemplate)
	route(post, "/templates/{templateId}/update", "templates.update", a.updateTemplate)
	route(del, "/templates/{templateId}", "templates.delete", a.deleteTemplate)

	route(post, "/endpoints", "endpoints.create", a.createEndpoint)
	route(get, "/endpoints", "endpoints.list", a.listEndpoints)
	route(get, "/endpoints/{endpointId}", "endpoints.get", a.getEndpoint)
	route(patch, "/endpoints/{endpointId}", "endpoints.update", a.updateEndpoint)
	route(post, "/endpoints/{endpointId}/update", "endpoints.update", a.updateEndpoint)
	route(del, "/endpoints/{endpointId}", "endpoints.delete", a.deleteEndpoint)

	route(post, "/pods", "pods.create", a.createPod)
	route(get, "/pods", "pods.list", a.listPods)
	route(get, "/pods/{podId}", "pods.get", a.getPod)
	route(patch, "/pods/{podId}", "pods.update", a.updatePod)
	route(post, "/pods/{podId}/update", "pods.update", a.updatePod)
	route(del, "/pods/{podId}", "pods.delete", a.deletePod)
	for _, act := range []string{"start", "stop", "reset", "restart"} {
		route(post, "/pods/{podId}/"+act, "pods."+act, a.podAction(act))
	}

	route(post, "/networkvolumes", "networkvolumes.create", a.createVolume)
	route(get, "/networkvolumes", "networkvolumes.list", a.listVolumes)
	route(get, "/networkvolumes/{networkVolumeId}", "networkvolumes.get", a.getVolume)
	route(patch, "/networkvolumes/{networkVolumeId}", "networkvolumes.update", a.updateVolume)
	route(post, "/networkvolumes/{networkVolumeId}/update", "networkvolumes.update", a.updateVolume)
	route(del, "/networkvolumes/{networkVolumeId}", "networkvolumes.delete", a.deleteVolume)

	route(post, "/containerregistryauth", "registryauth.create", a.createRegistryAuth)
	route(get, "/containerregistryauth", "registryauth.list", a.listRegistryAuths)
	route(get, "/containerregistryauth/{containerRegistryAuthId}", "registryauth.get", a.getRegistryAuth)
	route(del, "/containerregistryauth/{containerRegistryAuthId}", "registryauth.delete", a.deleteRegistryAuth)

	route(get, "/billing/pods", "billing.pods", a.billing(mgmt.BillPods))
	route(get, "/billing/endpoints", "billing.endpoints", a.billing(mgmt.BillEndpoints))
	route(get, "/billing/networkvolumes", "billing.networkvolumes", a.billing(mgmt.BillVolumes))

	// Berth's extensions.
	route(get, "/endpoints/{endpointId}/worker-env", "endpoints.workerEnv", a.workerEnv)
	route(get, "/endpoints/{endpointId}/workers/{workerId}/logs", "endpoints.workerLogs", a.workerLogs)
	route(get, "/pods/{podId}/logs", "pods.logs", a.podLogs)
	route(get, "/gpus", "gpus.list", a.listGPUs)
	route(get, "/backup", "backup", a.backup)
	route(get, "/endpoints/{endpointId}/jobs", "endpoints.jobs", a.listJobs)
	route(get, "/endpoints/{endpointId}/jobs/{jobId}", "endpoints.job", a.getJob)
	route(get, "/endpoints/{endpointId}/queue", "endpoints.queue", a.getQueue)
	route(get, "/endpoints/{endpointId}/metrics", "endpoints.metrics", a.getSeries)
	route(post, "/apply", "apply", a.applyFile)      // apply.go
	route(post, "/keys", "keys.create", a.createKey) // keys.go
	route(get, "/keys", "keys.list", a.listKeys)
	route(get, "/keys/{keyId}", "keys.get", a.getKey)
	route(patch, "/keys/{keyId}", "keys.update", a.updateKey)
	route(del, "/keys/{keyId}", "keys.delete", a.deleteKey)
	route(get, "/audit", "audit", a.listAudit)
}

func (a *API) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.cfg.Authorized == nil || !a.cfg.Authorized(r) {
			writeErr(w, http.StatusUnauthorized, "missing or invalid API key")
			return
		}
		h(w, r)
	}
}

// ---- answers ----

func writeJSON(w http.ResponseWriter, code int, v any) { httpx.WriteJSON(w, code, v) }

// writeErr answers v1's error shape, {"message": …}.
func writeErr(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": mgmt.ClipMessage(msg)})
}

func noContent(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }

func (a *API) internal(w http.ResponseWriter, r *http.Request, err error) {
	a.cfg.Logger.Error("request failed", append(routeAttrs(r), "path", r.URL.Path, "err", err)...)
	code := httpx.FailureCode(w, err) // 503 for a full disk or a damaged file
	writeErr(w, code, httpx.FailureMessage(code, err))
}

// routeAttrs are the log attributes of a request's ids.
func routeAttrs(r *http.Request) []any {
	var out []any
	for _, kv := range [][2]string{{"endpointId", "endpoint"}, {"jobId", "job"}, {"workerId", "worker"}, {"podId", "pod"}} {
		if v := mux.Vars(r)[kv[0]]; v != "" {
			out = append(out, kv[1], v)
		}
	}
	return out
}

// badRequest is a request v1 cannot decode (400).
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func bad(format string, args ...any) error { return badRequest{fmt.Sprintf(format, args...)} }

// fail answers err with its status: a *mgmt.Error by its kind (400
// invalid or unsupported, 404, 409, 503), a decoding error 400, anything
// else 500.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var b badRequest
	var me *mgmt.Error
	switch {
	case errors.As(err, &b):
		writeErr(w, http.StatusBadRequest, b.msg)
	case errors.As(err, &me):
		writeErr(w, status(me.Kind), me.Msg)
	case errors.Is(err, store.ErrNotFound):
		writeErr(w, http.StatusNotFound, err.Error())
	default:
		a.internal(w, r, err)
	}
}

func status(k mgmt.Kind) int {
	switch k {
	case mgmt.NotFound:
		return http.StatusNotFound
	case mgmt.Conflict:
		return http.StatusConflict
	case mgmt.Unavailable:
		return http.StatusServiceUnavailable
	case mgmt.Forbidden:
		return http.StatusForbidden
	}
	return http.StatusBadRequest // Invalid, Unsupported
}

// answer writes v with code, or err.
func (a *API) answer(w http.ResponseWriter, r *http.Request, code int, v any, err error) {
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if code == http.StatusNoContent {
		noContent(w)
		return
	}
	writeJSON(w, code, v)
}

// ---- request bodies ----

const maxBody = 1 << 20

// decodeBody reads and strictly decodes a management request body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, berr := httpx.ReadBody(w, r, maxBody)
	if berr != nil {
		writeErr(w, berr.Code, berr.Msg)
		return false
	}
	if err := httplimit.CheckJSONValues(body); err != nil {
		writeErr(w, http.StatusRequestEntityTooLarge, err.Error())
		return false
	}
	if err := decodeStrict(body, v); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

func isInt(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Uint64 }

// decodeStrict decodes a JSON object, refusing unknown fields so a typo in
// a field name is reported instead of silently ignored. A whole number
// written 3.0 is an integer (httpx.WholeNumbers), as on every surface.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(httpx.WholeNumbers(body))))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			if n, ok := strings.CutPrefix(ute.Value, "number "); ok && isInt(ute.Type.Kind()) {
				if f, err := strconv.ParseFloat(n, 64); err == nil && f != math.Trunc(f) {
					return mgmt.InvalidInput(ute.Field, "%s must be a whole number, got %s", ute.Field, mgmt.ShortID(n))
				}
				return mgmt.OutOfRange(ute.Field, n) // 1e20 for an integer: refused naming its range
			}
			return bad("%s must be of type %s", ute.Field, ute.Type.String())
		}
		if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
			return bad("unknown field %s", strings.TrimPrefix(msg, "json: unknown field "))
		}
		return bad("request body must be a JSON object: %v", err)
	}
	if dec.More() {
		return bad("request body must hold one JSON object")
	}
	return nil
}

// ---- shared lookups ----

// endpoint reads an endpoint, answering 404 when there is none.
func (a *API) endpoint(w http.ResponseWriter, r *http.Request, id string) (*store.Endpoint, bool) {
	eps, _, err := a.cfg.Mgmt.Endpoints(r.Context(), id, false)
	if err != nil {
		if mgmt.KindOf(err) == mgmt.NotFound || errors.Is(err, store.ErrNotFound) {
			writeErr(w, http.StatusNotFound, "endpoint "+mgmt.ShortID(id)+" not found")
			return nil, false
		}
		a.internal(w, r, err)
		return nil, false
	}
	return &eps[0], true
}

func (a *API) createTemplate(w http.ResponseWriter, r *http.Request) {
	var in v1input.TemplateInput
	if !decodeBody(w, r, &in) {
		return
	}
	t, err := a.cfg.Mgmt.CreateTemplate(r.Context(), in.Mgmt())
	a.answer(w, r, http.StatusOK, t, err)
}

func (a *API) createEndpoint(w http.ResponseWriter, r *http.Request) {
	var in v1input.EndpointInput
	if !decodeBody(w, r, &in) {
		return
	}
	e, err := a.cfg.Mgmt.CreateEndpoint(r.Context(), in.Mgmt())
	a.answer(w, r, http.StatusOK, bodyOf(e), err)
}
