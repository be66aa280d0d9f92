package store

import (
	"errors"
	"fmt"
	"time"
)

// Pod desiredStatus values (RunPod REST v1).
const (
	PodRunning    = "RUNNING"
	PodExited     = "EXITED"
	PodTerminated = "TERMINATED"
)

// PodGPU is the GPU block of a pod: the type and count attached by the
// runtime when the pod last started.
type PodGPU struct {
	ID          string   `json:"id"` // gpuTypeId, e.g. "NVIDIA GeForce RTX 4090"
	Count       int      `json:"count"`
	DisplayName string   `json:"displayName"`
	UUIDs       []string `json:"uuids,omitempty"` // Berth: the pinned devices
}

// Pod is a long-lived container (RunPod REST v1 shape). The record holds the
// desired state: configuration, desiredStatus and Version; the runtime
// fills the fields it observes (GPU, ports, memory, start time).
type Pod struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	DesiredStatus string `json:"desiredStatus"`
	// Version is bumped when a change needs a new container (image, env,
	// command, ports, disks, registry auth); the runtime labels containers
	// with it, as it does for endpoint versions.
	Version int `json:"version"`

	ImageName               string            `json:"imageName"`
	TemplateID              string            `json:"templateId,omitempty"`
	ContainerRegistryAuthID string            `json:"containerRegistryAuthId,omitempty"`
	DockerEntrypoint        []string          `json:"dockerEntrypoint"`
	DockerStartCmd          []string          `json:"dockerStartCmd"`
	Env                     map[string]string `json:"env"`
	Ports                   []string          `json:"ports"`
	ContainerDiskInGb       int               `json:"containerDiskInGb"`
	VolumeInGb              int               `json:"volumeInGb"`
	VolumeMountPath         string            `json:"volumeMountPath"`
	VolumeEncrypted         bool              `json:"volumeEncrypted"`
	NetworkVolumeID         string            `json:"networkVolumeId,omitempty"`

	// Placement as requested at creation.
	ComputeType          string   `json:"computeType"`
	CloudType            string   `json:"cloudType"`
	GPUTypeIDs           []string `json:"gpuTypeIds"`
	GPUTypePriority      string   `json:"gpuTypePriority"`
	GPUCount             int      `json:"gpuCount"`
	MinRAMPerGPU         int      `json:"minRAMPerGPU"`
	MinVCPUPerGPU        int      `json:"minVCPUPerGPU"`
	CPUFlavorIDs         []string `json:"cpuFlavorIds,omitempty"`
	CPUFlavorPriority    string   `json:"cpuFlavorPriority"`
	VCPUCount            int      `json:"vcpuCount"`
	AllowedCudaVersions  []string `json:"allowedCudaVersions,omitempty"`
	DataCenterIDs        []string `json:"dataCenterIds"`
	DataCenterPriority   string   `json:"dataCenterPriority"`
	CountryCodes         []string `json:"countryCodes,omitempty"`
	MinDownloadMbps      float64  `json:"minDownloadMbps,omitempty"`
	MinUploadMbps        float64  `json:"minUploadMbps,omitempty"`
	MinDiskBandwidthMBps float64  `json:"minDiskBandwidthMBps,omitempty"`
	SupportPublicIP      bool     `json:"supportPublicIp"`
	GlobalNetworking     bool     `json:"globalNetworking"`
	Interruptible        bool     `json:"interruptible"`
	Locked               bool     `json:"locked"`

	// Observed by the runtime.
	GPU           *PodGPU        `json:"gpu,omitempty"`
	MemoryInGb    float64        `json:"memoryInGb"`
	PortMappings  map[string]int `json:"portMappings"`
	PublicIP      string         `json:"publicIp"`
	MachineID     string         `json:"machineId"`
	LastStartedAt time.Time      `json:"lastStartedAt,omitzero"`
	// LastStatusChange describes the last lifecycle event, as RunPod's
	// does ("Started by user: <time>").
	LastStatusChange string `json:"lastStatusChange"`
	// StatusMessage (Berth) says why the last action did not take effect;
	// empty when it did.
	StatusMessage string    `json:"statusMessage,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
	// Warnings (Berth) name ids accepted but unknown to Berth, and the
	// host's conditions of the running container (HostWarnings).
	Warnings []string `json:"warnings,omitempty"`
	// HostWarnings (Berth) are the warnings the runtime gave at the
	// container's last start (no GPU on this host for a GPU pod, a disk
	// size not enforced…), also in Warnings; replaced at each start.
	HostWarnings []string `json:"hostWarnings,omitempty"`
	// DataCenterID (Berth) is the data centre the pod was placed in: its
	// network volume's, else the first of DataCenterIDs, else this host's
	// (mgmt.PodDataCenter reads it, with that fallback for older records).
	DataCenterID string `json:"dataCenterId,omitempty"`
	// LastExit (Berth) is how the pod's container last ended on its own
	// (its command exited, it was OOM-killed or removed behind Berth's
	// back); cleared when the pod is started again.
	LastExit *PodExit `json:"lastExit,omitempty"`
}

// PodExit is how a pod's container ended.
type PodExit struct {
	ExitCode  int       `json:"exitCode"`
	Reason    string    `json:"reason"` // "exit code 1", "OOM killed (exit code 137)", "container removed"
	OOMKilled bool      `json:"oomKilled,omitempty"`
	At        time.Time `json:"at"`
}

// NetworkVolume is persistent storage shared by pods and workers: a
// directory under the data folder (RunPod REST v1 shape).
type NetworkVolume struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Size         int    `json:"size"` // GB
	DataCenterID string `json:"dataCenterId"`
	// Type (REST v2) is STANDARD or HIGH_PERFORMANCE as asked; on one
	// host both are a directory on the data disk. "" reads as STANDARD.
	Type      string    `json:"type,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	Warnings  []string  `json:"warnings,omitempty"` // Berth: ids accepted but unknown
}

// RegistryAuth is a container registry credential. The password is kept in
// the database file only (mode 0600); it is never returned by the API.
type RegistryAuth struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Username  string    `json:"username"`
	Password  string    `json:"password"`
	CreatedAt time.Time `json:"createdAt"`
}

// RegistryCredentials returns the username and password of a registry auth,
// for the runtime's image pulls.
func RegistryCredentials(db *DB, id string) (username, password string, err error) {
	var a RegistryAuth
	if err := db.View(func(tx *Tx) error { return tx.Get(RegistryAuths, id, &a) }); err != nil {
		return "", "", fmt.Errorf("registry auth %s: %w", id, err)
	}
	return a.Username, a.Password, nil
}

// UpdatePod reads pod id, lets fn change it and stores it, in one
// transaction; fn's error aborts without writing. The runtime uses it to
// record what it observes (ports, GPUs, a container that exited).
func UpdatePod(db *DB, id string, fn func(*Pod) error) error {
	return db.Update(func(tx *Tx) error {
		var p Pod
		if err := tx.Get(Pods, id, &p); err != nil {
			return err
		}
		if err := fn(&p); err != nil {
			return err
		}
		if p.ID != id {
			return errors.New("store: UpdatePod must not change the pod id")
		}
		return tx.Apply(Put(Pods, id, p))
	})
}
