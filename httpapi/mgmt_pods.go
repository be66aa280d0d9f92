package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"berth/mgmt"
)

// Pods: the rules and desiredStatus transitions are in mgmt/pods.go; the
// views (includes, filters) in mgmt_pods_view.go.

// PodRuntime runs pod containers (Config.Pods); see mgmt.PodRuntime.
type PodRuntime = mgmt.PodRuntime

// PodState is what the runtime observed when a pod's container started.
type PodState = mgmt.PodState

// Errors a PodRuntime wraps to choose the answer's status (409, 400, 503);
// any other runtime error is 503.
var (
	ErrNoRuntime   = mgmt.ErrNoRuntime
	ErrPodCapacity = mgmt.ErrPodCapacity
	ErrPodInvalid  = mgmt.ErrPodInvalid
)

// PodInput is v1's PodCreateInput.
type PodInput struct {
	podFields
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

// podFields are the fields of PodUpdateInput, also part of PodCreateInput.
type podFields struct {
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
type PodUpdateInput struct{ podFields }

func (f podFields) mgmt() mgmt.PodFields {
	return mgmt.PodFields{
		Name: f.Name, ImageName: f.ImageName, DockerEntrypoint: f.DockerEntrypoint, DockerStartCmd: f.DockerStartCmd,
		Env: f.Env, Ports: f.Ports.list(), ContainerDiskInGb: f.ContainerDiskInGb, VolumeInGb: f.VolumeInGb,
		VolumeMountPath: f.VolumeMountPath, ContainerRegistryAuthID: f.ContainerRegistryAuthID,
		GlobalNetworking: f.GlobalNetworking, Locked: f.Locked,
	}
}

func (in PodInput) mgmt() mgmt.PodInput {
	return mgmt.PodInput{
		PodFields: in.podFields.mgmt(), TemplateID: in.TemplateID, VolumeEncrypted: in.VolumeEncrypted,
		NetworkVolumeID: in.NetworkVolumeID, ComputeType: in.ComputeType, CloudType: in.CloudType,
		DataCenterIDs: in.DataCenterIDs, DataCenterPriority: in.DataCenterPriority, CountryCodes: in.CountryCodes,
		AllowedCudaVersions: in.AllowedCudaVersions, GPUTypeIDs: in.GPUTypeIDs, GPUTypePriority: in.GPUTypePriority,
		GPUCount: in.GPUCount, MinRAMPerGPU: in.MinRAMPerGPU, MinVCPUPerGPU: in.MinVCPUPerGPU,
		CPUFlavorIDs: in.CPUFlavorIDs, CPUFlavorPriority: in.CPUFlavorPriority, VCPUCount: in.VCPUCount,
		MinDownloadMbps: in.MinDownloadMbps, MinUploadMbps: in.MinUploadMbps,
		MinDiskBandwidthMBps: in.MinDiskBandwidthMBps, SupportPublicIP: in.SupportPublicIP, Interruptible: in.Interruptible,
	}
}

func (s *Server) createPod(w http.ResponseWriter, r *http.Request) {
	var in PodInput
	if !decodeBody(w, r, &in) {
		return
	}
	p, err := s.mg.CreatePod(r.Context(), in.mgmt())
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	s.writePod(w, r, http.StatusCreated, p, nil)
}

// podAction is POST /pods/{podId}/start|stop|reset|restart.
func (s *Server) podAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.mg.DoPodAction(r.Context(), mux.Vars(r)["podId"], action)
		if err != nil {
			s.mgmtErr(w, r, err)
			return
		}
		s.writePod(w, r, http.StatusOK, p, nil)
	}
}

// updatePod is PATCH and POST …/update (PodUpdateInput).
func (s *Server) updatePod(w http.ResponseWriter, r *http.Request) {
	var in PodUpdateInput
	if !decodeBody(w, r, &in) {
		return
	}
	p, err := s.mg.UpdatePod(r.Context(), mux.Vars(r)["podId"], in.podFields.mgmt())
	if err != nil {
		s.mgmtErr(w, r, err)
		return
	}
	s.writePod(w, r, http.StatusOK, p, nil)
}

// deletePod terminates a pod (container, pod volume and record).
func (s *Server) deletePod(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, http.StatusNoContent, nil, s.mg.DeletePod(r.Context(), mux.Vars(r)["podId"]))
}
