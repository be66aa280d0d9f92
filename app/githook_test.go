package app_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"berth/internal/gittest"
)

func pushBody(ref, after string) []byte {
	return gittest.PushBody(ref, after, "https://git.example/o/r.git")
}

// TestGitWebhook: an endpoint tracks a branch through REST v2; its webhook
// secret is generated and shown once, then only said to be set; the
// webhook route takes no API key and refuses a wrong or missing signature,
// an unknown endpoint, a malformed or oversized body, and ignores pushes to
// other branches, deletions and other events — none of which starts a
// build. (A good push building the commit: TestGitPushDeploys.)
func TestGitWebhook(t *testing.T) {
	e := startKeys(t, t.TempDir(), nil)
	defer stop(t, e.a)
	var ep struct {
		ID  string
		Git *struct {
			Repository, WebhookURL, WebhookSecret, Dockerfile string
			Branch, Tags                                      *string
			WebhookSecretSet                                  bool
		}
	}
	e.must(e.all, 201, "POST", "/v2/serverless", map[string]any{"name": "hooked", "type": "QUEUE", "image": "x:1",
		"cpu": []any{map[string]any{"id": "cpu3c", "vcpuCount": 2}}, "scaling": map[string]any{"type": "QUEUE_DELAY", "queueDelay": 4},
		"workers": map[string]any{"min": 0, "max": 1},
		"git":     map[string]any{"repository": "https://git.example/o/r.git", "branch": "main"}}, &ep)
	if ep.Git == nil || ep.Git.Repository != "https://git.example/o/r.git" || ep.Git.Branch == nil || *ep.Git.Branch != "main" ||
		ep.Git.Tags != nil || !ep.Git.WebhookSecretSet || len(ep.Git.WebhookSecret) < 40 || ep.Git.Dockerfile != "Dockerfile" {
		t.Fatalf("created: %+v, want the branch tracked and a generated secret shown", ep.Git)
	}
	secret := ep.Git.WebhookSecret
	hook := ep.Git.WebhookURL
	if hook != e.a.URL()+"/v2/serverless/"+ep.ID+"/webhooks/git" {
		t.Errorf("webhookUrl %q", hook)
	}
	// Write-only afterwards: v2 and v1 answers never carry it.
	for _, p := range []string{"/v2/serverless/" + ep.ID, "/v2/serverless", "/v1/endpoints/" + ep.ID, "/v1/endpoints"} {
		b := e.must(e.all, 200, "GET", p, nil, nil)
		if bytes.Contains(b, []byte(secret)) || (strings.HasPrefix(p, "/v2/serverless/") && !bytes.Contains(b, []byte(`"webhookSecretSet":true`))) {
			t.Errorf("GET %s shows the secret or not that it is set: %s", p, b)
		}
	}
	// A change of another field keeps the secret and does not show it.
	b := e.must(e.all, 200, "PATCH", "/v2/serverless/"+ep.ID, map[string]any{"git": map[string]any{"dockerfile": "worker/Dockerfile"}}, nil)
	if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(`"webhookSecret":`)) || !bytes.Contains(b, []byte(`"dockerfile":"worker/Dockerfile"`)) {
		t.Errorf("PATCH git.dockerfile: %s", b)
	}
	// Bad input: 400 naming the field, nothing changed.
	for _, c := range []struct {
		git   any
		field string
	}{
		{map[string]any{"repository": "https://me:token@git.example/o/r.git"}, "git.repository"},
		{map[string]any{"branch": "a..b"}, "git.branch"},
		{map[string]any{"branch": "main", "tags": "v*"}, "git.branch"},
		{map[string]any{"webhookSecret": "short"}, "git.webhookSecret"},
		{map[string]any{"dockerfile": "../Dockerfile"}, "git.dockerfile"},
	} {
		code, b := e.do(e.all, "PATCH", "/v2/serverless/"+ep.ID, map[string]any{"git": c.git}, 10*time.Second)
		if code != 400 || !bytes.Contains(b, []byte(c.field)) {
			t.Errorf("PATCH git %v: %d %s, want 400 naming %s", c.git, code, b, c.field)
		}
	}
	code, b := e.do(e.all, "PATCH", "/v2/serverless/"+ep.ID, map[string]any{"git": map[string]any{"bogus": 1}}, 10*time.Second)
	if code != 422 && code != 400 {
		t.Errorf("PATCH git with an unknown field: %d %s", code, b)
	}

	builds := func() int {
		var l struct{ Builds []any }
		e.must(e.all, 200, "GET", "/v2/serverless/"+ep.ID+"/builds", nil, &l)
		return len(l.Builds)
	}
	const sha = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
	good := pushBody("refs/heads/main", sha)
	sig := func(body []byte) map[string]string {
		return map[string]string{"X-Hub-Signature-256": "sha256=" + gittest.Sign(secret, body)}
	}
	big := append([]byte(`{"ref":"refs/heads/main","pad":"`), bytes.Repeat([]byte("x"), 3<<20)...)
	big = append(big, '"', '}')
	for _, c := range []struct {
		name   string
		url    string
		event  string
		body   []byte
		hdr    map[string]string
		code   int
		result string
	}{
		{"no signature", hook, "push", good, nil, 401, ""},
		{"wrong secret", hook, "push", good, map[string]string{"X-Hub-Signature-256": "sha256=" + gittest.Sign("not the secret at all", good)}, 401, ""},
		{"signature of another body", hook, "push", good, sig(pushBody("refs/heads/main", strings.Repeat("2", 40))), 401, ""},
		{"gitea's bare hex, wrong", hook, "push", good, map[string]string{"X-Gitea-Signature": gittest.Sign("not the secret at all", good)}, 401, ""},
		{"an API key is no signature", hook, "push", good, map[string]string{"Authorization": "Bearer " + envKey}, 401, ""},
		{"unknown endpoint", e.a.URL() + "/v2/serverless/nosuchendpoint/webhooks/git", "push", good, sig(good), 404, ""},
		{"malformed JSON", hook, "push", []byte(`{"ref": "refs/heads/main", `), sig([]byte(`{"ref": "refs/heads/main", `)), 400, ""},
		{"oversized body", hook, "push", big, sig(big), 413, ""},
		{"another branch", hook, "push", pushBody("refs/heads/dev", sha), sig(pushBody("refs/heads/dev", sha)), 200, "ignored"},
		{"branch deleted", hook, "push", pushBody("refs/heads/main", strings.Repeat("0", 40)), sig(pushBody("refs/heads/main", strings.Repeat("0", 40))), 200, "ignored"},
		{"a tag on a branch endpoint", hook, "push", pushBody("refs/tags/v1", sha), sig(pushBody("refs/tags/v1", sha)), 200, "ignored"},
		{"another event", hook, "issues", []byte(`{"action":"opened"}`), sig([]byte(`{"action":"opened"}`)), 200, "ignored"},
		{"a good push, but this Berth has no Docker to build with", hook, "push", good, sig(good), 503, ""},
		{"ping", hook, "ping", []byte(`{"zen":"Design for failure.","hook_id":1}`), sig([]byte(`{"zen":"Design for failure.","hook_id":1}`)), 200, "pong"},
	} {
		code, out := gittest.Deliver(t, c.url, c.event, "d-"+c.name, c.body, c.hdr)
		if code != c.code || (c.result != "" && out["result"] != c.result) {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, out, c.code, c.result)
		}
	}
	if n := builds(); n != 0 {
		t.Errorf("%d builds started by refused or ignored deliveries", n)
	}

	// A rotation shows the new secret once; the old one no longer signs.
	var rot struct {
		Git struct{ WebhookSecret string }
	}
	e.must(e.all, 200, "PATCH", "/v2/serverless/"+ep.ID, map[string]any{"git": map[string]any{"rotateWebhookSecret": true}}, &rot)
	if rot.Git.WebhookSecret == "" || rot.Git.WebhookSecret == secret {
		t.Fatalf("rotated secret %q", rot.Git.WebhookSecret)
	}
	ping := []byte(`{"zen":"x"}`)
	if code, _ := gittest.Deliver(t, hook, "ping", "", ping, sig(ping)); code != 401 {
		t.Errorf("the old secret after a rotation: %d, want 401", code)
	}
	if code, out := gittest.Deliver(t, hook, "ping", "", ping, map[string]string{"X-Forgejo-Signature": gittest.Sign(rot.Git.WebhookSecret, ping)}); code != 200 || out["result"] != "pong" {
		t.Errorf("the new secret (Forgejo's header): %d %v", code, out)
	}
	// A secret of the user's choice is taken and not shown.
	b = e.must(e.all, 200, "PATCH", "/v2/serverless/"+ep.ID, map[string]any{"git": map[string]any{"webhookSecret": "my-own-secret-0123456789"}}, nil)
	if bytes.Contains(b, []byte("my-own-secret")) {
		t.Errorf("a given secret is answered: %s", b)
	}
	if code, out := gittest.Deliver(t, hook, "ping", "", ping, map[string]string{"X-Hub-Signature-256": "sha256=" + gittest.Sign("my-own-secret-0123456789", ping)}); code != 200 {
		t.Errorf("the given secret: %d %v", code, out)
	}
	// null stops tracking: the webhook is then 404 whatever the signature.
	b = e.must(e.all, 200, "PATCH", "/v2/serverless/"+ep.ID, json.RawMessage(`{"git": null}`), nil)
	if bytes.Contains(b, []byte(`"git"`)) {
		t.Errorf("after git null: %s", b)
	}
	if code, _ := gittest.Deliver(t, hook, "ping", "", ping, map[string]string{"X-Hub-Signature-256": "sha256=" + gittest.Sign("my-own-secret-0123456789", ping)}); code != 404 {
		t.Errorf("a webhook of an endpoint tracking nothing: %d, want 404", code)
	}
}
