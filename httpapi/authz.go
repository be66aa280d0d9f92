package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"golang.org/x/time/rate"

	"berth/httpapi/v2api"
	"berth/mgmt"
	"berth/store"
)

// Every route's key check is here: one middleware on the router looks up
// the matched route's method and path template in accessRules, asks
// mgmt.Access whether the request's key may, and records management writes
// in the audit trail. A route without a rule is refused (and
// TestEveryRouteHasAnAccessRule fails for it).

// accessRule says what a route reaches and whether it reads or writes.
type accessRule struct {
	scope mgmt.Scope
	need  mgmt.Need
	epVar string // ScopeEndpoint: the route variable holding the endpoint id
	audit bool   // a management write: recorded in the audit trail
}

// anyMethod keys routes registered without a method (the dashboard).
const anyMethod = "ANY"

// accessRules maps "METHOD /path/{template}" to its rule.
var accessRules = buildRules()

func buildRules() map[string]accessRule {
	m := map[string]accessRule{}
	add := func(r accessRule, routes ...string) {
		for _, rt := range routes {
			if _, dup := m[rt]; dup {
				panic("httpapi: two access rules for " + rt)
			}
			m[rt] = r
		}
	}
	var (
		public       = accessRule{scope: mgmt.ScopePublic}
		worker       = accessRule{scope: mgmt.ScopeWorker}
		accountRead  = accessRule{scope: mgmt.ScopeAccount, need: mgmt.Read}
		accountWrite = accessRule{scope: mgmt.ScopeAccount, need: mgmt.Write, audit: true}
		admin        = accessRule{scope: mgmt.ScopeAdmin, need: mgmt.Read}
		adminWrite   = accessRule{scope: mgmt.ScopeAdmin, need: mgmt.Write, audit: true}
		listEps      = accessRule{scope: mgmt.ScopeEndpointList, need: mgmt.Read}
		createEp     = accessRule{scope: mgmt.ScopeEndpointList, need: mgmt.Write, audit: true}
		fields       = accessRule{scope: mgmt.ScopeFields, need: mgmt.Read}
	)
	ep := func(v string, need mgmt.Need, audit bool) accessRule {
		return accessRule{scope: mgmt.ScopeEndpoint, need: need, epVar: v, audit: audit}
	}
	const read, write = mgmt.Read, mgmt.Write

	// Documents and the dashboard's static page: no data, no key.
	add(public, "GET /v1/openapi.json", "GET /v1/docs", "GET /v2/openapi.json", anyMethod+" /", anyMethod+" /ui/")
	add(accountRead, "GET /metrics")
	add(fields, "POST /graphql") // each field and mutation is checked (graphqlapi)

	// The worker protocol: the worker's own key or an All key (workerAuth).
	for _, p := range []string{"GET /v2/{endpointId}/job-take/{workerId}", "POST /v2/{endpointId}/job-done/{workerId}/{jobId}",
		"POST /v2/{endpointId}/job-stream/{workerId}/{jobId}", "GET /v2/{endpointId}/job-stop/{workerId}",
		"GET /v2/{endpointId}/ping/{workerId}", "GET /v2/{endpointId}/job-take-batch/{workerId}"} {
		add(worker, p)
	}

	// The job API: Read sees health, status and streams; Read-Write runs,
	// cancels, retries and purges (the purge is audited).
	const j = "/v2/{endpointId}"
	add(ep("endpointId", read, false), "GET "+j+"/health",
		"GET "+j+"/status/{jobId}", "POST "+j+"/status/{jobId}", "GET "+j+"/stream/{jobId}", "POST "+j+"/stream/{jobId}",
		"GET "+j+"/status-sync/{jobId}", "POST "+j+"/status-sync/{jobId}", "GET "+j+"/openai/v1/models", "GET "+j+"/openai/v1/")
	add(ep("endpointId", write, false), "POST "+j+"/run", "POST "+j+"/runsync", "POST "+j+"/cancel/{jobId}", "POST "+j+"/retry/{jobId}",
		"POST "+j+"/openai/v1/chat/completions", "POST "+j+"/openai/v1/completions", "POST "+j+"/openai/v1/embeddings",
		"POST "+j+"/openai/v1/responses", "POST "+j+"/openai/v1/")
	add(ep("endpointId", write, true), "POST "+j+"/purge-queue")

	// REST v1.
	add(listEps, "GET /v1/endpoints")
	add(createEp, "POST /v1/endpoints")
	add(ep("endpointId", read, false), "GET /v1/endpoints/{endpointId}", "GET /v1/endpoints/{endpointId}/workers/{workerId}/logs",
		"GET /v1/endpoints/{endpointId}/metrics",
		"GET /v1/endpoints/{endpointId}/jobs", "GET /v1/endpoints/{endpointId}/jobs/{jobId}", "GET /v1/endpoints/{endpointId}/queue")
	add(ep("endpointId", write, true), "PATCH /v1/endpoints/{endpointId}", "POST /v1/endpoints/{endpointId}/update", "DELETE /v1/endpoints/{endpointId}")
	// worker-env registers a worker and hands out its key: a write.
	add(ep("endpointId", write, true), "GET /v1/endpoints/{endpointId}/worker-env")
	for _, res := range []struct{ path, id string }{{"/v1/templates", "templateId"}, {"/v1/pods", "podId"}, {"/v1/networkvolumes", "networkVolumeId"}} {
		one := res.path + "/{" + res.id + "}"
		add(accountRead, "GET "+res.path, "GET "+one)
		add(accountWrite, "POST "+res.path, "PATCH "+one, "POST "+one+"/update", "DELETE "+one)
	}
	add(accountRead, "GET /v1/pods/{podId}/logs", "GET /v1/containerregistryauth", "GET /v1/containerregistryauth/{containerRegistryAuthId}",
		"GET /v1/billing/pods", "GET /v1/billing/endpoints", "GET /v1/billing/networkvolumes", "GET /v1/gpus")
	add(accountWrite, "POST /v1/pods/{podId}/start", "POST /v1/pods/{podId}/stop", "POST /v1/pods/{podId}/reset", "POST /v1/pods/{podId}/restart",
		"POST /v1/containerregistryauth", "DELETE /v1/containerregistryauth/{containerRegistryAuthId}", "POST /v1/apply")
	// Backups hold every key's hash and every registry credential.
	add(admin, "GET /v1/backup")
	// Berth's key management and audit trail.
	add(admin, "GET /v1/keys", "GET /v1/keys/{keyId}", "GET /v1/audit")
	add(adminWrite, "POST /v1/keys", "PATCH /v1/keys/{keyId}", "DELETE /v1/keys/{keyId}")

	// REST v2.
	add(listEps, "GET /v2/serverless")
	add(createEp, "POST /v2/serverless")
	add(ep("id", read, false), "GET /v2/serverless/{id}", "GET /v2/serverless/{id}/workers", "GET /v2/serverless/{id}/releases",
		"GET /v2/serverless/{id}/workers/{workerId}/logs")
	add(ep("id", write, true), "PATCH /v2/serverless/{id}", "DELETE /v2/serverless/{id}", "POST /v2/serverless/{id}/rollback")
	// Image builds of an endpoint (Berth's): reading them is Read, starting
	// or cancelling one Read-Write.
	add(ep("id", read, false), "GET /v2/serverless/{id}/builds", "GET /v2/serverless/{id}/builds/{buildId}", "GET /v2/serverless/{id}/builds/{buildId}/logs")
	add(ep("id", write, true), "POST /v2/serverless/{id}/builds", "POST /v2/serverless/{id}/builds/{buildId}/cancel")
	// Git credentials builds clone with (Berth's): account-wide, as
	// registry credentials are; their secrets are never answered.
	add(accountRead, "GET /v2/gitcredentials")
	add(accountWrite, "POST /v2/gitcredentials", "DELETE /v2/gitcredentials/{id}")
	// Push to deploy: a forge cannot send a key; the HMAC signature under
	// the endpoint's webhook secret authenticates the delivery (mgmt).
	add(public, "POST /v2/serverless/{id}/webhooks/git")
	for _, res := range []string{"/v2/templates", "/v2/pods", "/v2/network-volumes", "/v2/clusters"} {
		add(accountRead, "GET "+res, "GET "+res+"/{id}")
		add(accountWrite, "POST "+res, "PATCH "+res+"/{id}", "DELETE "+res+"/{id}")
	}
	add(accountRead, "GET /v2/pods/{id}/logs", "GET /v2/clusters/{id}/pods", "GET /v2/registries", "GET /v2/registries/{id}",
		"GET /v2/registries/delegations", "GET /v2/account/ssh-keys", "GET /v2/account/huggingface-token",
		"GET /v2/catalog/gpus", "GET /v2/catalog/gpus/{id}", "GET /v2/catalog/cpus", "GET /v2/catalog/cpus/{id}",
		"GET /v2/catalog/datacenters", "GET /v2/catalog/datacenters/{id}", "GET /v2/catalog/templates",
		"GET /v2/billing", "GET /v2/billing/pods", "GET /v2/billing/serverless", "GET /v2/billing/endpoints",
		"GET /v2/billing/network-volumes", "GET /v2/billing/clusters")
	add(accountWrite, "POST /v2/pods/{id}/action", "POST /v2/registries", "DELETE /v2/registries/{id}",
		"POST /v2/registries/delegations", "DELETE /v2/registries/delegations/{id}", "PUT /v2/account/ssh-keys",
		"PUT /v2/account/huggingface-token", "DELETE /v2/account/huggingface-token")
	return m
}

