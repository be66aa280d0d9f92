package store

import (
	"fmt"
	"time"
)

// Release is one recorded version of an endpoint: what changed to make it.
type Release struct {
	EndpointID string    `json:"endpointId"`
	Version    int       `json:"version"`
	CreatedAt  time.Time `json:"createdAt"`
	// Source is what produced it: "" (a manual change, v2's MANUAL) or
	// GIT_BUILD with the BuildID whose image it installed.
	Source  string        `json:"source,omitempty"`
	BuildID string        `json:"buildId,omitempty"`
	Diff    []ReleaseDiff `json:"diff"`
}

// ReleaseDiff is one changed field (old and new as JSON values).
type ReleaseDiff struct {
	Field string `json:"field"`
	Old   any    `json:"old"`
	New   any    `json:"new"`
}

// ReleaseKey is a release's key: an endpoint's releases sort by version.
func ReleaseKey(endpointID string, version int) string {
	return fmt.Sprintf("%s/%010d", endpointID, version)
}
