package httpapi_test

import (
	"strings"
	"testing"
)

// TestRunRefusesForbiddenWebhookLiteral: a webhook aimed at a loopback or
// metadata address literal is refused with 400 at /run, and nothing is
// queued; a LAN address and a name are accepted (names are checked when
// the webhook is delivered).
func TestRunRefusesForbiddenWebhookLiteral(t *testing.T) {
	e := newEnv(t) // the default webhook policy, as berth serve has it
	ep := e.endpoint(nil)
	for _, tc := range []struct{ hook, why string }{
		{"http://127.0.0.1:8080/v2/x/run", "loopback"},
		{"http://localhost/hook", "loopback"},
		{"http://169.254.169.254/latest/meta-data/", "metadata"},
	} {
		r := e.do("POST", "/v2/"+ep+"/run", "Bearer "+adminKey, map[string]any{"input": map[string]any{}, "webhook": tc.hook})
		if r.code != 400 || !strings.Contains(string(r.body), "webhook") || !strings.Contains(string(r.body), tc.why) {
			t.Errorf("%s: %d %s, want 400 naming the webhook and %s", tc.hook, r.code, r.body, tc.why)
		}
	}
	if h := e.q.Health(ep); h.Jobs.InQueue != 0 {
		t.Fatalf("refused submissions were queued: %+v", h.Jobs)
	}
	for _, hook := range []string{"http://192.168.1.20:8000/hook", "https://hooks.example.com/x"} {
		e.admin("POST", "/v2/"+ep+"/run", map[string]any{"input": map[string]any{}, "webhook": hook}, 200)
	}
}
