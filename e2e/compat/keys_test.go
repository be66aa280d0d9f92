package compat

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"berth/internal/clientkit"
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

// TestRunpodctlWithRestrictedKey: runpodctl, unmodified, with a Restricted
// key granted one endpoint: it lists and reads that endpoint only, and
// reading another endpoint or the pods fails with Berth's 403.
func TestRunpodctlWithRestrictedKey(t *testing.T) {
	t.Parallel()
	bin := clientkit.Runpodctl(t)
	s := startBerth(t)
	var tpl, granted, other struct{ ID string }
	s.rest("POST", "/v1/templates", map[string]any{"name": "ctl-keys", "imageName": "x:1", "isServerless": true}, 200, &tpl)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "granted", "templateId": tpl.ID, "workersMax": 0}, 200, &granted)
	s.rest("POST", "/v1/endpoints", map[string]any{"name": "other", "templateId": tpl.ID, "workersMax": 0}, 200, &other)
	var k struct{ Key string }
	s.rest("POST", "/v1/keys", map[string]any{"name": "ctl-ci", "permission": "RESTRICTED", "endpoints": map[string]string{granted.ID: "READ_WRITE"}}, 200, &k)
	env := append(os.Environ(), "HOME="+t.TempDir(), "RUNPOD_API_KEY="+k.Key,
		"RUNPOD_API_URL="+s.URL+"/v1", "RUNPOD_GRAPHQL_URL="+s.URL+"/graphql")
	run := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env, cmd.Stdin = env, strings.NewReader("")
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		err := cmd.Run()
		return b.String(), clientkit.ExitCode(err)
	}
	for _, c := range []struct {
		args      []string
		fail      bool
		want, not []string
	}{
		{[]string{"serverless", "list"}, false, []string{granted.ID}, []string{other.ID}},
		{[]string{"serverless", "get", granted.ID}, false, []string{granted.ID}, nil},
		{[]string{"serverless", "get", other.ID}, true, []string{"403", "is Restricted and has no access to endpoint " + other.ID}, nil},
		{[]string{"pod", "list"}, true, []string{"403", "is Restricted", "nothing account-wide"}, nil},
	} {
		out, code := run(c.args...)
		if (code != 0) != c.fail {
			t.Errorf("runpodctl %v: exit %d, want failure %v:\n%s", c.args, code, c.fail, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("runpodctl %v: output lacks %q:\n%s", c.args, w, out)
			}
		}
		for _, n := range c.not {
			if strings.Contains(out, n) {
				t.Errorf("runpodctl %v: output shows %q:\n%s", c.args, n, out)
			}
		}
		t.Logf("runpodctl %v: exit %d: %s", c.args, code, strings.TrimSpace(out))
	}
}
