// Package apitest is the test kit for calling Berth's HTTP API: Call, one
// JSON request with a key as a user makes it; and Env, the one server
// harness of the HTTP API's tests (httpapi's, httpapi/v1api's, v2api's and
// e2e/jobs'), a Berth started through internal/apptest whose every exchange
// is held to the OpenAPI document it serves, and the test's client to
// RunPod's.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// Call sends method base+path with key as a bearer token and body (when
// not nil) as JSON, fails tb unless the status is one of want (none:
// 200 or 204), decodes a JSON reply into out (when not nil), and returns
// the reply's bytes.
func Call(ctx context.Context, tb testing.TB, base, key, method, path string, body, out any, want ...int) []byte {
	tb.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			tb.Fatalf("%s %s: %v", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if len(want) == 0 {
		want = []int{http.StatusOK, http.StatusNoContent}
	}
	ok := false
	for _, w := range want {
		ok = ok || resp.StatusCode == w
	}
	if !ok {
		tb.Fatalf("%s %s: %s, want %v: %s", method, path, resp.Status, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			tb.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return b
}
