package store

import (
	"encoding/json"
	"time"
)

// Template is a reusable pod or worker configuration (RunPod REST v1 shape).
type Template struct {
	ID                      string            `json:"id"`
	Name                    string            `json:"name"`
	ImageName               string            `json:"imageName"`
	Category                string            `json:"category"`
	ContainerDiskInGb       int               `json:"containerDiskInGb"`
	VolumeInGb              int               `json:"volumeInGb"`
	VolumeMountPath         string            `json:"volumeMountPath"`
	DockerEntrypoint        []string          `json:"dockerEntrypoint"`
	DockerStartCmd          []string          `json:"dockerStartCmd"`
	Env                     map[string]string `json:"env"`
	Ports                   []string          `json:"ports"`
	Readme                  string            `json:"readme"`
	IsPublic                bool              `json:"isPublic"`
	IsRunpod                bool              `json:"isRunpod"`
	IsServerless            bool              `json:"isServerless"`
	ContainerRegistryAuthID string            `json:"containerRegistryAuthId,omitempty"`
	// PortLabels names ports for people (port number → label), as
	// RunPod's portsConfig does; set through GraphQL.
	PortLabels map[string]string `json:"portLabels,omitempty"`
	// ShmSizeInMb (Berth's) sizes the /dev/shm of the template's workers
	// in MiB; 0: the rule (half the worker's memory, 1-32 GiB).
	ShmSizeInMb int `json:"shmSizeInMb,omitempty"`
	// StartSSH and StartJupyter (REST v2): pods made from the template get
	// PUBLIC_KEY (the account's SSH keys) and a JUPYTER_PASSWORD.
	StartSSH     bool `json:"startSsh,omitempty"`
	StartJupyter bool `json:"startJupyter,omitempty"`
	// AllowedCudaVersions (REST v2) is copied into pods and endpoints
	// created from the template that do not give their own.
	AllowedCudaVersions []string `json:"allowedCudaVersions,omitempty"`
	// EndpointID is the endpoint the template was made for (REST v2's and
	// GraphQL's inline container): it is that endpoint's bound template,
	// deleted with it.
	EndpointID   string    `json:"endpointId,omitempty"`
	Earned       float64   `json:"earned"`
	RuntimeInMin int       `json:"runtimeInMin"`
	CreatedAt    time.Time `json:"createdAt"`
}

// Endpoint is a serverless endpoint (RunPod REST v1 shape).
type Endpoint struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	UserID     string `json:"userId"`
	TemplateID string `json:"templateId"`
	Version    int    `json:"version"`
	// Type is QUEUE or LOAD_BALANCER; "" (records older than the field)
	// reads as QUEUE.
	Type                string            `json:"type"`
	ComputeType         string            `json:"computeType"`
	GPUTypeIDs          []string          `json:"gpuTypeIds"`
	GPUCount            int               `json:"gpuCount"`
	CPUFlavorIDs        []string          `json:"cpuFlavorIds,omitempty"`
	VCPUCount           int               `json:"vcpuCount"`
	InstanceIDs         []string          `json:"instanceIds,omitempty"`
	AllowedCudaVersions []string          `json:"allowedCudaVersions"`
	MinCudaVersion      string            `json:"minCudaVersion,omitempty"`
	DataCenterIDs       []string          `json:"dataCenterIds"`
	NetworkVolumeID     string            `json:"networkVolumeId,omitempty"`
	NetworkVolumeIDs    []string          `json:"networkVolumeIds,omitempty"`
	IdleTimeout         int               `json:"idleTimeout"`
	ScalerType          string            `json:"scalerType"`
	ScalerValue         int               `json:"scalerValue"`
	WorkersMin          int               `json:"workersMin"`
	WorkersMax          int               `json:"workersMax"`
	Flashboot           bool              `json:"flashboot"`
	ExecutionTimeoutMs  int64             `json:"executionTimeoutMs"`
	Env                 map[string]string `json:"env"`
	// ModelReferences are the Hugging Face models the endpoint's workers
	// start with (https://huggingface.co/ORG/NAME[:REF], as given).
	ModelReferences []string `json:"modelReferences,omitempty"`
	// Git is the repository the endpoint tracks (push to deploy); nil:
	// none.
	Git       *GitTrack `json:"git,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// Warnings (Berth) name ids accepted but unknown to Berth (a GPU
	// type or data centre), so they match nothing or only this host.
	Warnings []string `json:"warnings,omitempty"`
}

// Endpoint types: queue-based (jobs) or load balancing (requests go
// straight to the workers' own HTTP servers).
const (
	EndpointQueue        = "QUEUE"
	EndpointLoadBalancer = "LOAD_BALANCER"
)

// LoadBalancer reports whether e is a load-balancing endpoint.
func (e *Endpoint) LoadBalancer() bool { return e.Type == EndpointLoadBalancer }

// JobStatus is a job's state.
type JobStatus string

const (
	InQueue    JobStatus = "IN_QUEUE"
	InProgress JobStatus = "IN_PROGRESS"
	Completed  JobStatus = "COMPLETED"
	Failed     JobStatus = "FAILED"
	Cancelled  JobStatus = "CANCELLED"
	TimedOut   JobStatus = "TIMED_OUT"
)

// Terminal reports whether no further transition happens without a retry.
func (s JobStatus) Terminal() bool {
	return s == Completed || s == Failed || s == Cancelled || s == TimedOut
}

// Job is a job's state record. The input is stored apart (JobInputs) so
// state changes do not rewrite a payload of up to 20 MB.
type Job struct {
	ID                 string          `json:"id"`
	EndpointID         string          `json:"endpointId"`
	Seq                uint64          `json:"seq"`
	Status             JobStatus       `json:"status"`
	Sync               bool            `json:"sync,omitempty"`
	Webhook            string          `json:"webhook,omitempty"`
	S3Config           json.RawMessage `json:"s3Config,omitempty"`
	Policy             json.RawMessage `json:"policy,omitempty"`
	ExecutionTimeoutMs int64           `json:"executionTimeoutMs"`
	LowPriority        bool            `json:"lowPriority,omitempty"`
	CreatedAt          time.Time       `json:"createdAt"`
	ExpiresAt          time.Time       `json:"expiresAt"`
	QueuedAt           time.Time       `json:"queuedAt"`
	StartedAt          time.Time       `json:"startedAt,omitzero"`
	CompletedAt        time.Time       `json:"completedAt,omitzero"`
	RetainUntil        time.Time       `json:"retainUntil,omitzero"`
	WorkerID           string          `json:"workerId,omitempty"`
	Attempts           int             `json:"attempts"`
	Retries            int             `json:"retries"`
	Output             json.RawMessage `json:"output,omitempty"`
	Error              string          `json:"error,omitempty"`
	// Input holds inputs up to 4 KiB; larger ones live in JobInputs.
	Input json.RawMessage `json:"input,omitempty"`
}

// Worker is a registered worker identity with its own key.
type Worker struct {
	ID         string    `json:"id"`
	EndpointID string    `json:"endpointId"`
	KeyHash    string    `json:"keyHash"`
	External   bool      `json:"external"`
	CreatedAt  time.Time `json:"createdAt"`
}

// OutboxEntry is a webhook delivery waiting to be made.
type OutboxEntry struct {
	ID    string `json:"id"`
	JobID string `json:"jobId"`
	// EndpointID is for the log lines about the delivery.
	EndpointID string          `json:"endpointId,omitempty"`
	URL        string          `json:"url"`
	Body       json.RawMessage `json:"body"`
	Attempts   int             `json:"attempts"`
	NextAt     time.Time       `json:"nextAt"`
}
