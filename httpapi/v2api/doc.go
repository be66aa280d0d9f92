package v2api

import (
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"berth/mgmt"
)

// Berth's v2 document (GET /v2/openapi.json) is generated: its paths from
// routes(), the same table the router is built from, and its schemas by
// reflection from the Go types the handlers decode and encode (ops below).
// A route without an entry here fails TestV2Document, and the live
// answers of TestRunPodV2Conformance are validated against this document
// as well as RunPod's, so neither can drift from the code.

// opSpec is what the document says of one operation.
type opSpec struct {
	summary string
	in      any // request body type (a zero value), nil for none
	code    int // success status
	out     any // success body type, nil for none; sse for an event stream
}

type sse struct{}

var ops = map[string]opSpec{
	"getOpenAPI": {"This document", nil, 200, map[string]any{}},

	"listTemplates":  {"List templates (v1's and v2's, endpoint-bound ones too)", nil, 200, TemplateList{}},
	"createTemplate": {"Create a template", templateBody{}, 201, Template{}},
	"getTemplate":    {"Get a template", nil, 200, Template{}},
	"updateTemplate": {"Update a template (a container change rolls the endpoints using it)", templateBody{}, 200, Template{}},
	"deleteTemplate": {"Delete a template not used by an endpoint or pod", nil, 204, nil},

	"listEndpoints":        {"List serverless endpoints", nil, 200, EndpointList{}},
	"createEndpoint":       {"Create a QUEUE or LOAD_BALANCER endpoint from a template or an inline container", endpointBody{}, 201, Endpoint{}},
	"getEndpoint":          {"Get an endpoint", nil, 200, Endpoint{}},
	"updateEndpoint":       {"Update an endpoint (a rolling change records a release)", endpointBody{}, 200, Endpoint{}},
	"deleteEndpoint":       {"Delete an endpoint: its jobs are cancelled and its workers stopped", nil, 204, nil},
	"listEndpointWorkers":  {"The endpoint's worker containers", nil, 200, WorkerList{}},
	"listEndpointReleases": {"The endpoint's recorded versions, newest first", nil, 200, ReleaseList{}},
	"getWorkerLogs":        {"A worker container's log as Server-Sent Events", nil, 200, sse{}},
	"listEndpointBuilds":   {"The endpoint's image builds, newest first (limit ≤ 100, cursor)", nil, 200, BuildList{}},
	"createEndpointBuild":  {"Build the endpoint's image from a tar of its source (application/x-tar; dockerfile, target, buildArg=K=V, given=FIELD,…) or from a git repository (application/json: git {url, ref, contextPath, credentialId}, dockerfile, target, buildArgs, given); given names the endpoint fields the command gave, which the source's .runpod/hub.json config does not override", nil, 202, BuildView{}},
	"getEndpointBuild":     {"One build", nil, 200, BuildView{}},
	"getEndpointBuildLogs": {"A build's log as Server-Sent Events, followed until the build ends", nil, 200, sse{}},
	"cancelEndpointBuild":  {"Cancel a pending or running build; answers it once ended", nil, 200, BuildView{}},
	"listGitCredentials":   {"The stored git credentials (never their secrets)", nil, 200, GitCredentialList{}},
	"createGitCredential":  {"Store a git credential: kind TOKEN (https) or SSH_KEY (ssh, with knownHosts); the secret is write-only", gitCredentialBody{}, 201, GitCredential{}},
	"deleteGitCredential":  {"Delete a git credential", nil, 204, nil},
	"gitWebhook":           {"Push to deploy: a GitHub, Gitea or Forgejo webhook delivery (push, release, ping), signed with the endpoint's secret (X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>); no API key. 202 a build started; 200 ping, ignored or duplicate; 401 a wrong or missing signature", nil, 202, GitWebhookAnswer{}},
	"rollbackEndpoint":     {"Move the endpoint back onto an earlier build's image (version, or the newest earlier one): a new release", rollbackBody{}, 200, Endpoint{}},

	"listPods":   {"List pods", nil, 200, PodList{}},
	"createPod":  {"Create and start a pod", podBody{}, 201, Pod{}},
	"getPod":     {"Get a pod", nil, 200, Pod{}},
	"updatePod":  {"Update a pod (a container change recreates its container)", podBody{}, 200, Pod{}},
	"deletePod":  {"Delete a pod and its container", nil, 204, nil},
	"getPodLogs": {"The pod container's log as Server-Sent Events", nil, 200, sse{}},
	"podAction":  {"start, stop, restart or terminate (204) a pod", actionBody{}, 200, Pod{}},

	"listNetworkVolumes":  {"List network volumes", nil, 200, VolumeList{}},
	"createNetworkVolume": {"Create a network volume (a directory under the data dir)", volumeBody{}, 201, NetworkVolume{}},
	"getNetworkVolume":    {"Get a network volume", nil, 200, NetworkVolume{}},
	"updateNetworkVolume": {"Rename or grow a network volume", volumeBody{}, 200, NetworkVolume{}},
	"deleteNetworkVolume": {"Delete a network volume not attached to anything", nil, 204, nil},

	"listRegistries":   {"List registry credentials (never the password)", nil, 200, RegistryList{}},
	"createRegistry":   {"Store a registry credential", registryBody{}, 201, Registry{}},
	"getRegistry":      {"Get a registry credential", nil, 200, Registry{}},
	"deleteRegistry":   {"Delete a registry credential not used by a template", nil, 204, nil},
	"listDelegations":  {"501: registry delegations are RunPod's ECR access grants", nil, 501, nil},
	"createDelegation": {"501: registry delegations are RunPod's ECR access grants", nil, 501, nil},
	"revokeDelegation": {"501: registry delegations are RunPod's ECR access grants", nil, 501, nil},

	"listClusters":    {"501: one host has no Instant Clusters", nil, 501, nil},
	"createCluster":   {"501: one host has no Instant Clusters", nil, 501, nil},
	"getCluster":      {"501: one host has no Instant Clusters", nil, 501, nil},
	"updateCluster":   {"501: one host has no Instant Clusters", nil, 501, nil},
	"deleteCluster":   {"501: one host has no Instant Clusters", nil, 501, nil},
	"listClusterPods": {"501: one host has no Instant Clusters", nil, 501, nil},

	"listGpuTypes":        {"This host's GPUs and the RunPod GPU types Berth accepts", nil, 200, GPUList{}},
	"getGpuType":          {"One GPU type", nil, 200, GPUType{}},
	"listCpuTypes":        {"RunPod's CPU flavours, run on this host's CPUs", nil, 200, CPUList{}},
	"getCpuType":          {"One CPU flavour", nil, 200, CPUType{}},
	"listDataCenters":     {"This host, the one data centre", nil, 200, DataCenterList{}},
	"getDataCenter":       {"This host's data centre", nil, 200, DataCenter{}},
	"listPublicTemplates": {"Public templates: the operator's public ones (community)", nil, 200, TemplateList{}},

	"listBilling":              {"Every family's amounts per bucket", nil, 200, billingList[allRecord, allAmounts]{}},
	"listPodBilling":           {"Pod usage per bucket and pod", nil, 200, billingList[podRecord, podAmounts]{}},
	"listServerlessBilling":    {"Serverless worker usage per bucket and endpoint", nil, 200, billingList[serverlessRecord, serverlessAmounts]{}},
	"listEndpointBilling":      {"Serverless usage per bucket", nil, 200, billingList[endpointRecord, totalAmount]{}},
	"listNetworkVolumeBilling": {"Network volume storage per bucket and volume", nil, 200, billingList[volumeRecord, volumeAmounts]{}},
	"listClusterBilling":       {"Always empty: one host has no clusters", nil, 200, billingList[struct{}, clusterAmounts]{}},

	"getSshKeys":    {"The account's SSH public keys", nil, 200, SSHKeys{}},
	"updateSshKeys": {"Replace the account's SSH public keys (injected into pods as PUBLIC_KEY)", SSHKeys{}, 200, SSHKeys{}},

	"getHuggingFaceToken":   {"Berth: whether a Hugging Face token is stored (never the token)", nil, 200, mgmt.HFTokenInfo{}},
	"setHuggingFaceToken":   {"Berth: store the Hugging Face token the model cache sends for gated and private models (write-only)", hfTokenBody{}, 200, mgmt.HFTokenInfo{}},
	"clearHuggingFaceToken": {"Berth: delete the stored Hugging Face token", nil, 200, mgmt.HFTokenInfo{}},
}

