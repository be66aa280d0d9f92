// Package v2api serves RunPod's REST v2 management API under /v2 (the
// contract is RunPod's own v2.json): thin adapters that translate v2's
// shapes into package mgmt's inputs and its typed errors into RFC 9457
// problem bodies. The resources are the same records v1 serves: a template
// made through one version is listed by the other.
package v2api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/gorilla/mux"
	"github.com/jonboulle/clockwork"

	"berth/gpu"
	"berth/httpapi/internal/httpx"
	"berth/httplimit"
	"berth/mgmt"
	"berth/queue"
	"berth/store"
)

// Config holds the API's dependencies; the optional ones may be nil.
type Config struct {
	Mgmt   *mgmt.Service
	Store  *store.DB
	Logger *slog.Logger
	Clock  clockwork.Clock

	// Authorized reports whether r carries the operator's key.
	Authorized func(r *http.Request) bool
	// Instrument wraps a handler with metrics under a route name.
	// Optional.
	Instrument func(route string, h http.Handler) http.Handler

	// Models is an endpoint's models with their downloads. Optional.
	Models func(e store.Endpoint) []mgmt.ModelStatus
	// Health is an endpoint's job and worker counts.
	Health func(endpointID string) queue.Health
	// Workers lists an endpoint's workers (mgmt.MergeWorkers). Optional.
	Workers func(endpointID string) []mgmt.Worker
	// GPUs lists this host's GPUs. Optional.
	GPUs func() []gpu.Status
	// WorkerLogs and PodLogs return a container's log (see httpapi.Config);
	// they wrap ErrNoContainer when there is none. Optional: nil answers
	// 503.
	WorkerLogs func(ctx context.Context, endpointID, workerID string, follow bool, tail int, jobID string) (io.ReadCloser, error)
	PodLogs    func(ctx context.Context, podID string, follow bool, tail int) (io.ReadCloser, error)
	// IsNoContainer tells a log function's "no such container" error.
	IsNoContainer func(error) bool
	// Builds runs image builds. Optional: nil answers 503 to a new build.
	Builds Builds
	// Pushes takes push-to-deploy webhook deliveries. Optional: nil
	// answers 503.
	Pushes GitPushes
}

// API is the /v2 management API.
type API struct {
	cfg Config
}

// New returns the API.
func New(cfg Config) *API {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Instrument == nil {
		cfg.Instrument = func(_ string, h http.Handler) http.Handler { return h }
	}
	if cfg.IsNoContainer == nil {
		cfg.IsNoContainer = func(error) bool { return false }
	}
	return &API{cfg: cfg}
}

// route is one operation of RunPod's v2.json that Berth serves.
type route struct {
	method, path, id string // id: v2.json's operationId
	h                http.HandlerFunc
}

