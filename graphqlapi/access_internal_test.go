package graphqlapi

import (
	"slices"
	"testing"
)

// TestEveryRootFieldHasARule lists the schema's fields of Query, Mutation
// and User (what myself holds): one without an access rule fails here (and
// is refused when asked for), and a rule naming no field is stale.
func TestEveryRootFieldHasARule(t *testing.T) {
	shape, err := newSchemaShape(Schema)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, typ := range ruledTypes {
		fields := shape.fields[typ]
		if len(fields) == 0 {
			t.Fatalf("the schema has no fields on %s", typ)
		}
		for f := range fields {
			n++
			if _, ok := fieldRules[typ+"."+f]; !ok {
				t.Errorf("%s.%s has no access rule: add one to fieldRules (graphqlapi/access.go) and docs/keys.md", typ, f)
			}
		}
	}
	for name := range fieldRules {
		i := indexDot(name)
		if _, ok := shape.fields[name[:i]][name[i+1:]]; !ok || !slices.Contains(ruledTypes, name[:i]) {
			t.Errorf("access rule %s names no field of %v", name, ruledTypes)
		}
	}
	if n < 40 {
		t.Errorf("only %d fields listed", n)
	}
}
