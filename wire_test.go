package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The listener containers reach serves the worker protocol and nothing
// else: the job API and management stay where --addr put them.
func TestWorkerOnlyListener(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := workerOnly(inner)
	tests := []struct {
		path   string
		served bool
	}{
		{"/v2/ep1/job-take/w1", true},
		{"/v2/ep1/job-take-batch/w1", true},
		{"/v2/ep1/job-done/w1/j1", true},
		{"/v2/ep1/job-stream/w1/j1", true},
		{"/v2/ep1/job-stop/w1", true},
		{"/v2/ep1/ping/w1", true},
		{"/v2/ep1/run", false},
		{"/v2/ep1/status/j1", false},
		{"/v2/ep1/health", false},
		{"/v1/endpoints", false},
		{"/v1/endpoints/ep1/worker-env", false},
		{"/metrics", false},
		{"/v2/openapi.json", false},
		{"/v2/pods", false},
		{"/v2/serverless/ep1/workers", false},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if served := rec.Code == http.StatusTeapot; served != tt.served {
			t.Errorf("%s: served=%v, want %v (code %d)", tt.path, served, tt.served, rec.Code)
		}
	}
}