// routes is the one table the router and /v2/openapi.json are built from.
func (a *API) routes() []route {
	const get, post, put, patch, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete
	return []route{
		{get, "/v2/openapi.json", "getOpenAPI", a.openapi},

		{get, "/v2/templates", "listTemplates", a.listTemplates},
		{post, "/v2/templates", "createTemplate", a.createTemplate},
		{get, "/v2/templates/{id}", "getTemplate", a.getTemplate},
		{patch, "/v2/templates/{id}", "updateTemplate", a.updateTemplate},
		{del, "/v2/templates/{id}", "deleteTemplate", a.deleteTemplate},

		{get, "/v2/serverless", "listEndpoints", a.listEndpoints},
		{post, "/v2/serverless", "createEndpoint", a.createEndpoint},
		{get, "/v2/serverless/{id}", "getEndpoint", a.getEndpoint},
		{patch, "/v2/serverless/{id}", "updateEndpoint", a.updateEndpoint},
		{del, "/v2/serverless/{id}", "deleteEndpoint", a.deleteEndpoint},
		{get, "/v2/serverless/{id}/workers", "listEndpointWorkers", a.listWorkers},
		{get, "/v2/serverless/{id}/releases", "listEndpointReleases", a.listReleases},
		{get, "/v2/serverless/{id}/workers/{workerId}/logs", "getWorkerLogs", a.workerLogs},
		// Builds: RunPod's newer docs (not in its v2.json); create and cancel are Berth's own.
		{get, "/v2/serverless/{id}/builds", "listEndpointBuilds", a.listBuilds},
		{post, "/v2/serverless/{id}/builds", "createEndpointBuild", a.createBuild},
		{get, "/v2/serverless/{id}/builds/{buildId}", "getEndpointBuild", a.getBuild},
		{get, "/v2/serverless/{id}/builds/{buildId}/logs", "getEndpointBuildLogs", a.buildLogs},
		{post, "/v2/serverless/{id}/builds/{buildId}/cancel", "cancelEndpointBuild", a.cancelBuild},
		{post, "/v2/serverless/{id}/rollback", "rollbackEndpoint", a.rollback},
		// Git credentials builds clone with: Berth's own.
		{get, "/v2/gitcredentials", "listGitCredentials", a.listGitCredentials},
		{post, "/v2/gitcredentials", "createGitCredential", a.createGitCredential},
		{del, "/v2/gitcredentials/{id}", "deleteGitCredential", a.deleteGitCredential},
		// Push to deploy (Berth's): no API key, the HMAC signature is the authentication.
		{post, "/v2/serverless/{id}/webhooks/git", "gitWebhook", a.gitWebhook},

		{get, "/v2/pods", "listPods", a.listPods},
		{post, "/v2/pods", "createPod", a.createPod},
		{get, "/v2/pods/{id}", "getPod", a.getPod},
		{patch, "/v2/pods/{id}", "updatePod", a.updatePod},
		{del, "/v2/pods/{id}", "deletePod", a.deletePod},
		{get, "/v2/pods/{id}/logs", "getPodLogs", a.podLogs},
		{post, "/v2/pods/{id}/action", "podAction", a.podAction},

		{get, "/v2/network-volumes", "listNetworkVolumes", a.listVolumes},
		{post, "/v2/network-volumes", "createNetworkVolume", a.createVolume},
		{get, "/v2/network-volumes/{id}", "getNetworkVolume", a.getVolume},
		{patch, "/v2/network-volumes/{id}", "updateNetworkVolume", a.updateVolume},
		{del, "/v2/network-volumes/{id}", "deleteNetworkVolume", a.deleteVolume},

		// delegations before {id}: the literal path wins.
		{get, "/v2/registries/delegations", "listDelegations", a.cannot(delegationsWhy)},
		{post, "/v2/registries/delegations", "createDelegation", a.cannot(delegationsWhy)},
		{del, "/v2/registries/delegations/{id}", "revokeDelegation", a.cannot(delegationsWhy)},
		{get, "/v2/registries", "listRegistries", a.listRegistries},
		{post, "/v2/registries", "createRegistry", a.createRegistry},
		{get, "/v2/registries/{id}", "getRegistry", a.getRegistry},
		{del, "/v2/registries/{id}", "deleteRegistry", a.deleteRegistry},

		{get, "/v2/clusters", "listClusters", a.cannot(clustersWhy)},
		{post, "/v2/clusters", "createCluster", a.cannot(clustersWhy)},
		{get, "/v2/clusters/{id}", "getCluster", a.cannot(clustersWhy)},
		{patch, "/v2/clusters/{id}", "updateCluster", a.cannot(clustersWhy)},
		{del, "/v2/clusters/{id}", "deleteCluster", a.cannot(clustersWhy)},
		{get, "/v2/clusters/{id}/pods", "listClusterPods", a.cannot(clustersWhy)},

		{get, "/v2/catalog/gpus", "listGpuTypes", a.listGPUTypes},
		{get, "/v2/catalog/gpus/{id}", "getGpuType", a.getGPUType},
		{get, "/v2/catalog/cpus", "listCpuTypes", a.listCPUTypes},
		{get, "/v2/catalog/cpus/{id}", "getCpuType", a.getCPUType},
		{get, "/v2/catalog/datacenters", "listDataCenters", a.listDataCenters},
		{get, "/v2/catalog/datacenters/{id}", "getDataCenter", a.getDataCenter},
		{get, "/v2/catalog/templates", "listPublicTemplates", a.listPublicTemplates},

		{get, "/v2/billing", "listBilling", a.billingAll},
		{get, "/v2/billing/pods", "listPodBilling", a.billingPods},
		{get, "/v2/billing/serverless", "listServerlessBilling", a.billingServerless},
		{get, "/v2/billing/endpoints", "listEndpointBilling", a.billingEndpoints},
		{get, "/v2/billing/network-volumes", "listNetworkVolumeBilling", a.billingVolumes},
		{get, "/v2/billing/clusters", "listClusterBilling", a.billingClusters},

		{get, "/v2/account/ssh-keys", "getSshKeys", a.getSSHKeys},
		{put, "/v2/account/ssh-keys", "updateSshKeys", a.putSSHKeys},
		{get, "/v2/account/huggingface-token", "getHuggingFaceToken", a.getHFToken},
		{put, "/v2/account/huggingface-token", "setHuggingFaceToken", a.putHFToken},
		{del, "/v2/account/huggingface-token", "clearHuggingFaceToken", a.clearHFToken},
	}
}

