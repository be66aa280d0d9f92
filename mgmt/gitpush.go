package mgmt

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"berth/store"
)

// Push to deploy: an endpoint tracks a git repository — a branch (every
// push to it builds) or release tags (a release published, or a tag
// pushed, whose name matches a pattern): RunPod's two triggers. GitHub,
// Gitea and Forgejo send their webhook to Berth, signed with HMAC-SHA256
// under the endpoint's secret; the rules here check the signature, read
// the event, decide what it builds and keep a redelivery or a second
// event of the same commit from building twice. Running the build is
// package builder's; reading the request is the HTTP adapter's.

// GitTrackInput sets what an endpoint tracks. nil fields are not given.
// Giving Branch on an endpoint tracking tags (or Tags on one tracking a
// branch) switches it.
type GitTrackInput struct {
	// Off stops tracking; the secret goes with it.
	Off        bool
	Repository *string
	Branch     *string
	Tags       *string
	Dockerfile *string
	Context    *string
	// CredentialID names a stored git credential to clone with ("" none).
	CredentialID *string
	// WebhookSecret sets the secret; when none is given and the endpoint
	// has none, Berth generates one (answered once). RotateWebhookSecret
	// generates a new one.
	WebhookSecret       *string
	RotateWebhookSecret bool
}

// Push-to-deploy limits.
var (
	LimitWebhookSecret = Limit{"webhookSecret", 16, 256, "bytes", ""}
	// LimitGitDeliveries is how many recent deliveries an endpoint
	// remembers to answer a redelivery without a second build.
	LimitGitDeliveries = 100
)

// ErrBadSignature is a webhook delivery whose signature is missing or
// wrong (HTTP 401): it starts nothing.
var ErrBadSignature = errors.New("webhook signature missing or wrong")

// applyGit validates in against e's current tracking and applies it (no
// store access).
func applyGit(e *store.Endpoint, in GitTrackInput) error {
	if in.Off {
		if in.Repository != nil || in.Branch != nil || in.Tags != nil || in.WebhookSecret != nil || in.RotateWebhookSecret {
			return invalid("git", "git: stop tracking (off) takes no other field")
		}
		e.Git = nil
		return nil
	}
	g := store.GitTrack{}
	if e.Git != nil {
		g = *e.Git
	}
	if in.Repository != nil {
		if _, err := ParseGitURL("git.repository", *in.Repository); err != nil {
			return err
		}
		g.Repository = *in.Repository
	}
	if g.Repository == "" {
		return invalid("git.repository", "git.repository is required: the URL of the repository to track")
	}
	switch {
	case in.Branch != nil && in.Tags != nil && *in.Branch != "" && *in.Tags != "":
		return invalid("git.branch", "git: give a branch or a tags pattern, not both (an endpoint tracks one; several environments are several endpoints)")
	case in.Branch != nil && *in.Branch != "":
		b := strings.TrimPrefix(*in.Branch, "refs/heads/")
		if err := CheckGitRef("git.branch", b); err != nil {
			return err
		}
		g.Branch, g.Tags = b, ""
	case in.Tags != nil && *in.Tags != "":
		if err := checkTagPattern(*in.Tags); err != nil {
			return err
		}
		g.Tags, g.Branch = *in.Tags, ""
	}
	if g.Branch == "" && g.Tags == "" {
		return invalid("git.branch", "git: give the branch to track (every push to it builds) or a tags pattern (a release published or a tag pushed that matches builds; * for every tag)")
	}
	if in.Dockerfile != nil {
		df := ""
		if *in.Dockerfile != "" {
			c, err := CleanContextPath("git.dockerfile", *in.Dockerfile)
			if err != nil {
				return err
			}
			df = c
		}
		g.Dockerfile = df
	}
	if in.Context != nil {
		c := ""
		if *in.Context != "" {
			p, err := CleanContextPath("git.context", *in.Context)
			if err != nil {
				return err
			}
			if p != "." {
				c = p
			}
		}
		g.Context = c
	}
	if in.CredentialID != nil {
		if err := CheckText("git.credentialId", *in.CredentialID, false); err != nil || len(*in.CredentialID) > 64 {
			return invalid("git.credentialId", "git.credentialId must be a stored git credential's id")
		}
		g.CredentialID = *in.CredentialID
	}
	if in.WebhookSecret != nil {
		if in.RotateWebhookSecret {
			return invalid("git.webhookSecret", "git: give a webhookSecret or rotate it, not both")
		}
		if err := CheckWebhookSecret(*in.WebhookSecret); err != nil {
			return err
		}
	}
	g.NewWebhookSecret = ""
	e.Git = &g
	return nil
}