// ruleOf is the rule of r's matched route and the "METHOD /template" it
// is filed under.
func ruleOf(r *http.Request) (accessRule, string, bool) {
	rt := mux.CurrentRoute(r)
	if rt == nil {
		return accessRule{}, "", false
	}
	tmpl, err := rt.GetPathTemplate()
	if err != nil {
		return accessRule{}, "", false
	}
	method := r.Method
	if ms, err := rt.GetMethods(); err != nil || len(ms) == 0 {
		method = anyMethod
	}
	name := method + " " + tmpl
	rule, ok := accessRules[name]
	return rule, r.Method + " " + tmpl, ok
}

// authz is the router's key check (see the top of this file).
func (s *Server) authz(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rule, what, ok := ruleOf(r)
		if !ok {
			s.cfg.Logger.Error("route without an access rule refused", "route", what)
			s.authErr(w, r, http.StatusForbidden, "no access rule for "+what+": Berth refuses routes without one")
			return
		}
		if rule.scope == mgmt.ScopePublic || rule.scope == mgmt.ScopeWorker {
			next.ServeHTTP(w, r) // the worker routes check their keys themselves (workerAuth)
			return
		}
		p, err := s.mg.Authenticate(requestKey(r))
		if err != nil {
			s.authErr(w, r, authStatus(err), err.Error())
			return
		}
		id := ""
		if rule.epVar != "" {
			id = mux.Vars(r)[rule.epVar]
		}
		if err := mgmt.Access(p, rule.scope, id, rule.need, what); err != nil {
			s.authErr(w, r, http.StatusForbidden, err.Error())
			return
		}
		if !s.keyLimits.allow(p) {
			w.Header().Set("Retry-After", "1")
			s.authErr(w, r, http.StatusTooManyRequests, "rate limit of key "+quoteName(p.Name)+" exceeded ("+s.keyLimits.String()+"); retry in a moment")
			return
		}
		r = r.WithContext(mgmt.WithPrincipal(r.Context(), p))
		if !rule.audit {
			next.ServeHTTP(w, r)
			return
		}
		rec := &auditRecorder{statusRecorder: statusRecorder{ResponseWriter: w, code: http.StatusOK}}
		next.ServeHTTP(rec, r)
		obj := id
		if obj == "" {
			for _, v := range []string{"id", "templateId", "podId", "networkVolumeId", "containerRegistryAuthId", "keyId"} {
				if obj = mux.Vars(r)[v]; obj != "" {
					break
				}
			}
		}
		if obj == "" {
			obj = rec.createdID()
		}
		s.mg.Audit(store.AuditEntry{KeyID: p.KeyID, Key: p.Name, Action: what, Object: obj, Status: rec.code})
	})
}