// Mount adds the routes to r. Mount them before the job API's
// /v2/{endpointId}/… subrouter so /v2/pods and the like are not taken for
// endpoint ids.
//
// The routes sit behind one map lookup of the path's second segment
// ("pods", "serverless"…), so the job API's hot paths do not pay for
// matching them.
func (a *API) Mount(r *mux.Router) {
	tops := map[string]bool{}
	for _, rt := range a.routes() {
		tops[topSegment(rt.path)] = true
	}
	sub := r.MatcherFunc(func(req *http.Request, _ *mux.RouteMatch) bool { return tops[topSegment(req.URL.Path)] }).Subrouter()
	for _, rt := range a.routes() {
		h := a.auth(a.checkParams(rt.h))
		if keyless[rt.id] {
			h = a.checkParams(rt.h)
		}
		sub.Handle(rt.path, a.cfg.Instrument("v2."+rt.id, h)).Methods(rt.method).Name(rt.id)
	}
}

// topSegment is "pods" of "/v2/pods/…"; "" for other paths.
func topSegment(path string) string {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return ""
	}
	top, _, _ := strings.Cut(rest, "/")
	return top
}

// keyless operations are served without an API key: the document (as
// RunPod serves its documents) and the git webhook (a forge cannot send a
// key; its signature authenticates it).
var keyless = map[string]bool{"getOpenAPI": true, "gitWebhook": true}

// BerthOwn are the operations RunPod's v2.json does not have: this
// document's own and the builds RunPod's newer docs describe.
var BerthOwn = map[string]bool{"getOpenAPI": true, "listEndpointBuilds": true, "createEndpointBuild": true,
	"getEndpointBuild": true, "getEndpointBuildLogs": true, "cancelEndpointBuild": true, "rollbackEndpoint": true,
	"listGitCredentials": true, "createGitCredential": true, "deleteGitCredential": true,
	"gitWebhook": true,

	"getHuggingFaceToken": true, "setHuggingFaceToken": true, "clearHuggingFaceToken": true}

// Routes lists "METHOD /path" → operation id of every route (tests compare
// it with RunPod's v2.json and the served document).
func (a *API) Routes() map[string]string {
	out := map[string]string{}
	for _, rt := range a.routes() {
		out[rt.method+" "+rt.path] = rt.id
	}
	return out
}

func (a *API) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.cfg.Authorized == nil || !a.cfg.Authorized(r) {
			problem(w, http.StatusUnauthorized, "missing or invalid API key: send Authorization: Bearer <key>")
			return
		}
		h(w, r)
	}
}

// checkParams answers 422 for parameters that fail their schemas
// (params.go) before the handler runs.
func (a *API) checkParams(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := checkParams(routeName(r), r); err != nil {
			a.fail(w, r, err)
			return
		}
		h(w, r)
	}
}

// ---- answers ----

// Problem is an RFC 9457 problem body, v2's ErrorResponse.
type Problem struct {
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail"`
	Errors []string `json:"errors,omitempty"`
}

// WriteProblem answers v2's error shape (httpapi's key checks use it on
// v2's routes).
func WriteProblem(w http.ResponseWriter, code int, detail string) { problem(w, code, detail) }

