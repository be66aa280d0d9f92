package kubetest

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The pod stages must carry the exclusion (or kwok would overwrite the
// status a test writes as the kubelet); the node stage must not (kwok keeps
// test-kubelet nodes Ready). Parsed as YAML: a bad splice would break kwok.
func TestKwokStagesLeaveTestKubeletPodsAlone(t *testing.T) {
	cfg, err := kwokStages()
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(cfg, "\n---\n")
	if len(docs) != 3 {
		t.Fatalf("want 3 stages, got %d", len(docs))
	}
	for _, d := range docs {
		var st struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				ResourceRef struct{ Kind string }
				Selector    struct {
					MatchExpressions []struct {
						Key      string
						Operator string
						Values   []string
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(d), &st); err != nil {
			t.Fatalf("stage does not parse: %v\n%s", err, d)
		}
		excluded := 0
		for _, e := range st.Spec.Selector.MatchExpressions {
			if strings.Contains(e.Key, KubeletAnnotation) && e.Operator == "DoesNotExist" {
				excluded++
			}
			if strings.Contains(e.Key, TestKubeletPrefix) && e.Operator == "In" && len(e.Values) == 1 && e.Values[0] == "false" {
				excluded++
			}
		}
		want := 0
		if st.Spec.ResourceRef.Kind == "Pod" {
			want = 2
		}
		if st.Kind != "Stage" || excluded != want {
			t.Errorf("stage %s (%s %s): %d exclusions, want %d", st.Metadata.Name, st.Kind, st.Spec.ResourceRef.Kind, excluded, want)
		}
	}
}
