package compat

import (
	"strings"
	"testing"
)

// TestRunpodPythonWithKeyLevels: runpod-python 1.12.0, unmodified, with an
// All key, a Restricted key granted Read-Write on one endpoint, and a Read
// Only key (docs/keys.md): each works where its level allows — jobs run
// through a real SDK worker, lists show only the granted endpoint — and
// gets an error naming the key's level elsewhere.
func TestRunpodPythonWithKeyLevels(t *testing.T) {
	t.Parallel()
	s := startBerth(t)
	var tpl, granted, other struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": "host-worker", "imageName": "berth-test/not-pulled:1", "isServerless": true}, 200, &tpl)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "granted", "templateId": tpl.ID, "workersMin": 0, "workersMax": 0}, 200, &granted)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "other", "templateId": tpl.ID, "workersMin": 0, "workersMax": 0}, 200, &other)
	hostWorker(t, s, granted.ID)

	key := func(name string, body map[string]any) string {
		body["name"] = name
		var k struct{ Key string }
		s.rest("POST", "/v1/keys", body, 200, &k)
		return k.Key
	}
	keys := map[string]string{
		"all":        key("py-all", map[string]any{"permission": "ALL"}),
		"restricted": key("py-ci", map[string]any{"permission": "RESTRICTED", "endpoints": map[string]string{granted.ID: "READ_WRITE"}}),
		"readonly":   key("py-viewer", map[string]any{"permission": "READ_ONLY"}),
	}
	// What the SDK shows as "403 Forbidden" says why in its body.
	for _, c := range []struct{ key, path, want string }{
		{keys["restricted"], "/v2/" + other.ID + "/health", `key \"py-ci\" is Restricted and has no access to endpoint`},
		{keys["readonly"], "/v2/" + granted.ID + "/runsync", `key \"py-viewer\" is Read Only: it reads and never writes`},
	} {
		s2 := *s
		s2.Key = c.key
		code, b := s2.do("GET", c.path, nil)
		if strings.HasSuffix(c.path, "/runsync") {
			code, b = s2.do("POST", c.path, map[string]any{"input": map[string]any{}})
		}
		if code != 403 || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want 403 saying %s", c.path, code, b, c.want)
		}
	}
	for _, level := range []string{"all", "restricted", "readonly"} {
		checks := runSDKScript(t, s, map[string]string{"RUNPOD_API_KEY": keys[level]}, "testdata/sdk_keys.py", level, granted.ID, other.ID)
		if len(checks) < 6 {
			t.Errorf("%s: only %d checks ran", level, len(checks))
		}
	}
}