var (
	pathParam = regexp.MustCompile(`\{([^}]+)\}`)
	pkgPath   = regexp.MustCompile(`[\w/.-]*\.`)
	nonWord   = regexp.MustCompile(`\W+`)
)

// document builds the OpenAPI 3.1 document.
func (a *API) document() map[string]any {
	docOnce.Do(func() { doc = a.build() })
	return doc
}

var (
	docOnce sync.Once
	doc     map[string]any
)

func (a *API) build() map[string]any {
	g := &schemaGen{defs: map[string]any{}}
	problemRef := g.ref(reflect.TypeOf(Problem{}))
	// Every answer's schema first, so a request schema's component name
	// (reqName) does not depend on the routes' order.
	for _, spec := range ops {
		switch spec.out.(type) {
		case nil, sse:
		default:
			g.schema(reflect.TypeOf(spec.out))
		}
	}
	paths := map[string]any{}
	for _, rt := range a.routes() {
		spec, ok := ops[rt.id]
		if !ok {
			panic("v2api: no document entry for operation " + rt.id)
		}
		item, _ := paths[rt.path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[rt.path] = item
		}
		responses := map[string]any{
			"default": map[string]any{"description": "An RFC 9457 problem: 400 malformed input or input a rule refuses (naming the field), 401 no key, 404, 409 a pod's state, 422 a body or parameter that fails its schema (each violation in errors), 501 not on one host, 503 no container runtime or the database cannot be written right now (a full disk; with Retry-After).",
				"content": map[string]any{"application/problem+json": map[string]any{"schema": problemRef}}},
		}
		ok200 := map[string]any{"description": http.StatusText(spec.code)}
		switch spec.out.(type) {
		case nil:
		case sse:
			ok200["content"] = map[string]any{"text/event-stream": map[string]any{"schema": map[string]any{"type": "string",
				"description": "Events: id <time>/<sequence>, data {\"ts\", \"source\", \"line\"}."}}}
		default:
			ok200["content"] = map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(spec.out))}}
		}
		if spec.code < 300 {
			responses[strconv.Itoa(spec.code)] = ok200
		}
		if rt.id == "podAction" {
			responses["204"] = map[string]any{"description": "terminate: the pod is deleted."}
		}
		op := map[string]any{"operationId": rt.id, "summary": spec.summary, "responses": responses,
			"tags": []string{strings.SplitN(strings.TrimPrefix(rt.path, "/v2/"), "/", 2)[0]}}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, p := range opParams[rt.id] {
			pm := map[string]any{"name": p.name, "in": p.in, "schema": p.schemaValue()}
			if p.desc != "" {
				pm["description"] = p.desc
			}
			if strings.Contains(p.schema, `"array"`) && p.in == "query" {
				pm["style"], pm["explode"] = "form", false // comma-separated
			}
			params = append(params, pm)
		}
		if params != nil {
			op["parameters"] = params
		}
		if name, ok := bodySchemas[rt.id]; ok {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/" + reqName(name, g.defs)}}}}
		} else if spec.in != nil {
			panic("v2api: operation " + rt.id + " has a body but no schema in bodySchemas")
		}
		item[strings.ToLower(rt.method)] = op
	}
	addRequestSchemas(g.defs)
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "Berth REST API v2", "version": "2.0.0",
			"description": "RunPod's REST v2 management API as one Berth host serves it: the same records as /v1. " +
				"Generated from Berth's routes and Go types; RunPod's own v2.json is the contract it is tested against."},
		"servers":    []any{map[string]any{"url": "/", "description": "this Berth host"}},
		"security":   []any{map[string]any{"bearerAuth": []string{}}},
		"paths":      paths,
		"components": map[string]any{"schemas": g.defs, "securitySchemes": map[string]any{"bearerAuth": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
}

// schemaGen turns the answers' Go types into JSON Schema 2020-12:
// exported structs become named components; a field is required unless
// omitempty; a pointer is nullable unless omitempty (then it is left out
// instead). Request bodies have schemas of their own (schemas.go).
type schemaGen struct {
	defs map[string]any
}

var timeType = reflect.TypeOf(time.Time{})

func (g *schemaGen) ref(t reflect.Type) map[string]any {
	name := t.Name()
	if i := strings.IndexByte(name, '['); i >= 0 { // generic: billingList[pkg.podRecord,pkg.podAmounts]
		args := pkgPath.ReplaceAllString(name[i+1:len(name)-1], "")
		name = name[:i] + "_" + nonWord.ReplaceAllString(args, "_")
	}
	if _, ok := g.defs[name]; !ok {
		g.defs[name] = true // placeholder against recursion
		g.defs[name] = g.object(t)
	}
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t.Kind() == reflect.Pointer:
		s := g.schema(t.Elem())
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
	case t.Kind() == reflect.Struct && strings.HasPrefix(t.Name(), "nullable["):
		return map[string]any{"type": []string{"string", "null"}}
	case t.Kind() == reflect.Struct && t.Name() != "":
		return g.ref(t)
	case t.Kind() == reflect.Struct:
		return g.object(t)
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Float64, reflect.Float32:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	}
	return map[string]any{} // any
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	g.fields(t, props, &required)
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			g.fields(ft, props, required)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := strings.Contains(opts, "omitempty")
		ft := f.Type
		if omit && ft.Kind() == reflect.Pointer {
			props[name] = g.schema(ft.Elem())
		} else {
			props[name] = g.schema(ft)
		}
		if !omit {
			*required = append(*required, name)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// reqName is a request schema's component name: its own, or with "Input"
// when an answer's schema has that name.
func reqName(name string, defs map[string]any) string {
	if _, taken := defs[name]; taken && !isRequestDef(defs[name]) {
		return name + "Input"
	}
	return name
}

type requestDef map[string]any

func isRequestDef(v any) bool { _, ok := v.(requestDef); return ok }

// addRequestSchemas adds the request bodies' schemas (schemas.go) to the
// document's components, their $defs references made component ones.
func addRequestSchemas(defs map[string]any) {
	src := schemaDefs()
	names := map[string]string{}
	for name := range src {
		names[name] = reqName(name, defs)
	}
	var fix func(v any) any
	fix = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				if ref, ok := e.(string); ok && k == "$ref" {
					n := strings.TrimPrefix(ref, "#/$defs/")
					e = "#/components/schemas/" + names[n]
				}
				out[k] = fix(e)
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = fix(e)
			}
			return out
		}
		return v
	}
	for name, s := range src {
		defs[names[name]] = requestDef(fix(s).(map[string]any))
	}
}
