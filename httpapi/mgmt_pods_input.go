package httpapi

import (
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"berth/store"
)

// Pod inputs: PodCreateInput and PodUpdateInput, their defaults and checks.

// PodInput is PodCreateInput.
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

// PodUpdateInput is PodUpdateInput.
type PodUpdateInput struct{ podFields }

var (
	cudaRe     = regexp.MustCompile(`^[0-9]{1,2}\.[0-9]$`)
	cpuFlavors = []string{"cpu3c", "cpu3g", "cpu3m", "cpu5c", "cpu5g", "cpu5m"}
	priorities = []string{"availability", "custom"}
)

// applyPodFields validates f and applies it to p.
func applyPodFields(p *store.Pod, f podFields) error {
	if f.Name != nil {
		if strings.TrimSpace(*f.Name) == "" {
			return bad("name must not be empty")
		}
		if len(*f.Name) > 191 {
			return bad("name must be at most 191 characters")
		}
		p.Name = *f.Name
	}
	if f.ImageName != nil {
		if strings.TrimSpace(*f.ImageName) == "" {
			return bad("imageName must not be empty")
		}
		p.ImageName = *f.ImageName
	}
	if f.DockerEntrypoint != nil {
		p.DockerEntrypoint = f.DockerEntrypoint
	}
	if f.DockerStartCmd != nil {
		p.DockerStartCmd = f.DockerStartCmd
	}
	if f.Env != nil {
		if err := validateEnv(f.Env); err != nil {
			return err
		}
		p.Env = f.Env
	}
	if f.Ports != nil {
		if err := validatePorts(*f.Ports); err != nil {
			return err
		}
		p.Ports = append([]string{}, *f.Ports...)
	}
	for name, v := range map[string]*int{"containerDiskInGb": f.ContainerDiskInGb, "volumeInGb": f.VolumeInGb} {
		if v != nil && *v < 0 {
			return bad("%s must not be negative", name)
		}
	}
	if f.ContainerDiskInGb != nil {
		p.ContainerDiskInGb = *f.ContainerDiskInGb
	}
	if f.VolumeInGb != nil {
		p.VolumeInGb = *f.VolumeInGb
	}
	if f.VolumeMountPath != nil {
		if !path.IsAbs(*f.VolumeMountPath) {
			return bad("volumeMountPath must be an absolute path, got %q", *f.VolumeMountPath)
		}
		p.VolumeMountPath = *f.VolumeMountPath
	}
	if f.ContainerRegistryAuthID != nil {
		p.ContainerRegistryAuthID = *f.ContainerRegistryAuthID
	}
	if f.GlobalNetworking != nil {
		p.GlobalNetworking = *f.GlobalNetworking
	}
	if f.Locked != nil {
		p.Locked = *f.Locked
	}
	return nil
}

func oneOf(name string, v *string, values []string, dst *string) error {
	if v == nil {
		return nil
	}
	if !slices.Contains(values, *v) {
		return bad("%s must be one of %s, got %q", name, strings.Join(values, ", "), *v)
	}
	*dst = *v
	return nil
}

func nonNegative(name string, v *int, dst *int) error {
	if v == nil {
		return nil
	}
	if *v < 0 {
		return bad("%s must not be negative, got %d", name, *v)
	}
	*dst = *v
	return nil
}

