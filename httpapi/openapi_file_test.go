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
	checkV1Limits(t, schemas)
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

// v1Limits are the fields of the v1 input schemas that repeat a limit of
// mgmt's table (mgmt.AllLimits): numbers by minimum and maximum, strings by
// maxLength, lists by maxItems, env by maxProperties. A field named here
// must carry its limit in every *Input schema that has it.
var v1Limits = map[string]mgmt.Limit{
	"name": mgmt.LimitName, "imageName": mgmt.LimitImage, "readme": mgmt.LimitReadme, "volumeMountPath": mgmt.LimitMountPath,
	"templateId": mgmt.LimitID, "networkVolumeId": mgmt.LimitID, "containerRegistryAuthId": mgmt.LimitID,
	"username": mgmt.LimitRegistryUser, "password": mgmt.LimitRegistryPassword,
	"gpuTypeIds": mgmt.LimitGPUIDs, "dataCenterIds": mgmt.LimitDataCenters, "networkVolumeIds": mgmt.LimitVolumeIDs,
	"instanceIds": mgmt.LimitInstanceIDs, "allowedCudaVersions": mgmt.LimitCudaVersions, "countryCodes": mgmt.LimitCountryCodes,
	"dockerStartCmd": mgmt.LimitCmdWords, "dockerEntrypoint": mgmt.LimitCmdWords, "env": mgmt.LimitEnvEntries, "ports": mgmt.LimitPorts,
	"gpuCount": mgmt.LimitGPUCount, "idleTimeout": mgmt.LimitIdleTimeout, "workersMin": mgmt.LimitWorkersMin,
	"workersMax": mgmt.LimitWorkersMax, "executionTimeoutMs": mgmt.LimitExecTimeout, "vcpuCount": mgmt.LimitVCPUsBeside,
	// scalerValue: the wider of its two ranges (the description gives both).
	"scalerValue":       {Min: mgmt.LimitQueueDelay.Min, Max: max(mgmt.LimitQueueDelay.Max, mgmt.LimitRequestCount.Max)},
	"containerDiskInGb": mgmt.LimitContainerDisk,
	// volumeInGb: 0 (none) or LimitPodVolume.
	"volumeInGb":   {Min: 0, Max: mgmt.LimitPodVolume.Max},
	"shmSizeInMb":  {Min: 0, Max: mgmt.LimitShmSize.Max}, // 0: the rule
	"minRAMPerGPU": mgmt.LimitMinRAMPerGPU, "minVCPUPerGPU": mgmt.LimitMinVCPUPerGPU, "minDownloadMbps": mgmt.LimitBandwidth,
	"minUploadMbps": mgmt.LimitBandwidth, "minDiskBandwidthMBps": mgmt.LimitBandwidth, "size": mgmt.LimitVolumeSize,
}

func checkV1Limits(t *testing.T, schemas openapi3.Schemas) {
	t.Helper()
	seen := map[string]bool{}
	for name, ref := range schemas {
		if !strings.HasSuffix(name, "Input") || ref.Value == nil {
			continue
		}
		for field, p := range ref.Value.Properties {
			l, ok := v1Limits[field]
			if !ok || p.Value == nil {
				continue
			}
			seen[field] = true
			s := p.Value
			if len(s.OneOf) > 0 { // ports: an array or the comma-joined string
				s = s.OneOf[0].Value
			}
			where := name + "." + field
			switch {
			case s.Type.Is("integer") || s.Type.Is("number"):
				if s.Min == nil || *s.Min != float64(l.Min) || s.Max == nil || *s.Max != float64(l.Max) {
					t.Errorf("%s: minimum %v maximum %v, mgmt says %d-%d", where, deref(s.Min), deref(s.Max), l.Min, l.Max)
				}
			case s.Type.Is("string"):
				if s.MaxLength == nil || *s.MaxLength != uint64(l.Max) {
					t.Errorf("%s: maxLength %v, mgmt says %d", where, derefU(s.MaxLength), l.Max)
				}
			case s.Type.Is("array"):
				if s.MaxItems == nil || *s.MaxItems != uint64(l.Max) {
					t.Errorf("%s: maxItems %v, mgmt says %d", where, derefU(s.MaxItems), l.Max)
				}
			case s.Type.Is("object"):
				if s.MaxProps == nil || *s.MaxProps != uint64(l.Max) {
					t.Errorf("%s: maxProperties %v, mgmt says %d", where, derefU(s.MaxProps), l.Max)
				}
			default:
				t.Errorf("%s: a %v, not a number, string, list or map", where, s.Type)
			}
		}
	}
	for field := range v1Limits {
		if !seen[field] {
			t.Errorf("no v1 input schema has %q: remove it from v1Limits", field)
		}
	}
}

func derefU(u *uint64) any {
	if u == nil {
		return nil
	}
	return *u
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
