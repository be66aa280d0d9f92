package mgmt_test

import (
	"context"
	"fmt"
	"path/filepath"
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
