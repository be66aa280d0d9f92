package v2api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// The request bodies' schemas, as RunPod's v2.json states them (JSON
// Schema 2020-12), plus Berth's few extensions (a template's readme, an
// endpoint's modelReferences and git). A
// body that fails its schema is answered 422 with each violation — the
// document's UnprocessableEntityError — before any rule runs; a body that
// passes and breaks a rule is mgmt's 400. The same schemas are the
// request bodies of Berth's /v2/openapi.json, and the conformance tests
// check them against RunPod's on known-bad payloads.
//
// Numbers RunPod gives no maximum keep none here: mgmt's limits refuse
// them with a 400 naming the range, as a rule, not a schema.
const requestSchemas = `{
"$schema": "https://json-schema.org/draft/2020-12/schema",
"$defs": {
  "ContainerConfig": {"type": "object", "properties": {
    "args": {"type": "string"}, "disk": {"type": "integer", "minimum": 1},
    "env": {"type": "object", "additionalProperties": {"type": "string"}},
    "image": {"type": "string"}, "ports": {"type": "array", "items": {"type": "string"}},
    "registry": {"type": ["string", "null"]}}},
  "CudaVersions": {"type": "array", "items": {"type": "string", "pattern": "^\\d+\\.\\d+$"}},
  "BaseCpuConfig": {"type": "object", "required": ["id", "vcpuCount"], "properties": {
    "id": {"type": "string", "minLength": 1}, "vcpuCount": {"type": "integer", "minimum": 2}}},
  "CreateCpuConfig": {"allOf": [{"$ref": "#/$defs/BaseCpuConfig"}], "unevaluatedProperties": false},
  "GpuConfig": {"type": "object", "required": ["id"], "properties": {
    "id": {"type": "string"}, "count": {"type": "integer", "minimum": 1}}},
  "CreateGpuConfig": {"allOf": [{"$ref": "#/$defs/GpuConfig"}, {"type": "object", "properties": {
    "allowedCudaVersions": {"$ref": "#/$defs/CudaVersions"},
    "minCudaVersion": {"type": "string", "pattern": "^\\d+\\.\\d+$"}}}], "unevaluatedProperties": false},
  "BaseEndpointGpuConfig": {"type": "object", "properties": {
    "pools": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    "excludedTypes": {"type": "array", "uniqueItems": true, "items": {"type": "string", "pattern": "^\\s*[^-\\s]"}},
    "count": {"type": "integer", "minimum": 1}}},
  "CreateEndpointGpuConfig": {"allOf": [{"$ref": "#/$defs/BaseEndpointGpuConfig"}, {"type": "object", "required": ["pools"], "properties": {
    "allowedCudaVersions": {"$ref": "#/$defs/CudaVersions"},
    "minCudaVersion": {"type": "string", "pattern": "^\\d+\\.\\d+$"}}}], "unevaluatedProperties": false},
  "UpdateEndpointGpuConfig": {"allOf": [{"$ref": "#/$defs/BaseEndpointGpuConfig"}, {"type": "object",
    "dependentRequired": {"excludedTypes": ["pools"]}, "properties": {
    "allowedCudaVersions": {"$ref": "#/$defs/CudaVersions"},
    "minCudaVersion": {"type": "string", "pattern": "^$|^\\d+\\.\\d+$"}}}], "unevaluatedProperties": false},
  "QueueDelayScaling": {"type": "object", "additionalProperties": false, "required": ["type", "queueDelay"], "properties": {
    "type": {"type": "string", "enum": ["QUEUE_DELAY"]}, "queueDelay": {"type": "number", "minimum": 0.5}}},
  "RequestCountScaling": {"type": "object", "additionalProperties": false, "required": ["type", "requestCount"], "properties": {
    "type": {"type": "string", "enum": ["REQUEST_COUNT"]}, "requestCount": {"type": "integer", "minimum": 1}}},
  "EndpointScaling": {"oneOf": [{"$ref": "#/$defs/QueueDelayScaling"}, {"$ref": "#/$defs/RequestCountScaling"}]},
  "EndpointWorkers": {"type": "object", "additionalProperties": false, "properties": {
    "min": {"type": "integer", "minimum": 0}, "max": {"type": "integer", "minimum": 0},
    "idleTimeout": {"type": "integer", "minimum": 1, "maximum": 3600}}},
  "EndpointCpus": {"type": "array", "minItems": 1, "uniqueItems": true, "items": {"$ref": "#/$defs/CreateCpuConfig"}},
  "EndpointType": {"type": "string", "enum": ["QUEUE", "LOAD_BALANCER"]},
  "FlashBoot": {"type": "string", "enum": ["OFF", "FLASHBOOT", "PRIORITY_FLASHBOOT"]},
  "StringList": {"type": "array", "items": {"type": "string"}},
  "GitTrack": {"type": ["object", "null"], "additionalProperties": false, "description": "Berth: the git repository the endpoint tracks (push to deploy): a branch (every push to it builds) or tags (a release published, or a tag pushed, whose name matches the pattern). webhookSecret: the HMAC secret (16-256 bytes), generated and answered once when not given; rotateWebhookSecret makes a new one. null stops tracking.", "properties": {
    "repository": {"type": "string"}, "branch": {"type": "string"}, "tags": {"type": "string"},
    "dockerfile": {"type": "string"}, "context": {"type": "string"}, "credentialId": {"type": "string"},
    "webhookSecret": {"type": "string"}, "rotateWebhookSecret": {"type": "boolean"}}},
  "CreateEndpointRequest": {"allOf": [{"$ref": "#/$defs/ContainerConfig"},
    {"if": {"not": {"required": ["templateId"]}}, "then": {"required": ["image"]}},
    {"type": "object", "required": ["name", "type", "scaling"], "properties": {
      "gpu": {"$ref": "#/$defs/CreateEndpointGpuConfig"}, "name": {"type": "string", "minLength": 1},
      "scaling": {"$ref": "#/$defs/EndpointScaling"}, "type": {"$ref": "#/$defs/EndpointType"},
      "cpu": {"$ref": "#/$defs/EndpointCpus"}, "dataCenterIds": {"$ref": "#/$defs/StringList"},
      "flashboot": {"$ref": "#/$defs/FlashBoot"}, "networkVolumes": {"$ref": "#/$defs/StringList"},
      "templateId": {"type": "string", "minLength": 1}, "timeout": {"type": "integer"},
      "workers": {"$ref": "#/$defs/EndpointWorkers"}, "modelReferences": {"$ref": "#/$defs/StringList"},
      "git": {"$ref": "#/$defs/GitTrack"}}}],
    "if": {"required": ["type"], "properties": {"type": {"const": "LOAD_BALANCER"}}},
    "then": {"properties": {"scaling": {"$ref": "#/$defs/RequestCountScaling"}}},
    "unevaluatedProperties": false},
  "UpdateEndpointRequest": {"allOf": [{"$ref": "#/$defs/ContainerConfig"}, {"type": "object", "properties": {
      "cpu": {"$ref": "#/$defs/EndpointCpus"}, "dataCenterIds": {"$ref": "#/$defs/StringList"},
      "flashboot": {"$ref": "#/$defs/FlashBoot"}, "gpu": {"$ref": "#/$defs/UpdateEndpointGpuConfig"},
      "name": {"type": "string", "minLength": 1}, "networkVolumes": {"$ref": "#/$defs/StringList"},
      "scaling": {"$ref": "#/$defs/EndpointScaling"}, "templateId": {"type": "string"},
      "timeout": {"type": "integer"}, "workers": {"$ref": "#/$defs/EndpointWorkers"},
      "modelReferences": {"$ref": "#/$defs/StringList"}, "git": {"$ref": "#/$defs/GitTrack"}}}],
    "unevaluatedProperties": false},
  "PersistentMount": {"type": "object", "required": ["size", "path"], "additionalProperties": false, "properties": {
    "size": {"type": "integer", "minimum": 10}, "path": {"type": "string"}}},
  "NetworkMount": {"type": "object", "required": ["volumeId", "path"], "additionalProperties": false, "properties": {
    "volumeId": {"type": "string"}, "path": {"type": "string"}}},
  "Mounts": {"type": "object", "additionalProperties": false, "properties": {
    "persistent": {"$ref": "#/$defs/PersistentMount"},
    "network": {"type": "array", "maxItems": 1, "items": {"$ref": "#/$defs/NetworkMount"}}}},
  "TemplateMounts": {"type": "object", "additionalProperties": false, "properties": {
    "persistent": {"$ref": "#/$defs/PersistentMount"}}},
  "CreatePodRequest": {"allOf": [{"$ref": "#/$defs/ContainerConfig"}, {"type": "object", "required": ["name"], "properties": {
      "name": {"type": "string", "minLength": 1}, "cloud": {"type": "string", "enum": ["SECURE", "COMMUNITY"]},
      "cpu": {"$ref": "#/$defs/CreateCpuConfig"}, "dataCenterIds": {"$ref": "#/$defs/StringList"},
      "globalNetworking": {"type": "boolean"}, "gpu": {"$ref": "#/$defs/CreateGpuConfig"},
      "mounts": {"$ref": "#/$defs/Mounts"}, "startJupyter": {"type": "boolean"}, "startSsh": {"type": "boolean"},
      "templateId": {"type": "string", "minLength": 1}}}],
    "if": {"not": {"required": ["templateId"]}}, "then": {"required": ["image"]},
    "unevaluatedProperties": false},
  "UpdatePodRequest": {"allOf": [{"$ref": "#/$defs/ContainerConfig"}, {"type": "object", "properties": {
      "globalNetworking": {"type": "boolean"}, "locked": {"type": "boolean"}, "mounts": {"$ref": "#/$defs/Mounts"},
      "name": {"type": "string", "minLength": 1}, "templateId": {"type": "string"}}}],
    "unevaluatedProperties": false},
  "PodActionRequest": {"type": "object", "additionalProperties": false, "required": ["action"], "properties": {
    "action": {"type": "string", "enum": ["start", "stop", "restart", "terminate"]}}},
  "TemplateCategory": {"type": "string", "enum": ["CPU", "NVIDIA", "AMD"]},
  "CreateTemplateRequest": {"allOf": [{"$ref": "#/$defs/ContainerConfig"}, {"type": "object", "required": ["name", "image"], "properties": {
      "name": {"type": "string", "minLength": 1}, "allowedCudaVersions": {"$ref": "#/$defs/CudaVersions"},
      "category": {"$ref": "#/$defs/TemplateCategory"}, "mounts": {"$ref": "#/$defs/TemplateMounts"},
      "public": {"type": "boolean"}, "serverless": {"type": "boolean"}, "startJupyter": {"type": "boolean"},
      "startSsh": {"type": "boolean"}, "readme": {"type": "string", "description": "Berth: v1's readme"}}}],
    "unevaluatedProperties": false},
  "UpdateTemplateRequest": {"allOf": [{"$ref": "#/$defs/ContainerConfig"}, {"type": "object", "properties": {
      "name": {"type": "string", "minLength": 1}, "allowedCudaVersions": {"$ref": "#/$defs/CudaVersions"},
      "category": {"$ref": "#/$defs/TemplateCategory"}, "mounts": {"$ref": "#/$defs/TemplateMounts"},
      "public": {"type": "boolean"}, "serverless": {"type": "boolean"}, "startJupyter": {"type": "boolean"},
      "startSsh": {"type": "boolean"}, "readme": {"type": "string", "description": "Berth: v1's readme"}}}],
    "unevaluatedProperties": false},
  "CreateNetworkVolumeRequest": {"type": "object", "additionalProperties": false, "required": ["name", "size", "dataCenter"], "properties": {
    "dataCenter": {"type": "string", "minLength": 1}, "name": {"type": "string", "minLength": 1},
    "size": {"type": "integer", "minimum": 10, "maximum": 4096}, "type": {"type": "string", "enum": ["STANDARD", "HIGH_PERFORMANCE"]}}},
  "UpdateNetworkVolumeRequest": {"type": "object", "additionalProperties": false, "minProperties": 1, "properties": {
    "name": {"type": "string", "minLength": 1}, "size": {"type": "integer", "minimum": 10, "maximum": 4096}}},
  "CreateRegistryRequest": {"type": "object", "additionalProperties": false, "required": ["name", "username", "password"], "properties": {
    "name": {"type": "string", "minLength": 1}, "password": {"type": "string", "minLength": 1}, "username": {"type": "string", "minLength": 1}}},
  "CreateGitCredentialRequest": {"type": "object", "additionalProperties": false, "required": ["name", "kind", "secret"], "properties": {
    "name": {"type": "string", "minLength": 1}, "kind": {"type": "string", "enum": ["TOKEN", "SSH_KEY"]}, "username": {"type": "string"},
    "secret": {"type": "string", "minLength": 1, "description": "the token or the SSH private key: write-only"},
    "knownHosts": {"type": "string", "description": "SSH_KEY: the server's host keys, known_hosts form"}}},
  "RollbackEndpointRequest": {"type": "object", "additionalProperties": false, "properties": {
    "version": {"type": "integer", "minimum": 1, "description": "the release to go back to; absent: the newest earlier build's"}}},
  "SetHuggingFaceTokenRequest": {"type": "object", "additionalProperties": false, "properties": {
    "token": {"type": "string", "description": "Berth: a Hugging Face access token (hf_…), 1–4096 printable ASCII characters without spaces (else 400 naming token); write-only"}}},
  "UpdateSshKeysRequest": {"type": "object", "additionalProperties": false, "required": ["keys"], "properties": {
    "keys": {"type": "array", "items": {"type": "string", "pattern": "^(ssh|ecdsa|sk)-[^\\s]+ [^\\s]+([ \\t][^\\n\\r]*)?$"}}}}
}}`

