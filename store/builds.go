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
	ImageName    string `json:"imageName"`
	SourceDigest string `json:"sourceDigest"`
	Source       string `json:"source"` // UPLOAD or GIT
	// Git is a GIT build's repository source (what was asked); the
	// Commit* fields and Branch are what was built, once cloned.
	Git           *GitSource        `json:"git,omitempty"`
	CommitHash    string            `json:"commitHash,omitempty"`
	CommitMessage string            `json:"commitMessage,omitempty"`
	Branch        string            `json:"branch,omitempty"`
	CommitDate    *time.Time        `json:"commitDate,omitempty"`
	Dockerfile    string            `json:"dockerfile"`
	Target        string            `json:"target,omitempty"`
	BuildArgs     map[string]string `json:"buildArgs,omitempty"`
	// SecretBuildArgs are the names of the build's secret build args:
	// their values are never stored, only SecretsDigest, an HMAC of them
	// under the install's key (mgmt.SecretArgsDigest) that the image name
	// depends on.
	SecretBuildArgs []string   `json:"secretBuildArgs,omitempty"`
	SecretsDigest   string     `json:"secretsDigest,omitempty"`
	ContextBytes    int64      `json:"contextBytes"`
	CreatedAt       time.Time  `json:"createdAt"`
	StartedAt       *time.Time `json:"startedAt,omitempty"`
	CompletedAt     *time.Time `json:"completedAt,omitempty"`
	Error           string     `json:"error,omitempty"`
	// Reused: the image was already present, nothing was built.
	Reused bool `json:"reused,omitempty"`
	// ReleaseVersion is the endpoint version the build released (0: none,
	// e.g. the endpoint already ran this image).
	ReleaseVersion int `json:"releaseVersion,omitempty"`
	// PushedImage is the image pushed to the build registry (berth serve
	// --registry), by digest: HOST/PREFIX/name@sha256:…; ImageDigest that
	// digest; RegistryAuthID the registry auth it was pushed (and is
	// pulled) with. Empty without a registry.
	PushedImage    string `json:"pushedImage,omitempty"`
	ImageDigest    string `json:"imageDigest,omitempty"`
	RegistryAuthID string `json:"registryAuthId,omitempty"`
	// ImagePrunedAt: when its image (the local copy) was removed from the
	// daemon to keep only the last releases' (berth serve
	// --build-images-kept); such a build is no longer rolled back to.
	// Cleared when a later build makes the same image again.
	ImagePrunedAt *time.Time `json:"imagePrunedAt,omitempty"`
	// Given names the endpoint fields the command that asked for the
	// build gave (berth deploy's flags): hub.json's config does not
	// override them. Hub is the source's .runpod/hub.json config, once
	// read; HubApplied the fields it set on the endpoint at the release.
	Given      []string   `json:"given,omitempty"`
	Hub        *HubConfig `json:"hub,omitempty"`
	HubApplied []string   `json:"hubApplied,omitempty"`
}

// HubConfig is a .runpod/hub.json's config, in Berth's field names (mgmt
// parses and applies it).
type HubConfig struct {
	RunsOn              string            `json:"runsOn,omitempty"`       // GPU or CPU: computeType
	EndpointType        string            `json:"endpointType,omitempty"` // QUEUE or LOAD_BALANCER: type
	ContainerDiskInGb   *int              `json:"containerDiskInGb,omitempty"`
	CPUFlavorIDs        []string          `json:"cpuFlavorIds,omitempty"`
	GPUCount            *int              `json:"gpuCount,omitempty"`
	GPUTypeIDs          []string          `json:"gpuTypeIds,omitempty"`
	AllowedCudaVersions []string          `json:"allowedCudaVersions,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
}

// RunImage is the image a release of b runs: the pushed reference by
// digest when b was pushed, else the local name.
func (b Build) RunImage() string {
	if b.PushedImage != "" {
		return b.PushedImage
	}
	return b.ImageName
}

// Build sources.
const (
	BuildSourceUpload = "UPLOAD"
	BuildSourceGit    = "GIT"
)

// GitSource is a git build's source as asked (mgmt.GitSource, checked).
type GitSource struct {
	URL          string `json:"url"`
	Ref          string `json:"ref,omitempty"`
	ContextPath  string `json:"contextPath,omitempty"`
	Commit       string `json:"commit,omitempty"`
	Branch       string `json:"branch,omitempty"`
	CredentialID string `json:"credentialId,omitempty"`
}

// GitCredential is a stored git credential: a token (https, with its user
// name) or an SSH private key (with the known host keys it trusts). Like a
// registry auth's password, the secret is kept in the database file only
// and never returned.
type GitCredential struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Kind       string    `json:"kind"` // TOKEN or SSH_KEY
	Username   string    `json:"username,omitempty"`
	Secret     string    `json:"secret"`
	KnownHosts string    `json:"knownHosts,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
}

// Git credential kinds.
const (
	GitCredentialToken  = "TOKEN"
	GitCredentialSSHKey = "SSH_KEY"
)