func problem(w http.ResponseWriter, code int, detail string, errs ...string) {
	for i := range errs {
		errs[i] = mgmt.ClipMessage(errs[i])
	}
	b, _ := json.Marshal(Problem{Title: http.StatusText(code), Status: code, Detail: mgmt.ClipMessage(detail), Errors: errs})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	w.Write(b)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// badInput is a request v2 cannot decode: malformed JSON, a wrong type or
// an unknown field (400).
type badInput struct{ field, msg string }

func (b badInput) Error() string { return b.msg }

func bad(field, format string, a ...any) error { return badInput{field, fmt.Sprintf(format, a...)} }

// fail answers err: a decoding error 400, a *mgmt.Error by its kind (a
// refused input 400 naming the field — RunPod's BadRequestError is
// "malformed or conflicts with request rules" — 404, 409, 503;
// Unsupported 501), anything else 500.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var b badInput
	var me *mgmt.Error
	var ib invalidBody
	switch {
	case errors.As(err, &ib):
		problem(w, http.StatusUnprocessableEntity, "Request validation failed: "+ib.errs[0], ib.errs...)
	case errors.As(err, &b):
		problem(w, http.StatusBadRequest, b.msg, fieldErr(b.field, b.msg))
	case errors.As(err, &me):
		me = v2Names(me, v2Fields)
		code := status(me, routeName(r))
		var errs []string
		if me.Field != "" {
			errs = []string{fieldErr(me.Field, me.Msg)}
		}
		problem(w, code, me.Msg, errs...)
	case errors.Is(err, store.ErrNotFound):
		problem(w, http.StatusNotFound, err.Error())
	default:
		a.cfg.Logger.Error("v2 request failed", "path", r.URL.Path, "err", err)
		code := httpx.FailureCode(w, err) // 503 for a full disk or a damaged file
		problem(w, code, httpx.FailureMessage(code, err))
	}
}

// status is the v2 status of a refusal, as v2.json describes them: 400
// for input that breaks a rule (a record in use, a name taken and no
// capacity included: "conflicts with request rules"), 404 for a record
// missing (named in the path or by a reference such as templateId), 409
// only where an operation documents it (a pod's state), 422 for a
// serverless template given to a pod, 503 when this host cannot now (the
// 5xx RunPod calls transient). An input one host can never serve (the
// community cloud) is a 400 saying why: v2.json's 400 is also "could not
// be placed"; 501 is for the operations one host has none of (cannot).
func status(me *mgmt.Error, op string) int {
	switch {
	case me.Kind == mgmt.NotFound, me.Reason == mgmt.Missing:
		return http.StatusNotFound
	case me.Reason == mgmt.WrongKind:
		return http.StatusUnprocessableEntity
	case me.Kind == mgmt.Conflict && me.Reason != mgmt.InUse && documents409[op]:
		return http.StatusConflict
	case me.Kind == mgmt.Unavailable:
		return http.StatusServiceUnavailable
	case me.Kind == mgmt.Forbidden:
		return http.StatusForbidden
	}
	return http.StatusBadRequest // Invalid, Conflict, Unsupported
}

// documents409 are the operations whose v2.json lists a 409.
var documents409 = map[string]bool{"podAction": true, "updatePod": true, "deletePod": true}

// routeName is the operation id of r's route ("" outside the router).
func routeName(r *http.Request) string {
	if rt := mux.CurrentRoute(r); rt != nil {
		return rt.GetName()
	}
	return ""
}

// v2Fields maps mgmt's (v1's) field names to v2's, so an error names the
// field the client sent.
var v2Fields = map[string]string{
	"imageName": "image", "containerDiskInGb": "disk", "containerRegistryAuthId": "registry", "dockerArgs": "args",
	"dockerStartCmd": "args", "volumeInGb": "mounts.persistent.size", "volumeMountPath": "mounts.persistent.path",
	"isPublic": "public", "isServerless": "serverless", "workersMin": "workers.min", "workersMax": "workers.max",
	"idleTimeout": "workers.idleTimeout", "gpuTypeIds": "gpu.pools", "gpuCount": "gpu.count", "vcpuCount": "cpu.vcpuCount",
	"cpuFlavorIds": "cpu.id", "scalerType": "scaling.type", "scalerValue": "scaling", "executionTimeoutMs": "timeout",
	"networkVolumeIds": "networkVolumes", "networkVolumeId": "mounts.network.volumeId", "minCudaVersion": "gpu.minCudaVersion",
	"allowedCudaVersions": "gpu.allowedCudaVersions", "dataCenterId": "dataCenter", "cloudType": "cloud", "computeType": "cpu",
}