// bodySchemas maps an operation to the name of its request body's schema.
var bodySchemas = map[string]string{
	"createTemplate": "CreateTemplateRequest", "updateTemplate": "UpdateTemplateRequest",
	"createEndpoint": "CreateEndpointRequest", "updateEndpoint": "UpdateEndpointRequest",
	"createPod": "CreatePodRequest", "updatePod": "UpdatePodRequest", "podAction": "PodActionRequest",
	"createNetworkVolume": "CreateNetworkVolumeRequest", "updateNetworkVolume": "UpdateNetworkVolumeRequest",
	"createRegistry": "CreateRegistryRequest", "updateSshKeys": "UpdateSshKeysRequest",
	"rollbackEndpoint": "RollbackEndpointRequest", "createGitCredential": "CreateGitCredentialRequest", "setHuggingFaceToken": "SetHuggingFaceTokenRequest",
}

// compiled holds the compiled schema of every body.
var compiled = sync.OnceValue(func() map[string]*jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(requestSchemas))
	if err != nil {
		panic("v2api: request schemas: " + err.Error())
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "berth:v2-requests.json"
	if err := c.AddResource(url, doc); err != nil {
		panic("v2api: request schemas: " + err.Error())
	}
	out := map[string]*jsonschema.Schema{}
	for _, name := range bodySchemas {
		s, err := c.Compile(url + "#/$defs/" + name)
		if err != nil {
			panic("v2api: compile " + name + ": " + err.Error())
		}
		out[name] = s
	}
	return out
})

