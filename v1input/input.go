// Package v1input holds the request bodies of RunPod's REST v1 management
// API (TemplateCreateInput, EndpointCreateInput, PodCreateInput, …) and
// their translation into package mgmt's inputs. The v1 handlers
// (httpapi/v1api) decode into them, and the CLI builds its create and
// update flags from them by reflection, so a field added here gets a flag
// without touching the CLI.
package v1input

import (
	"encoding/json"
	"errors"

	"berth/mgmt"
)

// TemplateInput is v1's TemplateCreateInput (and, with Category and
// IsServerless refused, TemplateUpdateInput).
type TemplateInput struct {
	Name                    *string           `json:"name"`
	ImageName               *string           `json:"imageName"`
	Category                *string           `json:"category"`
	ContainerDiskInGb       *int              `json:"containerDiskInGb"`
	VolumeInGb              *int              `json:"volumeInGb"`
	VolumeMountPath         *string           `json:"volumeMountPath"`
	DockerEntrypoint        []string          `json:"dockerEntrypoint"`
	DockerStartCmd          []string          `json:"dockerStartCmd"`
	Env                     map[string]string `json:"env"`
	Ports                   *PortsField       `json:"ports"`
	Readme                  *string           `json:"readme"`
	IsPublic                *bool             `json:"isPublic"`
	IsServerless            *bool             `json:"isServerless"`
	ContainerRegistryAuthID *string           `json:"containerRegistryAuthId"`
	// ShmSizeInMb is Berth's: the workers' /dev/shm in MiB (0: the rule).
	ShmSizeInMb *int `json:"shmSizeInMb"`
}

// Mgmt is the input in mgmt's terms.
func (in TemplateInput) Mgmt() mgmt.TemplateInput {
	return mgmt.TemplateInput{
		Name: in.Name, ImageName: in.ImageName, Category: in.Category, ContainerDiskInGb: in.ContainerDiskInGb,
		VolumeInGb: in.VolumeInGb, VolumeMountPath: in.VolumeMountPath, DockerEntrypoint: in.DockerEntrypoint,
		DockerStartCmd: in.DockerStartCmd, Env: in.Env, Ports: in.Ports.list(), Readme: in.Readme,
		IsPublic: in.IsPublic, IsServerless: in.IsServerless, ContainerRegistryAuthID: in.ContainerRegistryAuthID,
		ShmSizeInMb: in.ShmSizeInMb,
	}
}

// PortsField accepts RunPod's array form and the comma-joined string form
// its defaults and runpod-python use ("8888/http,22/tcp").
type PortsField []string

var errPorts = errors.New(`ports must be an array of "<port>/<http|tcp>" strings`)

// UnmarshalJSON accepts an array of strings or one comma-joined string.
func (p *PortsField) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*p = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errPorts
	}
	*p = mgmt.SplitPorts(s)
	return nil
}

// list is the ports given, nil when none were (an empty list clears them).
func (p *PortsField) list() []string {
	if p == nil {
		return nil
	}
	return append([]string{}, *p...)
}

// EndpointInput is v1's EndpointCreateInput / EndpointUpdateInput.
type EndpointInput struct {
	Name                *string           `json:"name"`
	TemplateID          *string           `json:"templateId"`
	Type                *string           `json:"type"`
	ComputeType         *string           `json:"computeType"`
	GPUTypeIDs          []string          `json:"gpuTypeIds"`
	GPUCount            *int              `json:"gpuCount"`
	CPUFlavorIDs        []string          `json:"cpuFlavorIds"`
	VCPUCount           *int              `json:"vcpuCount"`
	InstanceIDs         []string          `json:"instanceIds"`
	AllowedCudaVersions []string          `json:"allowedCudaVersions"`
	MinCudaVersion      *string           `json:"minCudaVersion"`
	DataCenterIDs       []string          `json:"dataCenterIds"`
	NetworkVolumeID     *string           `json:"networkVolumeId"`
	NetworkVolumeIDs    []string          `json:"networkVolumeIds"`
	IdleTimeout         *int              `json:"idleTimeout"`
	ScalerType          *string           `json:"scalerType"`
	ScalerValue         *int              `json:"scalerValue"`
	WorkersMin          *int              `json:"workersMin"`
	WorkersMax          *int              `json:"workersMax"`
	Flashboot           *bool             `json:"flashboot"`
	ExecutionTimeoutMs  *int64            `json:"executionTimeoutMs"`
	Env                 map[string]string `json:"env"`
	// ModelReferences is Berth's (RunPod's REST documents lack it; its
	// GraphQL and runpodctl have it): Hugging Face models the workers
	// start with.
	ModelReferences []string `json:"modelReferences"`
}

// Mgmt is the input in mgmt's terms: v1's endpoint input has mgmt's fields
// one for one (the conversion stops compiling when they part).
func (in EndpointInput) Mgmt() mgmt.EndpointInput { return mgmt.EndpointInput(in) }