// auditRecorder keeps the status and the start of the body of a
// management write: a create's answer names the new record's id.
type auditRecorder struct {
	statusRecorder
	body []byte
}

const auditBodyMax = 64 << 10

func (a *auditRecorder) Write(b []byte) (int, error) {
	if room := auditBodyMax - len(a.body); room > 0 {
		a.body = append(a.body, b[:min(room, len(b))]...)
	}
	return a.statusRecorder.ResponseWriter.Write(b)
}

// createdID is the "id" of a JSON answer (a create's new record).
func (a *auditRecorder) createdID() string {
	if a.code >= 300 {
		return ""
	}
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(a.body, &v) != nil {
		return ""
	}
	return v.ID
}

func quoteName(n string) string { return `"` + n + `"` }

// authStatus is 401 for Authenticate's refusals, else the failure's.
func authStatus(err error) int {
	if errors.Is(err, mgmt.ErrNoKey) || errors.Is(err, mgmt.ErrUnknownKey) || errors.Is(err, mgmt.ErrKeyDisabled) {
		return http.StatusUnauthorized
	}
	return http.StatusServiceUnavailable
}

// requestKey is the request's API key: Authorization, or ?api_key= on
// /graphql (RunPod's GraphQL docs use it).
func requestKey(r *http.Request) string {
	k := apiKey(r)
	if k == "" && r.URL.Path == "/graphql" {
		k = r.URL.Query().Get("api_key")
	}
	return k
}

