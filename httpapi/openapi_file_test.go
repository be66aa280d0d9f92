package httpapi_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"berth/mgmt"
)

var fixOpenAPI = flag.Bool("fix-openapi", false, "rewrite httpapi/openapi/v1.json in canonical form (sorted keys, 2-space indent)")

// canonicalJSON is raw re-encoded with sorted keys, two-space indent and
// no HTML escaping, so the file diffs line by line.
func canonicalJSON(t *testing.T, raw []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("openapi/v1.json is not JSON: %v", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestV1DocumentFile guards the maintained source of /v1/openapi.json, the
// embedded httpapi/openapi/v1.json: it is canonical JSON, it loads and
// validates on its own, and the limits it repeats from mgmt (data-centre
// id pattern, volume size, billing buckets, the data centre's id) are
// mgmt's. TestOpenAPIDocument checks it against the router; every HTTP test
// validates its traffic against it.
func TestV1DocumentFile(t *testing.T) {
	const path = "openapi/v1.json"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := canonicalJSON(t, raw); !bytes.Equal(raw, want) {
		if *fixOpenAPI {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote %s in canonical form", path)
		} else {
			t.Errorf("%s is not in canonical form (sorted keys, 2-space indent); run go test ./httpapi -run TestV1DocumentFile -fix-openapi", path)
		}
	}

	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s does not validate: %v", path, err)
	}

	if !strings.Contains(doc.Info.Description, `"`+mgmt.DataCenterID+`"`) {
		t.Errorf("info.description does not name the data centre %q", mgmt.DataCenterID)
	}
	schemas := doc.Components.Schemas
	prop := func(schema, name string) *openapi3.Schema {
		t.Helper()
		s, ok := schemas[schema]
		if !ok || s.Value == nil || s.Value.Properties[name] == nil {
			t.Fatalf("components.schemas.%s.properties.%s missing", schema, name)
		}
		return s.Value.Properties[name].Value
	}
	for _, s := range []string{"EndpointCreateInput", "EndpointUpdateInput", "PodCreateInput"} {
		if got := prop(s, "dataCenterIds").Items.Value.Pattern; got != mgmt.DataCenterPattern {
			t.Errorf("%s.dataCenterIds pattern %q, mgmt.DataCenterPattern is %q", s, got, mgmt.DataCenterPattern)
		}
	}
	if got := prop("NetworkVolumeCreateInput", "dataCenterId").Pattern; got != mgmt.DataCenterPattern {
		t.Errorf("NetworkVolumeCreateInput.dataCenterId pattern %q, mgmt.DataCenterPattern is %q", got, mgmt.DataCenterPattern)
	}
	for _, s := range []string{"NetworkVolumeCreateInput", "NetworkVolumeUpdateInput"} {
		if max := prop(s, "size").Max; max == nil || *max != float64(mgmt.LimitVolumeSize.Max) {
			t.Errorf("%s.size maximum %v, mgmt.LimitVolumeSize.Max is %d", s, deref(max), mgmt.LimitVolumeSize.Max)
		}
		if min := prop(s, "size").Min; min == nil || *min != float64(mgmt.LimitVolumeSize.Min) {
			t.Errorf("%s.size minimum %v, mgmt.LimitVolumeSize.Min is %d", s, deref(min), mgmt.LimitVolumeSize.Min)
		}
	}
	for _, p := range []string{"/v1/billing/pods", "/v1/billing/endpoints", "/v1/billing/networkvolumes"} {
		item := doc.Paths.Find(p)
		if item == nil || item.Get == nil {
			t.Fatalf("GET %s missing", p)
		}
		q := item.Get.Parameters.GetByInAndName("query", "bucketSize")
		if q == nil {
			t.Fatalf("GET %s has no bucketSize", p)
		}
		var got []string
		for _, v := range q.Schema.Value.Enum {
			s, _ := v.(string)
			got = append(got, s)
		}
		if !slices.Equal(got, mgmt.BucketSizes) {
			t.Errorf("GET %s bucketSize enum %v, mgmt.BucketSizes is %v", p, got, mgmt.BucketSizes)
		}
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