// PodInput is v1's PodCreateInput.
type PodInput struct {
	PodFields
	TemplateID           *string  `json:"templateId"`
	VolumeEncrypted      *bool    `json:"volumeEncrypted"`
	NetworkVolumeID      *string  `json:"networkVolumeId"`
	ComputeType          *string  `json:"computeType"`
	CloudType            *string  `json:"cloudType"`
	DataCenterIDs        []string `json:"dataCenterIds"`
	DataCenterPriority   *string  `json:"dataCenterPriority"`
	CountryCodes         []string `json:"countryCodes"`
	AllowedCudaVersions  []string `json:"allowedCudaVersions"`
	GPUTypeIDs           []string `json:"gpuTypeIds"`
	GPUTypePriority      *string  `json:"gpuTypePriority"`
	GPUCount             *int     `json:"gpuCount"`
	MinRAMPerGPU         *int     `json:"minRAMPerGPU"`
	MinVCPUPerGPU        *int     `json:"minVCPUPerGPU"`
	CPUFlavorIDs         []string `json:"cpuFlavorIds"`
	CPUFlavorPriority    *string  `json:"cpuFlavorPriority"`
	VCPUCount            *int     `json:"vcpuCount"`
	MinDownloadMbps      *float64 `json:"minDownloadMbps"`
	MinUploadMbps        *float64 `json:"minUploadMbps"`
	MinDiskBandwidthMBps *float64 `json:"minDiskBandwidthMBps"`
	SupportPublicIP      *bool    `json:"supportPublicIp"`
	Interruptible        *bool    `json:"interruptible"`
}

// PodFields are the fields of PodUpdateInput, also part of PodCreateInput.
type PodFields struct {
	Name                    *string           `json:"name"`
	ImageName               *string           `json:"imageName"`
	DockerEntrypoint        []string          `json:"dockerEntrypoint"`
	DockerStartCmd          []string          `json:"dockerStartCmd"`
	Env                     map[string]string `json:"env"`
	Ports                   *PortsField       `json:"ports"`
	ContainerDiskInGb       *int              `json:"containerDiskInGb"`
	VolumeInGb              *int              `json:"volumeInGb"`
	VolumeMountPath         *string           `json:"volumeMountPath"`
	ContainerRegistryAuthID *string           `json:"containerRegistryAuthId"`
	GlobalNetworking        *bool             `json:"globalNetworking"`
	Locked                  *bool             `json:"locked"`
}

// PodUpdateInput is v1's PodUpdateInput.
type PodUpdateInput struct{ PodFields }

// Mgmt is the input in mgmt's terms.
func (f PodFields) Mgmt() mgmt.PodFields {
	return mgmt.PodFields{
		Name: f.Name, ImageName: f.ImageName, DockerEntrypoint: f.DockerEntrypoint, DockerStartCmd: f.DockerStartCmd,
		Env: f.Env, Ports: f.Ports.list(), ContainerDiskInGb: f.ContainerDiskInGb, VolumeInGb: f.VolumeInGb,
		VolumeMountPath: f.VolumeMountPath, ContainerRegistryAuthID: f.ContainerRegistryAuthID,
		GlobalNetworking: f.GlobalNetworking, Locked: f.Locked,
	}
}

// Mgmt is the input in mgmt's terms.
func (in PodInput) Mgmt() mgmt.PodInput {
	return mgmt.PodInput{
		PodFields: in.PodFields.Mgmt(), TemplateID: in.TemplateID, VolumeEncrypted: in.VolumeEncrypted,
		NetworkVolumeID: in.NetworkVolumeID, ComputeType: in.ComputeType, CloudType: in.CloudType,
		DataCenterIDs: in.DataCenterIDs, DataCenterPriority: in.DataCenterPriority, CountryCodes: in.CountryCodes,
		AllowedCudaVersions: in.AllowedCudaVersions, GPUTypeIDs: in.GPUTypeIDs, GPUTypePriority: in.GPUTypePriority,
		GPUCount: in.GPUCount, MinRAMPerGPU: in.MinRAMPerGPU, MinVCPUPerGPU: in.MinVCPUPerGPU,
		CPUFlavorIDs: in.CPUFlavorIDs, CPUFlavorPriority: in.CPUFlavorPriority, VCPUCount: in.VCPUCount,
		MinDownloadMbps: in.MinDownloadMbps, MinUploadMbps: in.MinUploadMbps,
		MinDiskBandwidthMBps: in.MinDiskBandwidthMBps, SupportPublicIP: in.SupportPublicIP, Interruptible: in.Interruptible,
	}
}

// VolumeInput is NetworkVolumeCreateInput and NetworkVolumeUpdateInput.
type VolumeInput struct {
	Name         *string `json:"name"`
	Size         *int    `json:"size"`
	DataCenterID *string `json:"dataCenterId"`
}

// Mgmt is the input in mgmt's terms.
func (in VolumeInput) Mgmt() mgmt.VolumeInput {
	return mgmt.VolumeInput{Name: in.Name, Size: in.Size, DataCenterID: in.DataCenterID}
}

// RegistryAuthInput is ContainerRegistryAuthCreateInput.
type RegistryAuthInput struct {
	Name     *string `json:"name"`
	Username *string `json:"username"`
	Password *string `json:"password"`
}

// Mgmt is the input in mgmt's terms.
func (in RegistryAuthInput) Mgmt() mgmt.RegistryAuthInput { return mgmt.RegistryAuthInput(in) }