// schemaDefs are the schemas as JSON values, for the document.
var schemaDefs = sync.OnceValue(func() map[string]any {
	var doc struct {
		Defs map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal([]byte(requestSchemas), &doc); err != nil {
		panic("v2api: request schemas: " + err.Error())
	}
	return doc.Defs
})

// invalidBody is a body that fails its schema: 422, each violation listed.
type invalidBody struct{ errs []string }

func (e invalidBody) Error() string {
	return "request validation failed: " + strings.Join(e.errs, "; ")
}

var printer = message.NewPrinter(language.English)

// checkBody validates body against op's schema; nil when op has none.
func checkBody(op string, body []byte) error {
	name, ok := bodySchemas[op]
	if !ok {
		return nil
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return bad("", "request body must be a JSON object: %v", err)
	}
	err = compiled()[name].Validate(inst)
	if err == nil {
		return nil
	}
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return invalidBody{[]string{err.Error()}}
	}
	var errs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			errs = append(errs, leafMessage(e))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	errs = dropEchoes(errs)
	sort.Strings(errs)
	errs = dedupe(errs)
	if len(errs) > 20 {
		errs = append(errs[:20], fmt.Sprintf("… and %d more", len(errs)-20))
	}
	return invalidBody{errs}
}

// leafMessage says one violation: "$.workers.max: minimum: got -1, want
// 0"; a property refused by unevaluatedProperties reads as v2.json's
// example does ("$: additional properties 'bogus' not allowed").
func leafMessage(e *jsonschema.ValidationError) string {
	loc := e.InstanceLocation
	if _, ok := e.ErrorKind.(*kind.FalseSchema); ok && len(loc) > 0 {
		return fmt.Sprintf("%s: additional properties '%s' not allowed", jsonPath(loc[:len(loc)-1]), loc[len(loc)-1])
	}
	return fmt.Sprintf("%s: %s", jsonPath(loc), e.ErrorKind.LocalizedString(printer))
}

// dropEchoes drops, beside other violations, the "additional properties"
// ones about properties the schemas know: unevaluatedProperties reports
// every property of a branch that failed, so a missing "scaling" would
// also read as "name not allowed".
func dropEchoes(errs []string) []string {
	known := knownProperties()
	var kept []string
	for _, e := range errs {
		if i := strings.Index(e, ": additional properties '"); i >= 0 {
			name := strings.TrimSuffix(e[i+len(": additional properties '"):], "' not allowed")
			if known[name] {
				continue
			}
		}
		kept = append(kept, e)
	}
	if len(kept) == 0 {
		return errs
	}
	return kept
}

// knownProperties are the names under any "properties" of the schemas.
var knownProperties = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ps, ok := x["properties"].(map[string]any); ok {
				for k := range ps {
					out[k] = true
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(schemaDefs())
	return out
})

// jsonPath is "$.workers.max" or "$.cpu[0].id" of an instance location.
func jsonPath(loc []string) string {
	var b strings.Builder
	b.WriteByte('$')
	for _, t := range loc {
		if t != "" && strings.Trim(t, "0123456789") == "" {
			b.WriteString("[" + t + "]")
		} else {
			b.WriteString("." + t)
		}
	}
	return b.String()
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
