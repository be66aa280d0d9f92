package app_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"berth/app"
	"berth/gpu"
)

// A route asked with a method it does not take answers 405 with an Allow
// header listing the methods it takes, on REST v1, REST v2 and the job API
// alike, in the surface's own error shape; a path no route has stays 404.
func TestWrongMethodIs405WithAllow(t *testing.T) {
	a := start(t, app.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quiet, APIKey: "k-405", Backend: app.DockerOff,
		DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }})
	defer stop(t, a)
	for _, c := range []struct {
		method, path string
		code         int
		allow        []string // the Allow header's methods, in any order
		errKey       string   // the error body's key
	}{
		{"PUT", "/v1/endpoints", 405, []string{"GET", "POST"}, "message"},
		{"DELETE", "/v1/templates", 405, []string{"GET", "POST"}, "message"},
		{"PUT", "/v1/endpoints/someid", 405, []string{"GET", "PATCH", "DELETE"}, "message"},
		{"GET", "/v1/pods/someid/stop", 405, []string{"POST"}, "message"},
		{"PUT", "/v2/pods", 405, []string{"GET", "POST"}, "error"},
		{"DELETE", "/v2/serverless", 405, []string{"GET", "POST"}, "error"},
		{"GET", "/v2/someendpoint/run", 405, []string{"POST"}, "error"},
		{"DELETE", "/v2/someendpoint/status/somejob", 405, []string{"GET", "POST"}, "error"},
		{"PUT", "/v2/someendpoint/health", 405, []string{"GET"}, "error"},
		{"POST", "/metrics", 405, []string{"GET"}, "error"},
		// Unknown paths stay 404.
		{"GET", "/v1/nosuch", 404, nil, "message"},
		{"GET", "/v2/someendpoint/nosuch", 404, nil, "error"},
		{"POST", "/v1/endpoints/someid/nosuch", 404, nil, "message"},
		{"GET", "/nosuch", 404, nil, "error"},
	} {
		req, _ := http.NewRequest(c.method, a.URL()+c.path, nil)
		req.Header.Set("Authorization", "Bearer k-405")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		var allow []string
		for _, m := range strings.Split(res.Header.Get("Allow"), ",") {
			if m = strings.TrimSpace(m); m != "" {
				allow = append(allow, m)
			}
		}
		slices.Sort(allow)
		want := slices.Sorted(slices.Values(c.allow))
		if res.StatusCode != c.code || !slices.Equal(allow, want) || body[c.errKey] == nil {
			t.Errorf("%s %s: %d Allow %q %v, want %d Allow %q and {%q: …}", c.method, c.path, res.StatusCode, res.Header.Get("Allow"), body, c.code, want, c.errKey)
		}
	}
}
