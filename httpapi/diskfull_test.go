package httpapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth/internal/disktest"
)

func withDataDir(dir string) envOpt {
	return func(e *env) { e.cfg.DataDir = dir }
}

// On a full disk a write is refused with a retryable 503 (Retry-After), not
// a 500: it is the server's condition and nothing was changed; the failure
// is counted on /metrics; once space frees the same request goes through.
func TestE2EDiskFullAnswers503(t *testing.T) {
	dir := disktest.Tmpfs(t, 4<<20)
	e := newEnv(t, withDataDir(dir))
	ep := e.endpoint(nil)
	filler := filepath.Join(dir, "filler")
	disktest.Fill(t, filler)
	input := `{"pad":"` + strings.Repeat("x", 3000) + `"}`
	var r resp
	for i := 0; i < 2000; i++ {
		if r = e.call("POST", "/v2/"+ep+"/run", "Bearer "+adminKey, `{"input":`+input+`}`); r.code != 200 {
			break
		}
	}
	if r.code != 503 {
		t.Fatalf("/run on a full disk: %d %s, want 503", r.code, r.body)
	}
	if r.hdr.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if msg := r.json(t)["error"]; !strings.Contains(msg.(string), "no space left on device") {
		t.Errorf("error %q does not say why", msg)
	}
	m := e.call("GET", "/metrics", "Bearer "+adminKey, nil)
	if !strings.Contains(string(m.body), `berth_store_write_failures_total{kept="false"}`) ||
		strings.Contains(string(m.body), `berth_store_write_failures_total{kept="false"} 0`) {
		t.Errorf("/metrics does not count the failed writes:\n%s", grepLines(string(m.body), "berth_store_write"))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.run(ep, input)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
