package httpapi_test

import (
	"testing"

	"berth/internal/apitest"
)

// testEnv is the one server harness of the HTTP API's tests,
// internal/apitest's Env (shared with httpapi/v1api's and v2api's tests), with
// httpapi's own helpers — the job API's workers, text routes — as methods.
type testEnv struct{ *apitest.Env }

type (
	J    = apitest.J
	resp = apitest.Resp
)

// newEnv starts a Berth for the job API's end-to-end tests (apitest.NewJobEnv).
func newEnv(t *testing.T, opts ...apitest.Option) *testEnv {
	t.Helper()
	return &testEnv{apitest.NewJobEnv(t, opts...)}
}

// newValidatingServer starts a Berth for the management surfaces' tests
// (apitest.NewValidating).
func newValidatingServer(t *testing.T, opts ...apitest.Option) *testEnv {
	t.Helper()
	return &testEnv{apitest.NewValidating(t, opts...)}
}
