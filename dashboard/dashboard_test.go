package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"berth/dashboard"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(dashboard.Handler())
	defer srv.Close()
	get := func(method, path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	tests := []struct {
		path, ctype, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="/ui/app.js"`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "sessionStorage"},
		{"/ui/app.css", "text/css; charset=utf-8", "prefers-color-scheme: dark"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, tt := range tests {
		res, body := get("GET", tt.path, nil)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != tt.ctype || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", tt.path, res.StatusCode, res.Header.Get("Content-Type"), tt.contains, strings.Contains(body, tt.contains))
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: headers %v", tt.path, res.Header)
		}
		// Revalidation answers 304 while the file is unchanged.
		res, _ = get("GET", tt.path, map[string]string{"If-None-Match": res.Header.Get("ETag")})
		if res.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", tt.path, res.StatusCode)
		}
	}
	// The page runs only its own script, talks only to its own origin and
	// cannot be framed.
	res, _ := get("GET", "/", nil)
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/ui/nope.js", 404},
		{"GET", "/ui/index.html", 404}, // the page lives at / only
		{"GET", "/ui/", 404},
		{"POST", "/", 405},
		{"HEAD", "/", 200},
	} {
		if res, _ := get(c.method, c.path, nil); res.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, res.StatusCode, c.code)
		}
	}
}
