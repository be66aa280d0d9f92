package httpapi_test

import (
	"strings"
	"testing"

	"berth/internal/apitest"
)

// TestRunRefusesForbiddenWebhookLiteral: a webhook aimed at a loopback or
// metadata address literal is refused with 400 at /run, and nothing is
// queued; a LAN address and a name are accepted (names are checked when
// the webhook is delivered).
func TestRunRefusesForbiddenWebhookLiteral(t *testing.T) {
	e := newEnv(t) // the default webhook policy, as berth serve has it
	ep := e.Endpoint(nil)
	for _, tc := range []struct{ hook, why string }{
		{"http://127.0.0.1:8080/v2/x/run", "loopback"},
		{"http://localhost/hook", "loopback"},
		{"http://169.254.169.254/latest/meta-data/", "metadata"},
	} {
		r := e.Do("POST", "/v2/"+ep+"/run", "Bearer "+apitest.Key, map[string]any{"input": map[string]any{}, "webhook": tc.hook})
		if r.Code != 400 || !strings.Contains(string(r.Body), "webhook") || !strings.Contains(string(r.Body), tc.why) {
			t.Errorf("%s: %d %s, want 400 naming the webhook and %s", tc.hook, r.Code, r.Body, tc.why)
		}
	}
	if h := e.Q.Health(ep); h.Jobs.InQueue != 0 {
		t.Fatalf("refused submissions were queued: %+v", h.Jobs)
	}
	for _, hook := range []string{"http://192.168.1.20:8000/hook", "https://hooks.example.com/x"} {
		e.Admin("POST", "/v2/"+ep+"/run", map[string]any{"input": map[string]any{}, "webhook": hook}, 200)
	}
}
