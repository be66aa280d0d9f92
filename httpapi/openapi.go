package httpapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// The OpenAPI 3 document of every route Berth serves outside REST v2 is one
// maintained file, openapi/v1.json, embedded here. GET /v1/openapi.json
// serves it with info.version set to the server's version; the tests load
// it with kin-openapi, check it against the router and the mgmt limits, and
// validate live traffic against it (openapi_test.go).

//go:embed openapi/v1.json
var v1DocJSON []byte

// v1Doc is the parsed document; a file that does not parse is a build
// mistake the tests catch, so it panics on first use.
var v1Doc = sync.OnceValue(func() map[string]any {
	var doc map[string]any
	if err := json.Unmarshal(v1DocJSON, &doc); err != nil {
		panic(fmt.Sprintf("httpapi: embedded openapi/v1.json: %v", err))
	}
	return doc
})

// openapiDoc serves the document (GET /v1/openapi.json).
func (s *Server) openapiDoc(w http.ResponseWriter, r *http.Request) {
	doc := maps.Clone(v1Doc())
	info := maps.Clone(doc["info"].(map[string]any))
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

type docRow struct{ Method, Path, Summary string }

// docRows are the document's operations sorted by path and method.
var docRows = sync.OnceValue(func() []docRow {
	var rows []docRow
	paths, _ := v1Doc()["paths"].(map[string]any)
	for path, item := range paths {
		ops, _ := item.(map[string]any)
		for method, o := range ops {
			op, ok := o.(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			summary, _ := op["summary"].(string)
			rows = append(rows, docRow{strings.ToUpper(method), path, summary})
		}
	}
	slices.SortFunc(rows, func(a, b docRow) int { return strings.Compare(a.Path+" "+a.Method, b.Path+" "+b.Method) })
	return rows
})

// docsPage serves the document's operations as a page (GET /v1/docs):
// RunPod's v1 has an interactive one there; Berth, with no internet for a
// UI bundle, lists them.
func (s *Server) docsPage(w http.ResponseWriter, r *http.Request) {
	desc, _ := v1Doc()["info"].(map[string]any)["description"].(string)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := docsTmpl.Execute(w, struct {
		Desc string
		Ops  []docRow
	}{desc, docRows()}); err != nil {
		s.cfg.Logger.Error("docs page", "err", err)
	}
}
