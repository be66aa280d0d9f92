package compat

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Operator niceties the clients' sweep found, through `berth serve`.

// TestTemplateListShowsBound: `berth template list` lists a template an
// endpoint holds (the v1 list hides it by RunPod's rule) and names the
// endpoint, in the table and in JSON.
func TestTemplateListShowsBound(t *testing.T) {
	t.Parallel()
	s := startBerth(t)
	var tpl, free, ep struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": "bound-tpl", "imageName": "me/worker:1", "isServerless": true}, 200, &tpl)
	s.rest("POST", "/v1/templates", map[string]any{"name": "free-tpl", "imageName": "me/other:1"}, 200, &free)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "holder", "templateId": tpl.ID, "workersMax": 0}, 200, &ep)

	out, errs, code := s.cli("template", "list", "-o", "table")
	if code != 0 || !strings.Contains(out, "bound-tpl") || !strings.Contains(out, "holder ("+ep.ID+")") || !strings.Contains(out, "free-tpl") {
		t.Errorf("berth template list (table): exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = s.cli("template", "list", "-o", "json")
	var list []struct {
		ID        string
		Endpoints []struct{ ID, Name string }
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("berth template list (json): exit %d %v\n%s%s", code, err, out, errs)
	}
	found := false
	for _, l := range list {
		if l.ID == tpl.ID {
			found = len(l.Endpoints) == 1 && l.Endpoints[0].ID == ep.ID && l.Endpoints[0].Name == "holder"
		}
	}
	if len(list) != 2 || !found {
		t.Errorf("berth template list (json): %+v", list)
	}
}

// TestOpenAPIDocumentsWithoutKey: /v1/openapi.json, /v2/openapi.json and
// /v1/docs are served without a key, as RunPod serves its documents; the
// rest still needs one.
func TestOpenAPIDocumentsWithoutKey(t *testing.T) {
	t.Parallel()
	s := startBerth(t)
	for _, p := range []string{"/v1/openapi.json", "/v2/openapi.json", "/v1/docs"} {
		res, err := http.Get(s.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a key: %d %s", p, res.StatusCode, b)
			continue
		}
		if strings.HasSuffix(p, ".json") {
			var doc struct{ OpenAPI string }
			if err := json.Unmarshal(b, &doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
				t.Errorf("GET %s: not an OpenAPI 3 document: %v", p, err)
			}
		}
	}
	res, err := http.Get(s.URL + "/v1/templates")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/templates without a key: %d, want 401", res.StatusCode)
	}
}