// v2Names renames the fields named in e (its Field and its message).
func v2Names(e *mgmt.Error, names map[string]string) *mgmt.Error {
	out := *e
	if n, ok := names[e.Field]; ok {
		out.Field = n
	}
	// Longest names first, so "networkVolumeIds" is not caught as "networkVolumeId".
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	msg := e.Msg
	for _, k := range keys {
		msg = replaceWord(msg, k, names[k])
	}
	out.Msg = msg
	return &out
}

// replaceWord replaces whole-word occurrences of old in s.
func replaceWord(s, old, new string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, old)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(old)
		word := (i == 0 || !isWordByte(s[i-1])) && (end == len(s) || !isWordByte(s[end]))
		b.WriteString(s[:i])
		if word {
			b.WriteString(new)
		} else {
			b.WriteString(old)
		}
		s = s[end:]
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func fieldErr(field, msg string) string {
	if field == "" {
		return msg
	}
	return "$." + field + ": " + msg
}

func (a *API) answer(w http.ResponseWriter, r *http.Request, code int, v any, err error) {
	switch {
	case err != nil:
		a.fail(w, r, err)
	case code == http.StatusNoContent:
		w.WriteHeader(code)
	default:
		writeJSON(w, code, v)
	}
}

const maxBody = 1 << 20

// decode reads a request body: it must be JSON (else 400), valid against
// the operation's schema (else 422, invalidBody), and it is then decoded
// strictly into v.
func decode(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return bad("", "read request body: %v", err)
	}
	if len(body) > maxBody {
		return bad("", "request body over 1 MB")
	}
	if err := httplimit.CheckJSONValues(body); err != nil {
		return bad("", "%v", err)
	}
	if !json.Valid(body) {
		var x any
		return bad("", "request body must be JSON: %v", json.Unmarshal(body, &x))
	}
	if err := checkBody(routeName(r), body); err != nil {
		return err
	}
	// The schema counts 3.0 as an integer (2020-12); so does the decoding.
	dec := json.NewDecoder(strings.NewReader(string(httpx.WholeNumbers(body))))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			if n, ok := strings.CutPrefix(ute.Value, "number "); ok {
				if l, ok := numberLimits[ute.Field]; ok {
					// An integer too large for Go (1e20): refused naming its range.
					f, _ := strconv.ParseFloat(n, 64)
					if err := l.CheckFloat(ute.Field, f); err != nil {
						return err
					}
				}
			}
			return bad(ute.Field, "%s must be of type %s", ute.Field, ute.Type.String())
		}
		var b badInput
		if errors.As(err, &b) {
			return b
		}
		if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
			f := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
			return bad(f, "additional property %q not allowed", f)
		}
		return bad("", "request body must be a JSON object: %v", err)
	}
	if dec.More() {
		return bad("", "request body must hold one JSON object")
	}
	return nil
}

// numberLimits are mgmt's limits of v2's numeric fields, by v2's path.
var numberLimits = map[string]mgmt.Limit{
	"workers.min": mgmt.LimitWorkersMin, "workers.max": mgmt.LimitWorkersMax, "workers.idleTimeout": mgmt.LimitIdleTimeout,
	"gpu.count": mgmt.LimitGPUCount, "cpu.vcpuCount": mgmt.LimitVCPUs, "disk": mgmt.LimitContainerDisk,
	"mounts.persistent.size": mgmt.LimitPodVolume, "timeout": mgmt.LimitExecTimeout, "size": mgmt.LimitVolumeSize,
	"scaling.requestCount": mgmt.LimitRequestCount, "scaling.queueDelay": mgmt.LimitQueueDelay,
}

// nullable is a JSON field that may be absent, null or a value.
type nullable[T any] struct {
	Set   bool // present in the body
	Value *T   // nil: null
}

func (n *nullable[T]) UnmarshalJSON(b []byte) error {
	n.Set = true
	if string(b) == "null" {
		n.Value = nil
		return nil
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	n.Value = &v
	return nil
}

// baseURL is how the client reached this Berth, for requestUrls.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	host := r.Host
	if h := r.Header.Get("X-Forwarded-Host"); h != "" {
		host = h
	}
	return scheme + "://" + host
}

func pathID(r *http.Request) string { return mux.Vars(r)["id"] }

func ptr[T any](v T) *T { return &v }
