package v2api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Query and header parameters, as v2.json declares them. A value that
// fails its schema (not an integer, not one of an enum, a malformed CUDA
// version) is a 422, as the document's UnprocessableEntityError says of
// "parameters"; the rules between parameters (lastN with startTime,
// product without include=AVAILABILITY) are the handlers' 400s. Lists are
// comma-separated (style form, explode false: ?product=POD,SERVERLESS);
// repeating the parameter works too.

type param struct {
	name, in string // in: query or header
	schema   string // JSON Schema of the value
	desc     string
}

const (
	cudaVersionsSchema = `{"type": "array", "items": {"type": "string", "pattern": "^\\d+\\.\\d+$"}}`
	billingIDDesc      = "Filter to one "
)

var (
	catalogInclude = param{"include", "query", `{"type": "array", "maxItems": 1, "items": {"type": "string", "enum": ["AVAILABILITY"]}}`,
		"Comma-separated expansions: AVAILABILITY (needs product)."}
	gpuParams = []param{catalogInclude,
		{"product", "query", `{"type": "array", "items": {"type": "string", "enum": ["POD", "CLUSTER", "SERVERLESS"]}}`,
			"Comma-separated product contexts; required with include=AVAILABILITY and valid only with it (400 either way)."},
		{"count", "query", `{"type": "integer", "minimum": 1}`, "GPU count; valid only with include=AVAILABILITY."},
		{"cloud", "query", `{"type": "string", "enum": ["SECURE", "COMMUNITY"]}`, "Valid only with include=AVAILABILITY."},
		{"countryCodes", "query", `{"type": "array", "items": {"type": "string", "pattern": "^[A-Z]{2}$"}}`, "Valid only with include=AVAILABILITY."},
		{"cudaVersions", "query", cudaVersionsSchema, "Valid only with include=AVAILABILITY; exclusive with minCudaVersion."},
		{"minCudaVersion", "query", `{"type": "string", "pattern": "^\\d+(\\.\\d+)?$"}`, "Valid only with include=AVAILABILITY; exclusive with cudaVersions."},
	}
	cpuParams = []param{catalogInclude,
		{"product", "query", `{"type": "array", "items": {"type": "string", "enum": ["POD", "SERVERLESS"]}}`,
			"Comma-separated product contexts; required with include=AVAILABILITY and valid only with it (400 either way)."},
		{"vcpuCount", "query", `{"type": "integer", "minimum": 2}`, "Valid only with include=AVAILABILITY."},
	}
	dcInclude = param{"include", "query", `{"type": "array", "items": {"type": "string", "enum": ["GPU_AVAILABILITY", "CPU_AVAILABILITY"]}}`,
		"Comma-separated expansions: GPU_AVAILABILITY, CPU_AVAILABILITY."}
	logParams = []param{
		{"source", "query", `{"type": "string", "enum": ["container", "system"]}`, "Omit for both."},
		{"tail", "query", `{"type": "integer", "minimum": 0, "maximum": 5000}`, "Lines of backfill before the live stream [100]."},
		{"since", "query", `{"type": "string", "format": "date-time"}`, "Accepted; Berth cannot select by time (Docker gives no line times)."},
		{"Last-Event-ID", "header", `{"type": "string"}`, "Accepted; see since."},
		{"follow", "query", `{"type": "boolean"}`, "Berth: false ends the stream after the backfill [true]."},
	}
	billingParams = []param{
		{"startTime", "query", `{"type": "string", "format": "date-time"}`, "Exclusive with lastN."},
		{"endTime", "query", `{"type": "string", "format": "date-time"}`, "Exclusive with lastN."},
		{"bucketSize", "query", `{"type": "string", "enum": ["hour", "day", "week", "month", "year"]}`, "[day]"},
		{"lastN", "query", `{"type": "integer", "minimum": 1}`, "The last N buckets; exclusive with startTime/endTime (400)."},
	}
)

