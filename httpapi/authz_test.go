package httpapi_test

import (
	"slices"
	"testing"

	"berth/httpapi"
)

// TestEveryRouteHasAnAccessRule walks the router: a route × method without
// an access rule fails here (and is refused 403 when served), and a rule
// naming no route is stale.
func TestEveryRouteHasAnAccessRule(t *testing.T) {
	s := httpapi.New(httpapi.Config{Logger: quietLog})
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
