package httpapi_test

import (
	"net/http/httptest"
	"slices"
	"testing"

	"berth/httpapi"
	"berth/internal/apitest"
	"berth/internal/apptest"
)

// TestEveryRouteHasAnAccessRule walks the router: a route × method without
// an access rule fails here (and is refused 403 when served), and a rule
// naming no route is stale.
func TestEveryRouteHasAnAccessRule(t *testing.T) {
	s := apptest.Start(t, apptest.Config(t, apitest.Key)).API()
	served := map[string]bool{}
	for _, ra := range s.RouteAccess() {
		served[ra.Method+" "+ra.Path] = true
		if !ra.Ruled {
			t.Errorf("%s %s has no access rule: add one to accessRules (httpapi/authz.go) and docs/keys.md", ra.Method, ra.Path)
		}
	}
	if len(served) < 100 {
		t.Fatalf("the walk found %d routes: the router was not walked", len(served))
	}
	rules := httpapi.AccessRules()
	slices.Sort(rules)
	for _, r := range rules {
		if !served[r] {
			t.Errorf("access rule %q names no route", r)
		}
	}
}

// BenchmarkKeyCheck is the per-request cost of the key check (authz.go):
// the route's rule looked up, the key hashed and found, mgmt.Access, the
// per-key bucket — through the router to GET /v2/{id}/health of an
// unknown endpoint (404 after the check), with an All and a Restricted key.
func BenchmarkKeyCheck(b *testing.B) {
	cfg := apptest.Config(b, "bench-all")
	cfg.HTTP.KeyRequestsPer10s = 1 << 30
	h := apptest.Start(b, cfg).API().Handler()
	for _, c := range []struct{ name, key string }{{"all", "bench-all"}, {"none", ""}} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/v2/nosuchendpoint/health", nil)
			if c.key != "" {
				req.Header.Set("Authorization", "Bearer "+c.key)
			}
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
			}
		})
	}
}
