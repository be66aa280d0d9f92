package store

import "time"

// Build statuses: RunPod's (its newer API documents them).
const (
	BuildPending    = "PENDING"
	BuildBuilding   = "BUILDING"
	BuildUploading  = "UPLOADING"
	BuildTesting    = "TESTING"
	BuildCompleted  = "COMPLETED"
	BuildFailed     = "FAILED"
	BuildCancelled  = "CANCELLED"
	BuildTestFailed = "TEST_FAILED"
)

// BuildDone reports whether status is terminal.
func BuildDone(status string) bool {
	switch status {
	case BuildCompleted, BuildFailed, BuildCancelled, BuildTestFailed:
		return true
	}
	return false
}

// Build is one image build of an endpoint's source (bucket Builds, keyed
// by id). Its log is in BuildLogs under the same key.
type Build struct {
	ID         string `json:"id"`
	EndpointID string `json:"endpointId"`
	Status     string `json:"status"`
	// ImageName is the image it produces: a Berth-owned name whose tag is
	// the digest of the context and options (SourceDigest), so the same
	// source builds once.
	ImageName    string            `json:"imageName"`
	SourceDigest string            `json:"sourceDigest"`
	Source       string            `json:"source"` // UPLOAD
	Dockerfile   string            `json:"dockerfile"`
	Target       string            `json:"target,omitempty"`
	BuildArgs    map[string]string `json:"buildArgs,omitempty"`
	ContextBytes int64             `json:"contextBytes"`
	CreatedAt    time.Time         `json:"createdAt"`
	StartedAt    *time.Time        `json:"startedAt,omitempty"`
	CompletedAt  *time.Time        `json:"completedAt,omitempty"`
	Error        string            `json:"error,omitempty"`
	// Reused: the image was already present, nothing was built.
	Reused bool `json:"reused,omitempty"`
	// ReleaseVersion is the endpoint version the build released (0: none,
	// e.g. the endpoint already ran this image).
	ReleaseVersion int `json:"releaseVersion,omitempty"`
}
