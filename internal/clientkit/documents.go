package clientkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Document reads a GraphQL document the clients send, as kept in
// graphqlapi/testdata (name: "runpod-python/create_endpoint.graphql"), and
// fills its {{slots}} with the given name, value pairs; a slot left unfilled
// fails tb.
func Document(tb testing.TB, name string, slots ...string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(ModuleRoot(tb), "graphqlapi", "testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(slots); i += 2 {
		s = strings.ReplaceAll(s, "{{"+slots[i]+"}}", slots[i+1])
	}
	if i := strings.Index(s, "{{"); i >= 0 {
		tb.Fatalf("%s: unfilled slot at %q", name, s[i:min(len(s), i+20)])
	}
	return s
}