// CheckWebhookSecret checks a secret given by the user: one line of
// text, 16 to 256 bytes, no surrounding spaces (a forge's form keeps them,
// a copy and paste does not).
func CheckWebhookSecret(s string) error {
	if err := CheckText("git.webhookSecret", s, false); err != nil {
		return err
	}
	if strings.TrimSpace(s) != s {
		return invalid("git.webhookSecret", "git.webhookSecret must not start or end with spaces")
	}
	return LimitWebhookSecret.CheckLen("git.webhookSecret", s)
}

func checkTagPattern(p string) error {
	if err := CheckText("git.tags", p, false); err != nil {
		return err
	}
	if len(p) > 255 || strings.ContainsAny(p, " ") {
		return invalid("git.tags", "git.tags must be a tag name pattern (v*, release-*, * for all) of at most 255 bytes")
	}
	if _, err := path.Match(p, ""); err != nil {
		return invalid("git.tags", "git.tags %s is not a pattern: %v", quote(ShortID(p)), err)
	}
	return nil
}

// NewWebhookSecret makes a webhook secret: 32 random bytes, base64url.
func NewWebhookSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate a webhook secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// gitHookOps stores endpoint e's webhook state after in was applied:
// generated (shown once, in e.Git.NewWebhookSecret) when tracking starts
// without one or on a rotation, replaced when given, removed when
// tracking stops.
func gitHookOps(tx *store.Tx, e *store.Endpoint, in *GitTrackInput) ([]store.Op, error) {
	var h store.GitHook
	have := tx.GetRaw(store.GitHooks, e.ID) != nil
	if have {
		if err := tx.Get(store.GitHooks, e.ID, &h); err != nil {
			return nil, err
		}
	}
	if e.Git == nil {
		if have {
			return []store.Op{store.Delete(store.GitHooks, e.ID)}, nil
		}
		return nil, nil
	}
	if e.Git.CredentialID != "" {
		if err := checkGitCredentialRef(tx, e.Git.CredentialID); err != nil {
			return nil, err
		}
	}
	h.EndpointID = e.ID
	switch {
	case in != nil && in.WebhookSecret != nil:
		h.Secret = *in.WebhookSecret
	case h.Secret == "" || (in != nil && in.RotateWebhookSecret):
		s, err := NewWebhookSecret()
		if err != nil {
			return nil, err
		}
		h.Secret, e.Git.NewWebhookSecret = s, s
	default:
		return nil, nil
	}
	return []store.Op{store.Put(store.GitHooks, e.ID, h)}, nil
}

// GitDelivery is a webhook request as received: the event name, the
// delivery id and the signatures as their headers give them
// ("sha256=<hex>" or bare hex), the raw body (what is signed) and the
// event's JSON when the body is a form holding it (GitHub's
// application/x-www-form-urlencoded payload=…; nil: the body is the JSON).
type GitDelivery struct {
	Event      string
	ID         string
	Signatures []string
	Body       []byte
	Payload    []byte
}

// GitEvent is what a push, release or ping event says.
type GitEvent struct {
	Kind       string // push, release, ping, or the event's own name
	Action     string // release: published, created…
	Branch     string // push to refs/heads/…
	Tag        string // push to refs/tags/…, or the release's tag
	Commit     string // the commit a push leaves the ref at
	Message    string
	CommitDate *time.Time
	Deleted    bool // a push deleting the ref
}

// Git push outcomes.
const (
	GitPong      = "pong"
	GitIgnored   = "ignored"
	GitDuplicate = "duplicate"
	GitBuild     = "build"
)

// GitPush is what a delivery does: Result, why (Reason), and for a build
// the source to build (the endpoint's repository at the pushed commit or
// tag); for a duplicate, the build already made (BuildID).
type GitPush struct {
	Result  string
	Reason  string
	BuildID string

	EndpointID   string
	DeliveryID   string
	Key          string // "commit:<sha>" or "tag:<name>"
	Repository   string
	Branch       string // the branch pushed (a branch build)
	Tag          string // the tag (a release or tag build)
	Commit       string // the commit, when the event names it
	Message      string
	CommitDate   *time.Time
	Dockerfile   string
	Context      string
	CredentialID string
}

