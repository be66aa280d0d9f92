package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"berth/internal/apitest"
)

// The OpenAPI checks wrapped around Berth's handler are internal/apitest's
// (Validating); this file checks the document itself.

// TestOpenAPIDocument: Berth's v1 document loads, validates, is served
// (with the key) and lists exactly the routes Berth serves outside REST v2
// (which /v2/openapi.json describes).
func TestOpenAPIDocument(t *testing.T) {
	e := newValidatingServer(t)
	var v1 map[string]any
	e.Must(http.StatusOK, "GET", "/v1/openapi.json", nil, &v1)
	if v := v1["info"].(map[string]any)["version"]; v != "test" {
		t.Errorf("info.version = %v, want the server's version", v)
	}
	// Served without a key, as RunPod serves its documents.
	for _, p := range []string{"/v1/openapi.json", "/v2/openapi.json", "/v1/docs"} {
		if code, _ := e.CallWith("GET", p, nil, nil); code != http.StatusOK {
			t.Errorf("GET %s without a key: %d, want 200", p, code)
		}
	}
	if code, _ := e.CallWith("GET", "/v1/openapi.json", nil, map[string]string{"Authorization": apitest.Key}); code != http.StatusOK {
		t.Errorf("GET /v1/openapi.json with the bare key: %d, want 200", code)
	}

	documented := apitest.DocOps(e.Doc)
	v2 := e.API.V2Routes()
	served := slices.DeleteFunc(apitest.ServedRoutes(t, e.API.Handler()), func(r string) bool { _, ok := v2[r]; return ok })
	for _, r := range served {
		if _, ok := documented[r]; !ok {
			t.Errorf("Berth serves %s but the OpenAPI document does not describe it", r)
		}
	}
	for r, id := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("the OpenAPI document describes %s (%s) but Berth does not serve it", r, id)
		}
	}

	// GET /v1/docs lists every documented operation.
	page := string(e.Must(http.StatusOK, "GET", "/v1/docs", nil, nil))
	for r := range documented {
		if !strings.Contains(page, "<code>"+r+"</code>") {
			t.Errorf("GET /v1/docs does not list %s", r)
		}
	}
}
