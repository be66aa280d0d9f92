package store

import "time"

// APIKey is one API key: its SHA-256 hash (hex), never the secret.
type APIKey struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Prefix string `json:"prefix"` // the secret's first characters, to tell keys apart
	Hash   string `json:"hash"`
	// Level is ALL, READ_ONLY or RESTRICTED; Grants (RESTRICTED) maps an
	// endpoint id to READ or READ_WRITE (absent: None).
	Level     string            `json:"level"`
	Grants    map[string]string `json:"grants,omitempty"`
	Disabled  bool              `json:"disabled,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	LastUsed  time.Time         `json:"lastUsed,omitempty"`
	// Operator marks the key generated on first start (migrated from the
	// single operator key).
	Operator bool `json:"operator,omitempty"`
}

// AuditEntry is one management write or key change.
type AuditEntry struct {
	Time   time.Time `json:"time"`
	KeyID  string    `json:"keyId,omitempty"`
	Key    string    `json:"key"`              // the key's name
	Action string    `json:"action"`           // "POST /v1/endpoints", "mutation saveEndpoint"
	Object string    `json:"object,omitempty"` // the id acted on
	Status int       `json:"status"`           // the answer's HTTP status
	Error  string    `json:"error,omitempty"`  // GraphQL: the refusal
}