// Ref is what to check out: the commit when known, else the tag.
func (p GitPush) Ref() string {
	if p.Commit != "" {
		return p.Commit
	}
	return "refs/tags/" + p.Tag
}

const zeroSHA = "0000000000000000000000000000000000000000"

// VerifyGitSignature checks a delivery's HMAC-SHA256 signatures over its
// raw body under secret, in constant time: at least one must be given and
// each given must match. GitHub sends "sha256=<hex>" (X-Hub-Signature-256);
// Gitea and Forgejo that too, and bare hex (X-Gitea-Signature,
// X-Forgejo-Signature).
func VerifyGitSignature(secret string, body []byte, sigs []string) error {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	want := m.Sum(nil)
	n := 0
	for _, s := range sigs {
		if s == "" {
			continue
		}
		n++
		h := strings.TrimPrefix(strings.TrimSpace(s), "sha256=")
		got, err := hex.DecodeString(h)
		if err != nil || !hmac.Equal(got, want) {
			return fmt.Errorf("%w: the signature does not match the endpoint's webhook secret", ErrBadSignature)
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: no X-Hub-Signature-256 (or X-Gitea-Signature, X-Forgejo-Signature) header", ErrBadSignature)
	}
	return nil
}

// ParseGitEvent reads an event's body (GitHub's payloads; Gitea's and
// Forgejo's have the same fields).
func ParseGitEvent(event string, body []byte) (GitEvent, error) {
	ev := GitEvent{Kind: event}
	switch event {
	case "ping":
		return ev, nil
	case "push":
		var p struct {
			Ref        string `json:"ref"`
			After      string `json:"after"`
			Deleted    bool   `json:"deleted"`
			HeadCommit *struct {
				ID        string `json:"id"`
				Message   string `json:"message"`
				Timestamp string `json:"timestamp"`
			} `json:"head_commit"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return ev, invalid("body", "the push event's body is not JSON of a push: %v", err)
		}
		switch {
		case strings.HasPrefix(p.Ref, "refs/heads/"):
			ev.Branch = strings.TrimPrefix(p.Ref, "refs/heads/")
		case strings.HasPrefix(p.Ref, "refs/tags/"):
			ev.Tag = strings.TrimPrefix(p.Ref, "refs/tags/")
		default:
			return ev, invalid("ref", "the push event's ref %s is not refs/heads/… or refs/tags/…", quote(ShortID(p.Ref)))
		}
		ev.Deleted = p.Deleted || p.After == zeroSHA
		ev.Commit = p.After
		if hc := p.HeadCommit; hc != nil {
			if hc.ID != "" {
				ev.Commit = hc.ID // a tag push's after is the tag object of an annotated tag
			}
			ev.Message = hc.Message
			if t, err := time.Parse(time.RFC3339, hc.Timestamp); err == nil {
				ev.CommitDate = &t
			}
		}
		if !ev.Deleted && !isSHA(ev.Commit) {
			return ev, invalid("after", "the push event's commit %s is not a commit id", quote(ShortID(ev.Commit)))
		}
		return ev, nil
	case "release":
		var p struct {
			Action  string `json:"action"`
			Release *struct {
				TagName string `json:"tag_name"`
			} `json:"release"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return ev, invalid("body", "the release event's body is not JSON of a release: %v", err)
		}
		if p.Release == nil || p.Release.TagName == "" {
			return ev, invalid("release", "the release event has no release.tag_name")
		}
		ev.Action, ev.Tag = p.Action, p.Release.TagName
		return ev, nil
	}
	return ev, nil
}

func isSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// noHook is the answer for an endpoint missing or not tracking a
// repository: the same for both, to a caller without a key.
func noHook(id string) error {
	return notFound("endpoint %s has no git webhook (it is missing or tracks no repository)", ShortID(id))
}

// MatchGitEvent decides what ev does to an endpoint tracking g (no store
// access): the outcome without the duplicate check.
func MatchGitEvent(g store.GitTrack, ev GitEvent) GitPush {
	p := GitPush{Result: GitIgnored, Repository: g.Repository, Dockerfile: g.Dockerfile, Context: g.Context, CredentialID: g.CredentialID}
	switch ev.Kind {
	case "ping":
		p.Result, p.Reason = GitPong, "pong: the webhook reaches Berth and its signature is right"
		return p
	case "push":
		switch {
		case ev.Deleted:
			p.Reason = "a push deleting " + refOf(ev) + ": nothing to build"
		case ev.Branch != "" && g.Branch == "":
			p.Reason = fmt.Sprintf("a push to branch %s: the endpoint tracks tags %s", ev.Branch, g.Tags)
		case ev.Branch != "" && ev.Branch != g.Branch:
			p.Reason = fmt.Sprintf("a push to branch %s: the endpoint tracks branch %s", ev.Branch, g.Branch)
		case ev.Branch != "":
			p.Result, p.Branch, p.Commit, p.Key = GitBuild, ev.Branch, ev.Commit, "commit:"+ev.Commit
		case g.Tags == "":
			p.Reason = fmt.Sprintf("a push of tag %s: the endpoint tracks branch %s", ev.Tag, g.Branch)
		case !tagMatches(g.Tags, ev.Tag):
			p.Reason = fmt.Sprintf("tag %s does not match the endpoint's tags pattern %s", ev.Tag, g.Tags)
		default:
			p.Result, p.Tag, p.Commit, p.Key = GitBuild, ev.Tag, ev.Commit, "tag:"+ev.Tag
		}
	case "release":
		switch {
		case ev.Action != "published":
			p.Reason = fmt.Sprintf("a release %s, not published", ev.Action)
		case g.Tags == "":
			p.Reason = fmt.Sprintf("a release of tag %s: the endpoint tracks branch %s", ev.Tag, g.Branch)
		case !tagMatches(g.Tags, ev.Tag):
			p.Reason = fmt.Sprintf("tag %s does not match the endpoint's tags pattern %s", ev.Tag, g.Tags)
		default:
			p.Result, p.Tag, p.Key = GitBuild, ev.Tag, "tag:"+ev.Tag
		}
	default:
		p.Reason = fmt.Sprintf("event %s: Berth builds on push and release events", quote(ShortID(ev.Kind)))
	}
	if p.Result == GitBuild {
		p.Message, p.CommitDate = ev.Message, ev.CommitDate
	}
	return p
}

func refOf(ev GitEvent) string {
	if ev.Branch != "" {
		return "branch " + ev.Branch
	}
	return "tag " + ev.Tag
}

func tagMatches(pattern, tag string) bool {
	ok, _ := path.Match(pattern, tag)
	return ok
}

// GitWebhook takes a delivery for endpoint id: the endpoint must track a
// repository (else NotFound), the signature must match its secret (else
// ErrBadSignature, nothing read further), the body must be the event it
// says (else Invalid). A build outcome is claimed: the delivery and the
// commit (or tag) are recorded, so a redelivery, or another event of the
// same commit while its build is pending, running or completed, is a
// duplicate; the caller then starts the build and notes its id
// (NoteGitBuild), or forgets the claim when it could not
// (ForgetGitDelivery).
func (s *Service) GitWebhook(ctx context.Context, id string, d GitDelivery) (GitPush, error) {
	if err := live(ctx); err != nil {
		return GitPush{}, err
	}
	var e store.Endpoint
	var h store.GitHook
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if tx.GetRaw(store.Endpoints, id) == nil || tx.GetRaw(store.GitHooks, id) == nil {
			return noHook(id)
		}
		if err := tx.Get(store.Endpoints, id, &e); err != nil {
			return err
		}
		return tx.Get(store.GitHooks, id, &h)
	})
	if err != nil {
		return GitPush{}, err
	}
	if e.Git == nil || h.Secret == "" {
		return GitPush{}, noHook(id)
	}
	if err := VerifyGitSignature(h.Secret, d.Body, d.Signatures); err != nil {
		return GitPush{}, err
	}
	if d.Event == "" {
		return GitPush{}, invalid("event", "no event header: X-GitHub-Event, X-Gitea-Event or X-Forgejo-Event names the event")
	}
	if err := CheckText("event", d.Event, false); err != nil || len(d.Event) > 64 {
		return GitPush{}, invalid("event", "the event header is not an event name")
	}
	if err := CheckText("delivery", d.ID, false); err != nil || len(d.ID) > 128 {
		return GitPush{}, invalid("delivery", "the delivery header is not a delivery id (one line, at most 128 bytes)")
	}
	payload := d.Body
	if d.Payload != nil {
		payload = d.Payload
	}
	ev, err := ParseGitEvent(d.Event, payload)
	if err != nil {
		return GitPush{}, err
	}
	p := MatchGitEvent(*e.Git, ev)
	p.EndpointID, p.DeliveryID = id, d.ID
	if p.Result != GitBuild {
		return p, nil
	}
	if err := CheckText("commitMessage", p.Message, true); err != nil {
		p.Message = strings.Map(func(r rune) rune {
			if IsControl(r) && r != '\n' && r != '\t' {
				return -1
			}
			return r
		}, p.Message)
	}
	if len(p.Message) > 4096 {
		p.Message = p.Message[:4096]
	}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.GetRaw(store.GitHooks, id) == nil {
			return noHook(id)
		}
		if err := tx.Get(store.GitHooks, id, &h); err != nil {
			return err
		}
		for _, old := range slices.Backward(h.Deliveries) {
			if d.ID != "" && old.ID == d.ID {
				p.Result, p.BuildID, p.Reason = GitDuplicate, old.BuildID, "delivery "+d.ID+" was taken before"
				return nil
			}
		}
		for _, old := range slices.Backward(h.Deliveries) {
			if old.Key != p.Key {
				continue
			}
			if old.BuildID == "" {
				p.Result, p.Reason = GitDuplicate, "a build of "+p.Key+" is being started"
				return nil
			}
			var b store.Build
			if tx.GetRaw(store.Builds, old.BuildID) != nil {
				if err := tx.Get(store.Builds, old.BuildID, &b); err != nil {
					return err
				}
				if b.Status != store.BuildFailed && b.Status != store.BuildCancelled {
					p.Result, p.BuildID, p.Reason = GitDuplicate, b.ID, fmt.Sprintf("%s was built already (build %s, %s)", p.Key, b.ID, b.Status)
					return nil
				}
			}
			break // the newest build of it failed, was cancelled or is gone: build again
		}
		h.Deliveries = append(h.Deliveries, store.GitDelivery{ID: d.ID, Key: p.Key, At: s.now()})
		if n := len(h.Deliveries) - LimitGitDeliveries; n > 0 {
			h.Deliveries = slices.Delete(h.Deliveries, 0, n)
		}
		return tx.Apply(store.Put(store.GitHooks, id, h))
	})
	if err != nil {
		return GitPush{}, err
	}
	return p, nil
}

