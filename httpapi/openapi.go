package httpapi

import (
	"encoding/json"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// The OpenAPI 3 document of every route Berth serves, built here from
// small helpers so shared parts (errors, auth, ids) are written once.
// GET /v1/openapi.json and GET /v2/openapi.json serve it; the tests load it
// with kin-openapi and validate live traffic against it.

type obj = map[string]any

func ref(name string) obj   { return obj{"$ref": "#/components/schemas/" + name} }
func arrayOf(items obj) obj { return obj{"type": "array", "items": items} }
func strS(desc string) obj  { return obj{"type": "string", "description": desc} }
func intS(desc string) obj  { return obj{"type": "integer", "description": desc} }
func numS(desc string) obj  { return obj{"type": "number", "description": desc} }
func boolS(desc string) obj { return obj{"type": "boolean", "description": desc} }
func timeS(desc string) obj { return obj{"type": "string", "format": "date-time", "description": desc} }
func strArr(desc string) obj {
	return obj{"type": "array", "items": obj{"type": "string"}, "description": desc}
}
func enumS(desc string, v ...string) obj {
	return obj{"type": "string", "enum": v, "description": desc}
}
func anyS(desc string) obj { return obj{"nullable": true, "description": desc} }
func envS() obj {
	return obj{"type": "object", "additionalProperties": obj{"type": "string"}, "description": "Environment variables, name to value."}
}

// object is a schema of named properties; required lists those always
// present (responses) or needed (inputs).
func object(props obj, required ...string) obj {
	o := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

// input is an object refusing unknown fields, as decodeStrict does.
func input(props obj, required ...string) obj {
	o := object(props, required...)
	o["additionalProperties"] = false
	return o
}

func withMin(s obj, min int) obj { s = maps.Clone(s); s["minimum"] = min; return s }
func withRange(s obj, min, max int) obj {
	s = maps.Clone(s)
	s["minimum"], s["maximum"] = min, max
	return s
}

func jsonContent(schema obj) obj { return obj{"application/json": obj{"schema": schema}} }

func resp(desc string, schema obj) obj {
	return obj{"description": desc, "content": jsonContent(schema)}
}
func noBody(desc string) obj { return obj{"description": desc} }
func textResp(desc string) obj {
	return obj{"description": desc, "content": obj{"text/plain": obj{"schema": obj{"type": "string"}}}}
}

// mErr and jErr are the two error shapes: management (/v1) errors are
// {"message"}, job API and worker errors {"error"}.
func mErr(desc string) obj { return resp(desc, ref("Error")) }
func jErr(desc string) obj { return resp(desc, ref("JobError")) }

func pathP(name, desc string) obj {
	return obj{"name": name, "in": "path", "required": true, "description": desc, "schema": obj{"type": "string"}}
}
func queryP(name, desc string, schema obj) obj {
	return obj{"name": name, "in": "query", "description": desc, "schema": schema}
}
func boolQ(name, desc string) obj {
	return queryP(name, desc, obj{"type": "boolean", "default": false})
}
func listQ(name, desc string) obj {
	p := queryP(name, desc+" Repeat the parameter (or join values with commas) for several.", obj{"type": "array", "items": obj{"type": "string"}})
	p["style"], p["explode"] = "form", true
	return p
}
func body(schema obj) obj {
	return obj{"required": true, "content": jsonContent(schema)}
}

// op is one operation.
type op struct {
	method, path, id, tag, summary, desc string
	params                               []obj
	body                                 obj
	responses                            obj
}

// document builds the OpenAPI document.
func document(version string) obj {
	paths := obj{}
	for _, o := range operations() {
		item, _ := paths[o.path].(obj)
		if item == nil {
			item = obj{}
			paths[o.path] = item
		}
		rs := maps.Clone(o.responses)
		errResp := mErr
		switch {
		case o.path == "/graphql":
			errResp = func(desc string) obj { return resp(desc, ref("GraphQLResponse")) }
		case !strings.HasPrefix(o.path, "/v1/"):
			errResp = jErr
		}
		rs["401"] = errResp("Missing or invalid API key.")
		if _, ok := rs["500"]; !ok {
			rs["500"] = errResp("Internal error (for example the database file cannot be written).")
		}
		spec := obj{"operationId": o.id, "tags": []string{o.tag}, "summary": o.summary, "responses": rs}
		if o.desc != "" {
			spec["description"] = o.desc
		}
		if len(o.params) > 0 {
			spec["parameters"] = o.params
		}
		if o.body != nil {
			spec["requestBody"] = o.body
		}
		item[strings.ToLower(o.method)] = spec
	}
	return obj{
		"openapi": "3.0.3",
		"info": obj{
			"title":   "Berth API",
			"version": version,
			"description": "Berth serves the RunPod serverless platform on one machine: the management REST API (/v1, RunPod REST v1 shapes), " +
				"the queue-based job API (/v2/{endpointId}/…), the worker protocol of runpod-python and Berth's extensions. " +
				"Management errors are {\"message\": …}; job API and worker errors are {\"error\": …}. Timestamps are RFC 3339. " +
				"Berth is one data centre, \"" + DataCenterID + "\".",
		},
		"servers":  []obj{{"url": "/", "description": "this Berth host"}},
		"security": []obj{{"bearerAuth": []string{}}, {"bareKey": []string{}}},
		"tags": []obj{
			{"name": "templates"}, {"name": "endpoints"}, {"name": "pods"}, {"name": "network volumes"},
			{"name": "container registry auths"}, {"name": "billing"},
			{"name": "berth extensions", "description": "Routes RunPod's REST v1 does not have."},
			{"name": "job API", "description": "Queue-based endpoint operations: /v2/{endpointId}/…"},
			{"name": "worker protocol", "description": "What the runpod-python SDK in a worker calls. The worker's own key (RUNPOD_AI_API_KEY) opens only its endpoint's worker routes under its own worker id; the operator's key opens all."},
			{"name": "docs"}, {"name": "metrics"},
		},
		"paths": paths,
		"components": obj{
			"securitySchemes": obj{
				"bearerAuth": obj{"type": "http", "scheme": "bearer",
					"description": "Authorization: Bearer <API key>. Every route needs a key."},
				"bareKey": obj{"type": "apiKey", "in": "header", "name": "Authorization",
					"description": "The key alone, without \"Bearer \" (RunPod's docs and the worker SDK send it so)."},
			},
			"schemas": schemas(),
		},
	}
}

var docOnce = sync.OnceValue(func() obj { return document("") })

// openapiDoc serves the document (GET /v1/openapi.json, /v2/openapi.json).
func (s *Server) openapiDoc(w http.ResponseWriter, r *http.Request) {
	doc := maps.Clone(docOnce())
	info := maps.Clone(doc["info"].(obj))
	info["version"] = s.cfg.Version
	if s.cfg.Version == "" {
		info["version"] = "dev"
	}
	doc["info"] = info
	b, err := json.Marshal(doc)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

var docsTmpl = template.Must(template.New("docs").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Berth API</title>
<style>body{font-family:sans-serif;margin:2em}td{padding:.2em .8em}code{white-space:nowrap}</style></head>
<body><h1>Berth API</h1><p>{{.Desc}}</p><p>The machine-readable document: <a href="openapi.json">openapi.json</a>.</p>
<table>{{range .Ops}}<tr><td><code>{{.Method}} {{.Path}}</code></td><td>{{.Summary}}</td></tr>{{end}}</table></body></html>
`))

// docsPage serves the document's operations as a page (GET /v1/docs):
// RunPod's v1 has an interactive one there; Berth, with no internet for a
// UI bundle, lists them.
func (s *Server) docsPage(w http.ResponseWriter, r *http.Request) {
	type row struct{ Method, Path, Summary string }
	var rows []row
	for _, o := range operations() {
		rows = append(rows, row{o.method, o.path, o.summary})
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.Path+" "+a.Method, b.Path+" "+b.Method) })
	desc, _ := docOnce()["info"].(obj)["description"].(string)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := docsTmpl.Execute(w, struct {
		Desc string
		Ops  []row
	}{desc, rows}); err != nil {
		s.cfg.Logger.Error("docs page", "err", err)
	}
}
