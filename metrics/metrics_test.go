package metrics

import (
	"testing"
	"time"

	"berth/store"
)

// count is how many series of the family name the registry holds.
func count(t *testing.T, m *Metrics, name string) int {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// An endpoint's series go with it: at once when deleted (ForgetEndpoint),
// or when the cleaner finds it gone (PruneEndpoints), which reports how
// many endpoints it pruned; other endpoints keep theirs.
func TestPruneEndpoints(t *testing.T) {
	m := New()
	for _, ep := range []string{"a", "b", "c"} {
		m.JobFinished(ep, store.Completed, time.Second, time.Second)
		m.Webhook(ep, "delivered")
		m.Scale(ep, "start")
	}
	m.ForgetEndpoint("a")
	if n := count(t, m, "berth_job_delay_seconds"); n != 2 {
		t.Fatalf("after forgetting a: %d delay series, want 2", n)
	}
	if n := m.PruneEndpoints(func(id string) bool { return id == "c" }); n != 1 {
		t.Fatalf("pruned %d endpoints, want 1 (b)", n)
	}
	for _, f := range []string{"berth_job_delay_seconds", "berth_job_execution_seconds", "berth_webhook_deliveries_total", "berth_scaling_decisions_total"} {
		if n := count(t, m, f); n != 1 {
			t.Errorf("%s: %d series, want c's only", f, n)
		}
	}
}

// A route's requests are counted by status code, one series a code.
func TestRouteObserve(t *testing.T) {
	m := New()
	r := m.Route("GET /x")
	r.Observe(200, time.Millisecond)
	r.Observe(200, time.Millisecond)
	r.Observe(404, time.Millisecond)
	if n := count(t, m, "berth_http_requests_total"); n != 2 {
		t.Errorf("%d request series, want 2 (200, 404)", n)
	}
	if n := count(t, m, "berth_http_request_duration_seconds"); n != 1 {
		t.Errorf("%d duration series, want 1", n)
	}
}