// authErr answers a refusal in the error shape of the route's surface:
// REST v2's problem body on its named routes, else writeErr's.
func (s *Server) authErr(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
	}
	if rt := mux.CurrentRoute(r); rt != nil && rt.GetName() != "" && !strings.HasPrefix(rt.GetName(), "worker:") {
		v2api.WriteProblem(w, code, msg)
		return
	}
	writeErr(w, r, code, msg)
}

// principal is the key the request was authenticated with (nil on public
// and worker routes).
func principal(r *http.Request) *mgmt.Principal { return mgmt.PrincipalFrom(r.Context()) }

// AuthorizeEndpoint checks a request to a load-balancing endpoint (served
// outside the router): GET, HEAD and OPTIONS read the endpoint, any other
// method writes it. It returns 0, or the status and message of a refusal.
func (s *Server) AuthorizeEndpoint(r *http.Request, endpointID string) (int, string) {
	p, err := s.mg.Authenticate(apiKey(r))
	if err != nil {
		return authStatus(err), err.Error()
	}
	need := mgmt.Write
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		need = mgmt.Read
	}
	if err := mgmt.Access(p, mgmt.ScopeEndpoint, endpointID, need, r.Method+" on load-balancing endpoint "+mgmt.ShortID(endpointID)); err != nil {
		return http.StatusForbidden, err.Error()
	}
	if !s.keyLimits.allow(p) {
		return http.StatusTooManyRequests, "rate limit of key " + quoteName(p.Name) + " exceeded (" + s.keyLimits.String() + ")"
	}
	return 0, ""
}

// ---- per-key rate limits ----

// keyLimiter holds one token bucket per key (at most mgmt.LimitKeys.Max
// + 1: the stored keys and BERTH_API_KEY): per10s requests in any 10
// seconds, on top of the per-endpoint limits, so one runaway client
// cannot starve the others. Worker routes are not counted (workers have
// their own keys and the per-worker long-poll caps).
type keyLimiter struct {
	per10s int // 0: no limit
	mu     sync.Mutex
	m      map[string]*rate.Limiter
}

func newKeyLimiter(per10s int) *keyLimiter {
	return &keyLimiter{per10s: per10s, m: map[string]*rate.Limiter{}}
}

func (k *keyLimiter) String() string { return strconv.Itoa(k.per10s) + " requests per 10 s" }

func (k *keyLimiter) allow(p *mgmt.Principal) bool {
	if k.per10s <= 0 {
		return true
	}
	id := p.KeyID
	if id == "" {
		id = "env"
	}
	k.mu.Lock()
	l := k.m[id]
	if l == nil {
		if len(k.m) > int(mgmt.LimitKeys.Max)+1 {
			k.m = map[string]*rate.Limiter{} // deleted keys' buckets: start afresh
		}
		l = rate.NewLimiter(rate.Limit(float64(k.per10s)/10), k.per10s)
		k.m[id] = l
	}
	k.mu.Unlock()
	return l.AllowN(time.Now(), 1)
}

// RouteAccess is one route and method of the router with its access rule
// (Ruled false: none, so the route is refused).
type RouteAccess struct {
	Method, Path string // Method "ANY": a route taking any method
	Scope        mgmt.Scope
	Need         mgmt.Need
	EndpointVar  string
	Audited      bool
	Ruled        bool
}

// RouteAccess lists every route × method of the API's router with its
// rule, for tests that drive each with keys of each level.
func (s *Server) RouteAccess() []RouteAccess {
	var out []RouteAccess
	s.router.Walk(func(rt *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if rt.GetHandler() == nil {
			return nil // a subrouter's entry, not a route
		}
		tmpl, err := rt.GetPathTemplate()
		if err != nil {
			return nil
		}
		ms, err := rt.GetMethods()
		if err != nil || len(ms) == 0 {
			ms = []string{anyMethod}
		}
		for _, m := range ms {
			rule, ok := accessRules[m+" "+tmpl]
			out = append(out, RouteAccess{Method: m, Path: tmpl, Scope: rule.scope, Need: rule.need, EndpointVar: rule.epVar, Audited: rule.audit, Ruled: ok})
		}
		return nil
	})
	return out
}

// AccessRules lists the rule table's "METHOD /path" entries (a test
// checks each names a route).
func AccessRules() []string {
	out := make([]string, 0, len(accessRules))
	for k := range accessRules {
		out = append(out, k)
	}
	return out
}
