package store

import "time"

// GitTrack is the git repository an endpoint tracks (push to deploy): a
// branch (every push to it builds) or release tags (a release published,
// or a tag pushed, whose name matches Tags). The webhook secret is not
// here but in GitHooks: an endpoint record is answered whole by some
// routes, the secret never.
type GitTrack struct {
	Repository string `json:"repository"`
	Branch     string `json:"branch,omitempty"`
	Tags       string `json:"tags,omitempty"` // a path.Match pattern of tag names
	Dockerfile string `json:"dockerfile,omitempty"`
	Context    string `json:"context,omitempty"` // a sub-path of the repository
	// CredentialID is the stored git credential to clone with ("" none).
	CredentialID string `json:"credentialId,omitempty"`
	// NewWebhookSecret is never stored: it carries a secret Berth has just
	// generated back to the one answer that shows it.
	NewWebhookSecret string `json:"-"`
}

// GitHook is an endpoint's webhook state (bucket GitHooks, keyed by
// endpoint id): its secret (write-only in every answer) and the newest
// deliveries, for answering a redelivery or a second event of the same
// commit without a second build.
type GitHook struct {
	EndpointID string        `json:"endpointId"`
	Secret     string        `json:"secret"`
	Deliveries []GitDelivery `json:"deliveries,omitempty"` // oldest first, bounded
}

// GitDelivery is one webhook delivery that started (or was about to
// start) a build.
type GitDelivery struct {
	ID      string    `json:"id,omitempty"` // X-GitHub-Delivery and the like; "" when not sent
	Key     string    `json:"key"`          // what was built: "commit:<sha>" or "tag:<name>"
	BuildID string    `json:"buildId,omitempty"`
	At      time.Time `json:"at"`
}