// applyPodCreate validates the creation-only fields and applies them.
func applyPodCreate(p *store.Pod, in PodInput) error {
	if err := oneOf("computeType", in.ComputeType, []string{"GPU", "CPU"}, &p.ComputeType); err != nil {
		return err
	}
	if err := oneOf("cloudType", in.CloudType, []string{"SECURE", "COMMUNITY"}, &p.CloudType); err != nil {
		return err
	}
	for _, pr := range []struct {
		name string
		v    *string
		dst  *string
	}{{"dataCenterPriority", in.DataCenterPriority, &p.DataCenterPriority}, {"gpuTypePriority", in.GPUTypePriority, &p.GPUTypePriority}, {"cpuFlavorPriority", in.CPUFlavorPriority, &p.CPUFlavorPriority}} {
		if err := oneOf(pr.name, pr.v, priorities, pr.dst); err != nil {
			return err
		}
	}
	if in.VolumeEncrypted != nil && *in.VolumeEncrypted {
		return bad("volumeEncrypted: Berth does not encrypt pod volumes")
	}
	if in.DataCenterIDs != nil {
		for _, dc := range in.DataCenterIDs {
			if dc != DataCenterID {
				return bad("dataCenterIds: this Berth host is the one data centre %q, got %q", DataCenterID, dc)
			}
		}
		p.DataCenterIDs = in.DataCenterIDs
	}
	if in.CountryCodes != nil {
		p.CountryCodes = in.CountryCodes
	}
	for _, v := range in.AllowedCudaVersions {
		if !cudaRe.MatchString(v) {
			return bad("allowedCudaVersions: %q is not a CUDA version such as \"12.4\"", v)
		}
	}
	if in.AllowedCudaVersions != nil {
		p.AllowedCudaVersions = in.AllowedCudaVersions
	}
	if in.GPUTypeIDs != nil {
		for _, g := range in.GPUTypeIDs {
			if strings.TrimSpace(g) == "" {
				return bad("gpuTypeIds must not hold empty names")
			}
		}
		p.GPUTypeIDs = in.GPUTypeIDs
	}
	if in.GPUCount != nil {
		if *in.GPUCount < 1 {
			return bad("gpuCount must be at least 1, got %d", *in.GPUCount)
		}
		p.GPUCount = *in.GPUCount
	}
	if in.VCPUCount != nil {
		if *in.VCPUCount < 1 {
			return bad("vcpuCount must be at least 1, got %d", *in.VCPUCount)
		}
		p.VCPUCount = *in.VCPUCount
	}
	if err := nonNegative("minRAMPerGPU", in.MinRAMPerGPU, &p.MinRAMPerGPU); err != nil {
		return err
	}
	if err := nonNegative("minVCPUPerGPU", in.MinVCPUPerGPU, &p.MinVCPUPerGPU); err != nil {
		return err
	}
	for _, c := range in.CPUFlavorIDs {
		if !slices.Contains(cpuFlavors, c) {
			return bad("cpuFlavorIds: %q is not one of %s", c, strings.Join(cpuFlavors, ", "))
		}
	}
	if in.CPUFlavorIDs != nil {
		p.CPUFlavorIDs = in.CPUFlavorIDs
	}
	for _, m := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"minDownloadMbps", in.MinDownloadMbps, &p.MinDownloadMbps}, {"minUploadMbps", in.MinUploadMbps, &p.MinUploadMbps}, {"minDiskBandwidthMBps", in.MinDiskBandwidthMBps, &p.MinDiskBandwidthMBps}} {
		if m.v != nil {
			if *m.v < 0 {
				return bad("%s must not be negative", m.name)
			}
			*m.dst = *m.v
		}
	}
	if in.SupportPublicIP != nil {
		p.SupportPublicIP = *in.SupportPublicIP
	}
	if in.Interruptible != nil {
		p.Interruptible = *in.Interruptible
	}
	if in.NetworkVolumeID != nil {
		p.NetworkVolumeID = *in.NetworkVolumeID
	}
	if p.ComputeType == "CPU" {
		// RunPod ignores GPU fields on CPU pods; the record says so.
		p.GPUCount, p.GPUTypeIDs = 0, []string{}
	}
	return applyPodFields(p, in.podFields)
}

func newPodDefaults() store.Pod {
	host, _ := os.Hostname()
	return store.Pod{
		Name: "my pod", DesiredStatus: store.PodRunning, Version: 1,
		DockerEntrypoint: []string{}, DockerStartCmd: []string{}, Env: map[string]string{},
		Ports: []string{"8888/http", "22/tcp"}, ContainerDiskInGb: 50, VolumeInGb: 20, VolumeMountPath: "/workspace",
		ComputeType: "GPU", CloudType: "SECURE", GPUTypeIDs: []string{}, GPUTypePriority: "availability", GPUCount: 1,
		MinRAMPerGPU: 8, MinVCPUPerGPU: 2, CPUFlavorPriority: "availability", VCPUCount: 2,
		DataCenterIDs: []string{DataCenterID}, DataCenterPriority: "availability", MachineID: host,
	}
}

// fromTemplate fills a new pod from its template; the request's own
// fields are applied after (env is merged, the request's names winning).
func fromTemplate(p *store.Pod, t store.Template) {
	p.TemplateID = t.ID
	p.ImageName = t.ImageName
	p.DockerEntrypoint = slices.Clone(t.DockerEntrypoint)
	p.DockerStartCmd = slices.Clone(t.DockerStartCmd)
	p.Env = maps.Clone(t.Env)
	if p.Env == nil {
		p.Env = map[string]string{}
	}
	p.Ports = slices.Clone(t.Ports)
	p.ContainerDiskInGb, p.VolumeInGb, p.VolumeMountPath = t.ContainerDiskInGb, t.VolumeInGb, t.VolumeMountPath
	p.ContainerRegistryAuthID = t.ContainerRegistryAuthID
}

// checkPodRefs checks what a pod names exists.
func checkPodRefs(tx *store.Tx, p *store.Pod) error {
	if p.ContainerRegistryAuthID != "" && tx.GetRaw(store.RegistryAuths, p.ContainerRegistryAuthID) == nil {
		return bad("containerRegistryAuthId %q does not exist", p.ContainerRegistryAuthID)
	}
	if p.NetworkVolumeID != "" && tx.GetRaw(store.Volumes, p.NetworkVolumeID) == nil {
		return bad("networkVolumeId %q does not exist", p.NetworkVolumeID)
	}
	return nil
}

// podRolls reports whether a change needs a new container.
func podRolls(a, b store.Pod) bool {
	return a.ImageName != b.ImageName || !maps.Equal(a.Env, b.Env) ||
		!slices.Equal(a.DockerEntrypoint, b.DockerEntrypoint) || !slices.Equal(a.DockerStartCmd, b.DockerStartCmd) ||
		!slices.Equal(a.Ports, b.Ports) || a.ContainerDiskInGb != b.ContainerDiskInGb || a.VolumeInGb != b.VolumeInGb ||
		a.VolumeMountPath != b.VolumeMountPath || a.ContainerRegistryAuthID != b.ContainerRegistryAuthID ||
		a.GlobalNetworking != b.GlobalNetworking
}
