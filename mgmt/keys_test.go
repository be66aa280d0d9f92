package mgmt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"berth/mgmt"
	"berth/store"
)

// BenchmarkAuthenticateAndAccess is the key check's own cost per request:
// a stored key's secret hashed and found among 100 keys, its use noted,
// and mgmt.Access deciding a Restricted key's read of its endpoint.
func BenchmarkAuthenticateAndAccess(b *testing.B) {
	db, err := store.Open(filepath.Join(b.TempDir(), "berth.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	s := mgmt.New(mgmt.Config{Store: db})
	if err := s.SetupKeys("", ""); err != nil {
		b.Fatal(err)
	}
	lvl, name := mgmt.LevelReadOnly, ""
	var secret string
	for i := range 100 {
		name = fmt.Sprint("k", i)
		if _, secret, err = s.CreateKey(context.Background(), mgmt.KeyInput{Name: &name, Level: &lvl}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := s.Authenticate(secret)
		if err != nil {
			b.Fatal(err)
		}
		if err := mgmt.Access(p, mgmt.ScopeEndpoint, "ep", mgmt.Read, "GET /v2/{endpointId}/health"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAccess is the decision table of docs/keys.md: each level × scope ×
// read/write, on a granted and a not-granted endpoint; a refusal is
// Forbidden and names the key and its level.
func TestAccess(t *testing.T) {
	all := &mgmt.Principal{Name: "a", Level: mgmt.LevelAll}
	ro := &mgmt.Principal{Name: "ro", Level: mgmt.LevelReadOnly}
	rr := &mgmt.Principal{Name: "rr", Level: mgmt.LevelRestricted, Grants: map[string]string{"e1": mgmt.GrantRead}}
	rw := &mgmt.Principal{Name: "rw", Level: mgmt.LevelRestricted, Grants: map[string]string{"e1": mgmt.GrantReadWrite}}
	R, W := mgmt.Read, mgmt.Write
	for _, c := range []struct {
		p     *mgmt.Principal
		scope mgmt.Scope
		ep    string
		need  mgmt.Need
		ok    bool
	}{
		{all, mgmt.ScopeAdmin, "", W, true}, {all, mgmt.ScopeWorker, "", W, true}, {all, mgmt.ScopeAccount, "", W, true},
		{ro, mgmt.ScopeAccount, "", R, true}, {ro, mgmt.ScopeAccount, "", W, false}, {ro, mgmt.ScopeEndpoint, "e2", R, true},
		{ro, mgmt.ScopeEndpoint, "e1", W, false}, {ro, mgmt.ScopeAdmin, "", R, false}, {ro, mgmt.ScopeWorker, "", W, false},
		{ro, mgmt.ScopeEndpointList, "", R, true}, {ro, mgmt.ScopeEndpointList, "", W, false}, {ro, mgmt.ScopeFields, "", R, true},
		{rr, mgmt.ScopeEndpoint, "e1", R, true}, {rr, mgmt.ScopeEndpoint, "e1", W, false}, {rr, mgmt.ScopeEndpoint, "e2", R, false},
		{rr, mgmt.ScopeAccount, "", R, false}, {rr, mgmt.ScopeEndpointList, "", R, true}, {rr, mgmt.ScopeEndpointList, "", W, false},
		{rw, mgmt.ScopeEndpoint, "e1", W, true}, {rw, mgmt.ScopeEndpoint, "e2", W, false}, {rw, mgmt.ScopeEndpoint, "e2", R, false},
		{rw, mgmt.ScopeAccount, "", R, false}, {rw, mgmt.ScopeAdmin, "", R, false}, {rw, mgmt.ScopeFields, "", R, true},
		{nil, mgmt.ScopeAccount, "", R, false}, {nil, mgmt.ScopePublic, "", R, true},
	} {
		err := mgmt.Access(c.p, c.scope, c.ep, c.need, "X")
		switch {
		case c.ok && err != nil:
			t.Errorf("%+v scope %d %s need %d: %v, want allowed", c.p, c.scope, c.ep, c.need, err)
		case !c.ok && mgmt.KindOf(err) != mgmt.Forbidden:
			t.Errorf("%+v scope %d %s need %d: %v, want Forbidden", c.p, c.scope, c.ep, c.need, err)
		case !c.ok && c.p != nil && !strings.Contains(err.Error(), `key "`+c.p.Name+`" is`):
			t.Errorf("refusal does not name the key: %v", err)
		}
	}
	if !mgmt.Visible(rr, "e1") || mgmt.Visible(rr, "e2") || !mgmt.Visible(ro, "e2") || mgmt.Visible(nil, "e1") {
		t.Error("Visible disagrees with the grants")
	}
}
