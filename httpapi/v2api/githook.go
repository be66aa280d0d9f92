package v2api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"berth/builder"
	"berth/mgmt"
	"berth/store"
)

// Push to deploy (Berth's): an endpoint's git field and the webhook route
// GitHub, Gitea and Forgejo post to. The route has no API key (a forge
// cannot send one): the HMAC signature under the endpoint's secret is its
// authentication, checked by mgmt.

// GitPushes takes webhook deliveries (*builder.Pushes).
type GitPushes interface {
	Deliver(ctx context.Context, endpointID string, d mgmt.GitDelivery) (mgmt.GitPush, store.Build, error)
}

// EndpointGit is the repository an endpoint tracks, as answered: the
// webhook secret only says whether one is set, except in the one answer
// that generated it.
type EndpointGit struct {
	Repository string  `json:"repository"`
	Branch     *string `json:"branch"`
	Tags       *string `json:"tags"`
	Dockerfile string  `json:"dockerfile"`
	Context    string  `json:"context"`
	// CredentialID is the stored git credential cloning uses ("" none).
	CredentialID string `json:"credentialId"`
	// WebhookURL is where the forge posts: this Berth's address as the
	// request reached it.
	WebhookURL       string `json:"webhookUrl"`
	WebhookSecretSet bool   `json:"webhookSecretSet"`
	// WebhookSecret is shown once: in the answer of the change that
	// generated it.
	WebhookSecret string `json:"webhookSecret,omitempty"`
}

func viewGit(e store.Endpoint, base string) *EndpointGit {
	g := e.Git
	if g == nil {
		return nil
	}
	v := &EndpointGit{Repository: g.Repository, Dockerfile: g.Dockerfile, Context: g.Context,
		WebhookURL: base + "/v2/serverless/" + e.ID + "/webhooks/git", WebhookSecretSet: true, WebhookSecret: g.NewWebhookSecret, CredentialID: g.CredentialID}
	if v.Dockerfile == "" {
		v.Dockerfile = "Dockerfile"
	}
	if v.Context == "" {
		v.Context = "."
	}
	if g.Branch != "" {
		v.Branch = ptr(g.Branch)
	}
	if g.Tags != "" {
		v.Tags = ptr(g.Tags)
	}
	return v
}

// gitBody is the git field of an endpoint body; null stops tracking.
type gitBody struct {
	Repository          *string `json:"repository"`
	Branch              *string `json:"branch"`
	Tags                *string `json:"tags"`
	Dockerfile          *string `json:"dockerfile"`
	Context             *string `json:"context"`
	CredentialID        *string `json:"credentialId"`
	WebhookSecret       *string `json:"webhookSecret"`
	RotateWebhookSecret bool    `json:"rotateWebhookSecret"`
}

// gitInput is the body's git field as mgmt's input; nil when not given.
func gitInput(raw []byte) (*mgmt.GitTrackInput, error) {
	if raw == nil {
		return nil, nil
	}
	if strings.TrimSpace(string(raw)) == "null" {
		return &mgmt.GitTrackInput{Off: true}, nil
	}
	var g gitBody
	if err := decodeStrict(raw, &g); err != nil {
		return nil, bad("git", "git: %v", err)
	}
	return &mgmt.GitTrackInput{Repository: g.Repository, Branch: g.Branch, Tags: g.Tags, Dockerfile: g.Dockerfile,
		Context: g.Context, CredentialID: g.CredentialID, WebhookSecret: g.WebhookSecret, RotateWebhookSecret: g.RotateWebhookSecret}, nil
}

// maxWebhookBody bounds a delivery (GitHub's push payloads of many
// commits run to a few hundred KB).
const maxWebhookBody = 2 << 20

// GitWebhookAnswer is the webhook route's answer (the forge shows it in
// its delivery log).
type GitWebhookAnswer struct {
	Result  string     `json:"result"` // build, duplicate, ignored, pong
	Reason  string     `json:"reason,omitempty"`
	BuildID string     `json:"buildId,omitempty"`
	Build   *BuildView `json:"build,omitempty"`
}

// gitWebhook takes a GitHub, Gitea or Forgejo delivery: 202 with the build
// started; 200 for a ping, an event that builds nothing here, or one
// already built; 401 for a wrong or missing signature; 404 for an
// endpoint tracking no repository; 400 for a body that is not its event;
// 413 over the size bound; 429 over the endpoint's rate.
func (a *API) gitWebhook(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Pushes == nil {
		problem(w, http.StatusServiceUnavailable, "push to deploy is not available on this Berth")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
	if err != nil {
		a.fail(w, r, bad("", "read request body: %v", err))
		return
	}
	if len(body) > maxWebhookBody {
		problem(w, http.StatusRequestEntityTooLarge, "the webhook body is over 2 MiB")
		return
	}
	h := r.Header
	d := mgmt.GitDelivery{Body: body,
		Event:      first(h, "X-GitHub-Event", "X-Gitea-Event", "X-Forgejo-Event", "X-Gogs-Event"),
		ID:         first(h, "X-GitHub-Delivery", "X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gogs-Delivery"),
		Signatures: []string{h.Get("X-Hub-Signature-256"), h.Get("X-Gitea-Signature"), h.Get("X-Forgejo-Signature")},
	}
	if ct, _, _ := strings.Cut(h.Get("Content-Type"), ";"); strings.TrimSpace(ct) == "application/x-www-form-urlencoded" {
		// GitHub's form content type: the JSON is the payload field; the
		// signature is over the body as sent.
		q, err := url.ParseQuery(string(body))
		if err != nil || q.Get("payload") == "" {
			a.fail(w, r, bad("payload", "a form-encoded delivery must carry the event as its payload field"))
			return
		}
		d.Payload = []byte(q.Get("payload"))
	}
	p, b, err := a.cfg.Pushes.Deliver(r.Context(), pathID(r), d)
	switch {
	case errors.Is(err, mgmt.ErrBadSignature):
		problem(w, http.StatusUnauthorized, err.Error())
		return
	case errors.Is(err, builder.ErrPushRate):
		w.Header().Set("Retry-After", "60")
		problem(w, http.StatusTooManyRequests, err.Error())
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	out := GitWebhookAnswer{Result: p.Result, Reason: p.Reason, BuildID: p.BuildID}
	if p.Result == mgmt.GitBuild {
		v := viewBuild(b)
		out.BuildID, out.Build = b.ID, &v
		writeJSON(w, http.StatusAccepted, out)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func first(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// decodeStrict decodes a nested field's JSON, unknown fields refused.
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