// opParams are the parameters of each operation that has any.
var opParams = map[string][]param{
	"listPods":      {{"includeClusterPods", "query", `{"type": "boolean"}`, "Berth has no clusters: no pods to add."}},
	"getPodLogs":    logParams,
	"getWorkerLogs": logParams,
	"listGpuTypes":  gpuParams, "getGpuType": gpuParams,
	"listCpuTypes": cpuParams, "getCpuType": cpuParams,
	"listDataCenters": {dcInclude,
		{"regions", "query", `{"type": "array", "items": {"type": "string", "enum": ["NORTH_AMERICA", "SOUTH_AMERICA", "EUROPE", "ASIA", "MIDDLE_EAST", "AFRICA", "OCEANIA", "ANTARCTICA", "UNKNOWN"]}}`, "Comma-separated; this host's region is UNKNOWN."},
		{"networkVolumeTypes", "query", `{"type": "array", "items": {"type": "string", "enum": ["STANDARD", "HIGH_PERFORMANCE"]}}`, "Comma-separated; all required."},
		{"compliance", "query", `{"type": "array", "items": {"type": "string", "enum": ["GDPR", "ISO_IEC_27001", "ISO_14001", "PCI_DSS", "HITRUST", "SOC_1_TYPE_2", "SOC_2_TYPE_2", "SOC_3_TYPE_2", "ITAR", "FISMA_HIGH", "HIPAA", "RENEWABLE"]}}`, "Comma-separated; this host claims none."},
		{"globalNetwork", "query", `{"type": "boolean"}`, ""},
	},
	"getDataCenter":       {dcInclude},
	"listPublicTemplates": {{"source", "query", `{"type": "string", "enum": ["official", "verified", "community"]}`, "[official]"}},
	"listBilling":         billingParams,
	"listPodBilling":      append(billingParams[:len(billingParams):len(billingParams)], param{"podId", "query", `{"type": "string"}`, billingIDDesc + "pod."}),
	"listServerlessBilling": append(billingParams[:len(billingParams):len(billingParams)],
		param{"serverlessId", "query", `{"type": "string"}`, billingIDDesc + "endpoint."}),
	"listEndpointBilling": billingParams,
	"listNetworkVolumeBilling": append(billingParams[:len(billingParams):len(billingParams)],
		param{"networkVolumeId", "query", `{"type": "string"}`, billingIDDesc + "network volume."}),
	"listClusterBilling": append(billingParams[:len(billingParams):len(billingParams)],
		param{"clusterId", "query", `{"type": "string"}`, billingIDDesc + "cluster (Berth has none)."}),
}

// schema decodes a parameter's schema.
func (p param) schemaValue() map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(p.schema), &m); err != nil {
		panic("v2api: parameter " + p.name + ": " + err.Error())
	}
	return m
}

var paramSchemas = sync.OnceValue(func() map[string]*jsonschema.Schema {
	out := map[string]*jsonschema.Schema{}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	for _, ps := range opParams {
		for _, p := range ps {
			if _, ok := out[p.schema]; ok {
				continue
			}
			url := fmt.Sprintf("berth:param-%d.json", len(out))
			if err := c.AddResource(url, p.schemaValue()); err != nil {
				panic("v2api: parameter " + p.name + ": " + err.Error())
			}
			out[p.schema] = c.MustCompile(url)
		}
	}
	return out
})

// checkParams validates the parameters r gives against op's schemas:
// invalidBody (422) listing each violation.
func checkParams(op string, r *http.Request) error {
	var errs []string
	q := r.URL.Query()
	for _, p := range opParams[op] {
		var raw []string
		if p.in == "header" {
			raw = r.Header.Values(p.name)
		} else {
			raw = q[p.name]
		}
		if len(raw) == 0 {
			continue
		}
		v, msg := paramValue(p, raw)
		if msg == "" {
			if err := paramSchemas()[p.schema].Validate(v); err != nil {
				msg = leafMessages(err)
			}
		}
		if msg != "" {
			errs = append(errs, fmt.Sprintf("%s %s: %s", p.in, p.name, msg))
		}
	}
	if len(errs) > 0 {
		return invalidBody{errs}
	}
	return nil
}

// paramValue is a parameter's strings as the JSON value its schema types:
// a list split on commas, an integer, a boolean, else the last string.
func paramValue(p param, raw []string) (any, string) {
	var s struct {
		Type string `json:"type"`
	}
	json.Unmarshal([]byte(p.schema), &s)
	last := raw[len(raw)-1]
	switch s.Type {
	case "array":
		var out []any
		for _, v := range raw {
			for part := range strings.SplitSeq(v, ",") {
				out = append(out, strings.TrimSpace(part))
			}
		}
		return out, ""
	case "integer":
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil {
			return nil, fmt.Sprintf("%q is not an integer", ShortParam(last))
		}
		return json.Number(strconv.FormatInt(n, 10)), ""
	case "boolean":
		b, err := strconv.ParseBool(last)
		if err != nil || (last != "true" && last != "false") {
			return nil, fmt.Sprintf("%q is not true or false", ShortParam(last))
		}
		return b, ""
	}
	return last, ""
}

// queryList is a list parameter's values: comma-separated, repeatable.
func queryList(r *http.Request, name string) []string {
	var out []string
	for _, v := range r.URL.Query()[name] {
		for part := range strings.SplitSeq(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// ShortParam cuts a parameter value for a message.
func ShortParam(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// leafMessages joins a validation error's leaf messages.
func leafMessages(err error) string {
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return err.Error()
	}
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := ""
			if len(e.InstanceLocation) > 0 {
				loc = "[" + strings.Join(e.InstanceLocation, "][") + "] "
			}
			msgs = append(msgs, loc+e.ErrorKind.LocalizedString(printer))
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	return strings.Join(msgs, "; ")
}
