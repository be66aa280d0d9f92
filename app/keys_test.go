package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"berth/app"
	"berth/gpu"
	"berth/httpapi"
	"berth/internal/apptest"
	"berth/mgmt"
	"berth/store"
)

// keyEnv is a running Berth (the product's composition, real HTTP, a real
// bbolt file) with an All key in BERTH_API_KEY.
type keyEnv struct {
	t   *testing.T
	a   *apptest.Berth
	all string
}

const envKey = "k-all-env"

func startKeys(t *testing.T, dir string, mod func(*app.Config)) *keyEnv {
	t.Helper()
	cfg := app.Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: quiet, APIKey: envKey, Backend: app.DockerOff,
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }}
	if mod != nil {
		mod(&cfg)
	}
	return &keyEnv{t: t, a: start(t, cfg), all: cfg.APIKey}
}

// do sends a request with key ("" none) and returns the status and body;
// a request still unanswered after wait is reported as status 0 (it got
// past every key check: refusals answer at once).
func (e *keyEnv) do(key, method, path string, body any, wait time.Duration) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, e.a.URL()+path, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return 0, nil
	}
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil && ctx.Err() != nil {
		return 0, nil // a stream held open: past the key checks
	}
	return res.StatusCode, b
}

// must sends with the All key and fails unless the status is want.
func (e *keyEnv) must(key string, want int, method, path string, body, out any) []byte {
	e.t.Helper()
	code, b := e.do(key, method, path, body, 30*time.Second)
	if code != want {
		e.t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return b
}

func (e *keyEnv) endpoint(name string) string {
	e.t.Helper()
	var tpl, ep struct{ ID string }
	e.must(e.all, 200, "POST", "/v1/templates", map[string]any{"name": "t-" + name, "imageName": "x:1", "isServerless": true}, &tpl)
	e.must(e.all, 200, "POST", "/v1/endpoints", map[string]any{"name": name, "templateId": tpl.ID, "workersMax": 0}, &ep)
	return ep.ID
}

func (e *keyEnv) key(name string, body map[string]any) (id, secret string) {
	e.t.Helper()
	body["name"] = name
	var k struct{ ID, Key string }
	e.must(e.all, 200, "POST", "/v1/keys", body, &k)
	if !regexp.MustCompile(`^rpa_[A-Z2-7]{32}$`).MatchString(k.Key) {
		e.t.Fatalf("key %s: secret %q is not rpa_ and 32 base32 characters", name, k.Key)
	}
	return k.ID, k.Key
}

// level is a key under test and what docs/keys.md says it may do.
type level struct {
	name   string
	secret string
	// allowed: may this key do need on scope (endpoint: which one)?
	allowed func(scope mgmt.Scope, need mgmt.Need, endpoint string) bool
}

// TestKeyLevelsOnEveryRoute drives every route × method of the router
// (the table comes from the router, so a new route is driven too) with
// no key, a disabled key, and keys of each level, and asserts the answer
// docs/keys.md gives: 401 without a usable key; 403 naming the key's
// level where it lacks the permission; past the key check otherwise.
func TestKeyLevelsOnEveryRoute(t *testing.T) {
	e := startKeys(t, t.TempDir(), nil)
	defer stop(t, e.a)
	e1, e2 := e.endpoint("granted"), e.endpoint("other")

	_, ro := e.key("viewer", map[string]any{"permission": "READ_ONLY"})
	_, rr := e.key("ci-read", map[string]any{"permission": "RESTRICTED", "endpoints": map[string]string{e1: "READ"}})
	rwID, rw := e.key("ci-bot", map[string]any{"permission": "RESTRICTED", "endpoints": map[string]string{e1: "READ_WRITE"}})
	_, all := e.key("admin", map[string]any{"permission": "ALL"})
	offID, off := e.key("off", map[string]any{"permission": "ALL"})
	e.must(e.all, 200, "PATCH", "/v1/keys/"+offID, map[string]any{"enabled": false}, nil)

	levels := []level{
		{"All", all, func(mgmt.Scope, mgmt.Need, string) bool { return true }},
		{"Read Only", ro, func(s mgmt.Scope, n mgmt.Need, _ string) bool {
			return n == mgmt.Read && s != mgmt.ScopeAdmin && s != mgmt.ScopeWorker
		}},
		{"Restricted", rr, func(s mgmt.Scope, n mgmt.Need, ep string) bool {
			return (s == mgmt.ScopeEndpoint && ep == e1 && n == mgmt.Read) ||
				((s == mgmt.ScopeEndpointList || s == mgmt.ScopeFields) && n == mgmt.Read)
		}},
		{"Restricted", rw, func(s mgmt.Scope, n mgmt.Need, ep string) bool {
			return (s == mgmt.ScopeEndpoint && ep == e1) || ((s == mgmt.ScopeEndpointList || s == mgmt.ScopeFields) && n == mgmt.Read)
		}},
	}

	routes := e.a.API().RouteAccess()
	if len(routes) < 100 {
		t.Fatalf("the router lists %d routes", len(routes))
	}
	// Deletes run last, so the records the others read are still there.
	var ordered []httpapi.RouteAccess
	for _, del := range []bool{false, true} {
		for _, ra := range routes {
			if (ra.Method == "DELETE") == del {
				ordered = append(ordered, ra)
			}
		}
	}
	checked := 0
	for _, ra := range ordered {
		if !ra.Ruled {
			t.Errorf("%s %s has no access rule", ra.Method, ra.Path)
			continue
		}
		method := ra.Method
		if method == "ANY" {
			method = "GET"
		}
		// The expectation is docs/keys.md's, restated here from the
		// route's shape: a rule that disagrees fails.
		scope, need := documented(method, ra.Path)
		if scope != ra.Scope || need != ra.Need && scope != mgmt.ScopePublic && scope != mgmt.ScopeWorker {
			t.Errorf("%s %s: rule scope %d need %d, docs/keys.md says scope %d need %d", ra.Method, ra.Path, ra.Scope, ra.Need, scope, need)
			continue
		}
		eps := []string{""}
		if ra.Scope == mgmt.ScopeEndpoint {
			eps = []string{e1, e2}
		}
		for _, ep := range eps {
			path := fill(ra.Path, ra.EndpointVar, ep)
			var body any
			if method == "POST" || method == "PATCH" || method == "PUT" {
				body = map[string]any{} // invalid for every create: nothing is made
			}
			what := method + " " + path
			if ra.Scope == mgmt.ScopePublic {
				if code, b := e.do("", method, path, nil, 5*time.Second); code == 401 || code == 403 {
					t.Errorf("%s (public) without a key: %d %s", what, code, b)
				}
				continue
			}
			// No key, an unknown key, a disabled key: 401.
			for _, k := range []string{"", "rpa_NOSUCHKEY", off} {
				if code, b := e.do(k, method, path, body, 5*time.Second); code != 401 {
					t.Errorf("%s with key %q: %d, want 401: %s", what, k, code, b)
				}
			}
			for _, l := range levels {
				want := l.allowed(scope, need, ep)
				if want && ra.Scope == mgmt.ScopeWorker {
					continue // an All key on a worker route long-polls: covered by the worker tests
				}
				if want && method == "DELETE" && ra.Scope == mgmt.ScopeEndpoint {
					// Deleting the granted endpoint would end the test:
					// a fresh endpoint granted to ci-bot stands in.
					fresh := e.endpoint(fmt.Sprintf("fresh-%d", checked))
					e.must(e.all, 200, "PATCH", "/v1/keys/"+rwID, map[string]any{"endpoints": map[string]string{e1: "READ_WRITE", fresh: "READ_WRITE"}}, nil)
					path = fill(ra.Path, ra.EndpointVar, fresh)
				}
				code, b := e.do(l.secret, method, path, body, 2*time.Second)
				checked++
				switch {
				case want && (code == 401 || code == 403 || code == 429):
					t.Errorf("%s with a %s key: %d, want past the key check: %s", what, l.name, code, b)
				case !want && code != 403:
					t.Errorf("%s with a %s key: %d, want 403: %s", what, l.name, code, b)
				case !want && !strings.Contains(string(b), "is "+l.name):
					t.Errorf("%s with a %s key: 403 does not name the key's level: %s", what, l.name, b)
				}
			}
		}
	}
	t.Logf("%d routes × methods, %d key checks", len(routes), checked)

	// Lists show what the key may see.
	for _, c := range []struct {
		key  string
		want []string
	}{{rr, []string{e1}}, {ro, []string{e1, e2}}, {all, []string{e1, e2}}} {
		var v1 []struct{ ID string }
		e.must(c.key, 200, "GET", "/v1/endpoints", nil, &v1)
		var v2 struct{ Endpoints []struct{ ID string } }
		e.must(c.key, 200, "GET", "/v2/serverless", nil, &v2)
		var gql struct {
			Data struct {
				Myself struct{ Endpoints []struct{ ID string } }
			}
		}
		e.must(c.key, 200, "POST", "/graphql", map[string]any{"query": "{ myself { endpoints { id } } }"}, &gql)
		got := [3][]string{}
		for _, x := range v1 {
			got[0] = append(got[0], x.ID)
		}
		for _, x := range v2.Endpoints {
			got[1] = append(got[1], x.ID)
		}
		for _, x := range gql.Data.Myself.Endpoints {
			got[2] = append(got[2], x.ID)
		}
		for i, surface := range []string{"GET /v1/endpoints", "GET /v2/serverless", "GraphQL myself.endpoints"} {
			if fmt.Sprint(got[i]) != fmt.Sprint(c.want) {
				t.Errorf("%s: %v, want %v", surface, got[i], c.want)
			}
		}
	}
}

// documented is the scope and need docs/keys.md gives a route: public
// documents and the dashboard's page; the worker protocol; key
// management, the audit trail and backups (All only); the endpoint list;
// one endpoint's routes; GraphQL (checked per field); the rest is
// account-wide. GET reads, except worker-env (it registers a worker);
// POST of status, stream and status-sync reads; the rest writes.
func documented(method, path string) (mgmt.Scope, mgmt.Need) {
	need := mgmt.Write
	if method == "GET" || method == "HEAD" {
		need = mgmt.Read
	}
	if strings.HasSuffix(path, "/worker-env") {
		need = mgmt.Write
	}
	for _, p := range []string{"/status/", "/stream/", "/status-sync/"} {
		if strings.Contains(path, "/v2/{endpointId}"+p) {
			need = mgmt.Read
		}
	}
	switch {
	case path == "/" || path == "/ui/" || path == "/v1/openapi.json" || path == "/v2/openapi.json" || path == "/v1/docs",
		path == "/v2/serverless/{id}/webhooks/git": // its signature authenticates it
		return mgmt.ScopePublic, need
	case regexp.MustCompile(`^/v2/\{endpointId\}/(job-take|job-done|job-stream|job-stop|ping|job-take-batch)/`).MatchString(path):
		return mgmt.ScopeWorker, need
	case strings.HasPrefix(path, "/v1/keys") || path == "/v1/audit" || path == "/v1/backup":
		return mgmt.ScopeAdmin, need
	case path == "/v1/endpoints" || path == "/v2/serverless":
		return mgmt.ScopeEndpointList, need
	case strings.Contains(path, "{endpointId}") || strings.HasPrefix(path, "/v2/serverless/{id}"):
		return mgmt.ScopeEndpoint, need
	case path == "/graphql":
		return mgmt.ScopeFields, mgmt.Read
	}
	return mgmt.ScopeAccount, need
}

// fill makes a concrete path of a route template: the endpoint variable
// gets ep, every other variable an id that does not exist.
func fill(tmpl, epVar, ep string) string {
	return regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`).ReplaceAllStringFunc(tmpl, func(v string) string {
		name := strings.Trim(v, "{}")
		if i := strings.IndexByte(name, ':'); i >= 0 {
			name = name[:i]
		}
		if name == epVar && ep != "" {
			return ep
		}
		return "nosuch" + strings.ToLower(name)
	})
}

// TestGraphQLFieldsByKeyLevel: GraphQL checks each field and mutation:
// a Read Only key queries and cannot mutate, a Restricted key reaches only
// its endpoints' mutations and no account-wide field, each refusal a
// FORBIDDEN error naming the key and the field.
func TestGraphQLFieldsByKeyLevel(t *testing.T) {
	e := startKeys(t, t.TempDir(), nil)
	defer stop(t, e.a)
	e1, e2 := e.endpoint("granted"), e.endpoint("other")
	_, ro := e.key("viewer", map[string]any{"permission": "READ_ONLY"})
	_, rw := e.key("ci-bot", map[string]any{"permission": "RESTRICTED", "endpoints": map[string]string{e1: "READ_WRITE"}})
	_, rr := e.key("ci-read", map[string]any{"permission": "RESTRICTED", "endpoints": map[string]string{e1: "READ"}})

	gql := func(key, q string) (data map[string]any, errMsg string) {
		var out struct {
			Data   map[string]any
			Errors []struct {
				Message    string
				Extensions map[string]any
			}
		}
		e.must(key, 200, "POST", "/graphql", map[string]any{"query": q}, &out)
		if len(out.Errors) > 0 {
			if out.Errors[0].Extensions["code"] != "FORBIDDEN" {
				return out.Data, "not forbidden: " + out.Errors[0].Message
			}
			return out.Data, out.Errors[0].Message
		}
		return out.Data, ""
	}
	for _, c := range []struct {
		key, name, q string
		refused      string // "" allowed; else a part of the refusal
	}{
		{ro, "Read Only", `{ myself { pods { id } endpoints { id } } }`, ""},
		{ro, "Read Only", `{ gpuTypes { id } }`, ""},
		{ro, "Read Only", `mutation { saveTemplate(input: {name: "x", imageName: "x:1", containerDiskInGb: 5, volumeInGb: 0, dockerArgs: ""}) { id } }`, "mutation saveTemplate"},
		{ro, "Read Only", `mutation { deleteEndpoint(id: "` + e1 + `") }`, "mutation deleteEndpoint"},
		{rw, "Restricted", `{ myself { pods { id } } }`, "myself { pods }"},
		{rw, "Restricted", `{ gpuTypes { id } }`, "query gpuTypes"},
		{rw, "Restricted", `mutation { saveTemplate(input: {name: "x", imageName: "x:1", containerDiskInGb: 5, volumeInGb: 0, dockerArgs: ""}) { id } }`, "mutation saveTemplate"},
		{rw, "Restricted", `mutation { saveEndpoint(input: {id: "` + e1 + `", name: "renamed", workersMax: 1}) { id name } }`, ""},
		{rw, "Restricted", `mutation { saveEndpoint(input: {id: "` + e2 + `", name: "renamed", workersMax: 1}) { id } }`, "no access to endpoint"},
		{rw, "Restricted", `mutation { deleteEndpoint(id: "` + e2 + `") }`, "no access to endpoint"},
		{rr, "Restricted", `mutation { saveEndpoint(input: {id: "` + e1 + `", name: "again", workersMax: 1}) { id } }`, "mutation saveEndpoint"},
	} {
		data, msg := gql(c.key, c.q)
		switch {
		case c.refused == "" && msg != "":
			t.Errorf("%s key, %s: refused: %s", c.name, c.q, msg)
		case c.refused != "" && (!strings.Contains(msg, c.refused) || !strings.Contains(msg, "is "+c.name)):
			t.Errorf("%s key, %s: %q (data %v), want a FORBIDDEN refusal naming %q and the level", c.name, c.q, msg, data, c.refused)
		}
	}
	// The refused writes changed nothing; the allowed one did.
	var eps []struct{ ID, Name string }
	e.must(e.all, 200, "GET", "/v1/endpoints", nil, &eps)
	for _, ep := range eps {
		if want := map[string]string{e1: "renamed", e2: "other"}[ep.ID]; ep.Name != want {
			t.Errorf("endpoint %s is named %q, want %q", ep.ID, ep.Name, want)
		}
	}
}

// TestKeyLifecycleAndAudit: a key is shown once and listed without its
// secret; disabled it is refused (401) until enabled; deleted it is
// refused; its last use is recorded; the last All key cannot go; every
// management write and key change is in the audit trail, with the key's
// name, the route, the object and the status — after a restart too.
func TestKeyLifecycleAndAudit(t *testing.T) {
	dir := t.TempDir()
	e := startKeys(t, dir, nil)
	id, secret := e.key("ci-bot", map[string]any{"permission": "all"})

	raw := e.must(e.all, 200, "GET", "/v1/keys", nil, nil)
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), mgmt.HashKey(secret)) || strings.Contains(string(raw), `"hash"`) {
		t.Fatalf("the key list shows a secret or a hash: %s", raw)
	}
	var keys []mgmt.KeyView
	json.Unmarshal(raw, &keys)
	if len(keys) != 1 || keys[0].ID != id || keys[0].Level != "ALL" || !keys[0].Enabled || keys[0].Prefix != secret[:8] {
		t.Fatalf("key list: %+v", keys)
	}

	// Bad input: 400 naming the field, nothing stored.
	for _, b := range []map[string]any{
		{"name": "x", "permission": "SUPER"},
		{"name": "bad\x07name", "permission": "ALL"},
		{"name": "x", "permission": "RESTRICTED", "endpoints": map[string]string{"nosuch": "READ"}},
		{"permission": "ALL"},
	} {
		code, body := e.do(e.all, "POST", "/v1/keys", b, 5*time.Second)
		if code != 400 {
			t.Errorf("POST /v1/keys %v: %d %s, want 400", b, code, body)
		}
	}

	e.must(secret, 200, "GET", "/v1/templates", nil, nil)
	e.must(e.all, 200, "PATCH", "/v1/keys/ci-bot", map[string]any{"enabled": false}, nil) // by name
	if code, b := e.do(secret, "GET", "/v1/templates", nil, 5*time.Second); code != 401 || !strings.Contains(string(b), "disabled") {
		t.Errorf("a disabled key: %d %s, want 401 saying it is disabled", code, b)
	}
	e.must(e.all, 200, "PATCH", "/v1/keys/"+id, map[string]any{"enabled": true}, nil)
	var tpl struct{ ID string }
	e.must(secret, 200, "POST", "/v1/templates", map[string]any{"name": "audited", "imageName": "x:1"}, &tpl)

	// Its last use is written (at most once a minute, off the request).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var k mgmt.KeyView
		e.must(e.all, 200, "GET", "/v1/keys/"+id, nil, &k)
		if k.LastUsed != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lastUsed never written")
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}

	e.must(e.all, 204, "DELETE", "/v1/keys/"+id, nil, nil)
	if code, _ := e.do(secret, "GET", "/v1/templates", nil, 5*time.Second); code != 401 {
		t.Errorf("a deleted key: %d, want 401", code)
	}
	stop(t, e.a)

	// After a restart: the trail is kept, and names who did what.
	e = startKeys(t, dir, nil)
	defer stop(t, e.a)
	var trail []store.AuditEntry
	e.must(e.all, 200, "GET", "/v1/audit?limit=1000", nil, &trail)
	find := func(key, action, object string, status int) bool {
		for _, a := range trail {
			if a.Key == key && a.Action == action && (object == "" || a.Object == object) && a.Status == status {
				return true
			}
		}
		return false
	}
	for _, w := range []struct {
		key, action, object string
		status              int
	}{
		{"BERTH_API_KEY", "POST /v1/keys", id, 200},
		{"BERTH_API_KEY", "POST /v1/keys", "", 400},
		{"BERTH_API_KEY", "PATCH /v1/keys/{keyId}", "ci-bot", 200},
		{"ci-bot", "POST /v1/templates", tpl.ID, 200},
		{"BERTH_API_KEY", "DELETE /v1/keys/{keyId}", id, 204},
	} {
		if !find(w.key, w.action, w.object, w.status) {
			t.Errorf("audit trail lacks %+v: %+v", w, trail)
		}
	}
	if find("BERTH_API_KEY", "GET /v1/keys", "", 200) {
		t.Error("reads are not management writes, yet GET /v1/keys is in the trail")
	}
	if code, _ := e.do(e.all, "GET", "/v1/audit?limit=0", nil, 5*time.Second); code != 400 {
		t.Errorf("GET /v1/audit?limit=0: %d, want 400", code)
	}
}

// TestOperatorKeyMigrates: a data directory of a Berth with one generated
// operator key (its hash in meta) starts with that key as the stored All
// key "operator"; deleted (another All key left), it stays deleted across
// restarts and no new key is generated.
func TestOperatorKeyMigrates(t *testing.T) {
	dir := t.TempDir()
	var notice bytes.Buffer
	cfg := func(c *app.Config) { c.APIKey, c.KeyNotice = "", &notice }
	e := startKeys(t, dir, cfg)
	old := regexp.MustCompile(`berth_[0-9a-f]{40}`).FindString(notice.String())
	if old == "" {
		t.Fatalf("no key shown: %q", notice.String())
	}
	stop(t, e.a)
	// Make the directory look like an older Berth's: the key's hash in
	// meta, no keys bucket entry.
	db, err := store.Open(dir+"/berth.db", store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *store.Tx) error {
		var ids []string
		tx.ForEachKey(store.APIKeys, func(k string) error { ids = append(ids, k); return nil })
		for _, id := range ids {
			tx.Apply(store.Delete(store.APIKeys, id))
		}
		return tx.Apply(store.PutRaw(store.Meta, "api_key_hash", []byte(mgmt.HashKey(old))))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	notice.Reset()
	e = startKeys(t, dir, cfg)
	e.all = old
	var keys []mgmt.KeyView
	e.must(old, 200, "GET", "/v1/keys", nil, &keys)
	if len(keys) != 1 || keys[0].Name != "operator" || keys[0].Level != "ALL" || !keys[0].Operator {
		t.Fatalf("after migration: %+v", keys)
	}
	if code, b := e.do(old, "DELETE", "/v1/keys/operator", nil, 5*time.Second); code != 409 {
		t.Errorf("deleting the last All key: %d %s, want 409", code, b)
	}
	_, admin := e.key("admin", map[string]any{"permission": "ALL"})
	e.must(admin, 204, "DELETE", "/v1/keys/operator", nil, nil)
	stop(t, e.a)

	e = startKeys(t, dir, cfg)
	defer stop(t, e.a)
	if notice.Len() != 0 {
		t.Errorf("a key was generated although one exists: %q", notice.String())
	}
	if code, _ := e.do(old, "GET", "/v1/keys", nil, 5*time.Second); code != 401 {
		t.Errorf("the deleted operator key after a restart: %d, want 401", code)
	}
	e.must(admin, 200, "GET", "/v1/keys", nil, nil)
}

// TestPerKeyRateLimit: one key past its limit is answered 429 while
// another key goes on.
func TestPerKeyRateLimit(t *testing.T) {
	e := startKeys(t, t.TempDir(), func(c *app.Config) { c.HTTP.KeyRequestsPer10s = 5 })
	defer stop(t, e.a)
	for i := 0; i < 5; i++ {
		e.must(e.all, 200, "GET", "/v1/templates", nil, nil)
	}
	code, b := e.do(e.all, "GET", "/v1/templates", nil, 5*time.Second)
	if code != 429 || !strings.Contains(string(b), "BERTH_API_KEY") {
		t.Fatalf("the 6th request within 10 s: %d %s, want 429 naming the key", code, b)
	}
	// The limit is per key: another key's bucket is full. (It is made
	// through mgmt: POST /v1/keys with the first key is limited too.)
	_, secret, err := e.a.Mgmt().CreateKey(context.Background(), mgmt.KeyInput{Name: ptr("other"), Level: ptr("READ_ONLY")})
	if err != nil {
		t.Fatal(err)
	}
	e.must(secret, 200, "GET", "/v1/templates", nil, nil)
}

func ptr[T any](v T) *T { return &v }
