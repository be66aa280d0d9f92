package graphqlapi

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/graph-gophers/graphql-go"
	"github.com/graph-gophers/graphql-go/ast"
)

// The schema file and the resolvers are checked against each other when
// the server starts (httpapi.New panics otherwise); these tests show the
// check bites, and that every operation the schema offers is tested.

func parse(schema string) error {
	_, err := graphql.ParseSchema(schema, &resolver{}, graphql.UseFieldResolvers())
	return err
}

func TestSchemaMatchesResolvers(t *testing.T) {
	if err := parse(Schema); err != nil {
		t.Fatalf("the schema and the resolvers disagree: %v", err)
	}
	for name, edit := range map[string][2]string{
		"a query without a resolver":       {"type Query {", "type Query {\n  savingsPlans: [String!]!"},
		"a mutation without a resolver":    {"type Mutation {", "type Mutation {\n  createNetworkVolume(name: String!): Boolean"},
		"a field of another type":          {"  memoryInGb: Int!\n  cudaCores: Int", "  memoryInGb: String!\n  cudaCores: Int"},
		"an input field the Go side lacks": {"input PodStopInput {", "input PodStopInput {\n  reason: String"},
		"an argument the Go side lacks":    {"deleteEndpoint(id: String!)", "deleteEndpoint(id: String!, force: Boolean)"},
	} {
		changed := strings.Replace(Schema, edit[0], edit[1], 1)
		if changed == Schema {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if err := parse(changed); err == nil {
			t.Errorf("%s: the schema parsed against the resolvers", name)
		}
	}
}

// TestEveryOperationIsTested: each Query and Mutation field is sent by
// some test (a fixture in testdata or a document in a test file).
func TestEveryOperationIsTested(t *testing.T) {
	var sent strings.Builder
	for _, glob := range []string{"testdata/*/*.graphql", "*_test.go"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			if f == "schema_test.go" {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sent.Write(b)
		}
	}
	s := graphql.MustParseSchema(Schema, nil).AST()
	for _, root := range []string{"Query", "Mutation"} {
		typ, ok := s.Types[root].(*ast.ObjectTypeDefinition)
		if !ok {
			t.Fatalf("no %s type", root)
		}
		for _, f := range typ.Fields {
			// Called: the name followed by arguments or a selection.
			if !regexp.MustCompile(`\b` + f.Name + `\s*[({]`).MatchString(sent.String()) {
				t.Errorf("%s.%s is not sent by any test", root, f.Name)
			}
		}
	}
}