// NoteGitBuild records the build a claimed delivery started.
func (s *Service) NoteGitBuild(p GitPush, buildID string) error {
	return s.editDeliveries(p.EndpointID, func(ds []store.GitDelivery) []store.GitDelivery {
		for i := len(ds) - 1; i >= 0; i-- {
			if ds[i].Key == p.Key && ds[i].ID == p.DeliveryID && ds[i].BuildID == "" {
				ds[i].BuildID = buildID
				break
			}
		}
		return ds
	})
}

// ForgetGitDelivery drops a claim whose build could not start, so the
// delivery can be sent again.
func (s *Service) ForgetGitDelivery(p GitPush) error {
	return s.editDeliveries(p.EndpointID, func(ds []store.GitDelivery) []store.GitDelivery {
		for i := len(ds) - 1; i >= 0; i-- {
			if ds[i].Key == p.Key && ds[i].ID == p.DeliveryID && ds[i].BuildID == "" {
				return slices.Delete(ds, i, i+1)
			}
		}
		return ds
	})
}

func (s *Service) editDeliveries(id string, f func([]store.GitDelivery) []store.GitDelivery) error {
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		var h store.GitHook
		if tx.GetRaw(store.GitHooks, id) == nil {
			return nil // tracking stopped meanwhile
		}
		if err := tx.Get(store.GitHooks, id, &h); err != nil {
			return err
		}
		h.Deliveries = f(h.Deliveries)
		return tx.Apply(store.Put(store.GitHooks, id, h))
	})
}
