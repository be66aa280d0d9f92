package graphqlapi

import (
	"context"
	"fmt"

	"berth/mgmt"
)

// Pod mutations: runpod-python's create_pod (podFindAndDeployOnDemand for
// a GPU pod, deployCpuPod otherwise), stop_pod, resume_pod, terminate_pod.

// podDeployInput is the union of PodFindAndDeployOnDemandInput and
// deployCpuPodInput (the schema checks which fields each takes).
type podDeployInput struct {
	Name                    *string
	ImageName               *string
	CloudType               *string
	GpuTypeId               *string
	GpuTypeIdList           *[]string
	GpuCount                *int32
	SupportPublicIp         *bool
	VolumeInGb              *int32
	ContainerDiskInGb       *int32
	MinVcpuCount            *int32
	VcpuCount               *int32
	MinMemoryInGb           *int32
	AllowedCudaVersions     *[]string
	MinCudaVersion          *string
	DataCenterId            *string
	CountryCode             *string
	DockerArgs              *string
	Ports                   *string
	VolumeMountPath         *string
	Env                     *[]envInput
	TemplateId              *string
	NetworkVolumeId         *string
	ContainerRegistryAuthId *string
	MinDownload             *int32
	MinUpload               *int32
	GlobalNetwork           *bool
	InstanceId              *string
	StartSsh                *bool
	StartJupyter            *bool
	StopAfter               *string
	TerminateAfter          *string
	BidPerGpu               *float64
	Compliance              *[]string
	DeployCost              *float64
}

// cpuDeployInput is deployCpuPodInput: the same Go fields, minus the GPU
// ones the schema does not define for it.
type cpuDeployInput struct {
	Name                    *string
	ImageName               *string
	CloudType               *string
	InstanceId              *string
	VcpuCount               *int32
	SupportPublicIp         *bool
	VolumeInGb              *int32
	ContainerDiskInGb       *int32
	MinVcpuCount            *int32
	MinMemoryInGb           *int32
	DataCenterId            *string
	CountryCode             *string
	DockerArgs              *string
	Ports                   *string
	VolumeMountPath         *string
	Env                     *[]envInput
	TemplateId              *string
	NetworkVolumeId         *string
	ContainerRegistryAuthId *string
	MinDownload             *int32
	MinUpload               *int32
	StartSsh                *bool
	StartJupyter            *bool
	StopAfter               *string
	TerminateAfter          *string
}

func (c *cpuDeployInput) deploy() *podDeployInput {
	return &podDeployInput{Name: c.Name, ImageName: c.ImageName, CloudType: c.CloudType, InstanceId: c.InstanceId,
		VcpuCount: c.VcpuCount, SupportPublicIp: c.SupportPublicIp, VolumeInGb: c.VolumeInGb, ContainerDiskInGb: c.ContainerDiskInGb,
		MinVcpuCount: c.MinVcpuCount, MinMemoryInGb: c.MinMemoryInGb, DataCenterId: c.DataCenterId, CountryCode: c.CountryCode,
		DockerArgs: c.DockerArgs, Ports: c.Ports, VolumeMountPath: c.VolumeMountPath, Env: c.Env, TemplateId: c.TemplateId,
		NetworkVolumeId: c.NetworkVolumeId, ContainerRegistryAuthId: c.ContainerRegistryAuthId, MinDownload: c.MinDownload,
		MinUpload: c.MinUpload, StartSsh: c.StartSsh, StartJupyter: c.StartJupyter, StopAfter: c.StopAfter, TerminateAfter: c.TerminateAfter}
}

// mgmt decodes a deploy input. cpu: deployCpuPod.
func (a *podDeployInput) mgmt(cpu bool) (mgmt.PodInput, error) {
	var in mgmt.PodInput
	if a.BidPerGpu != nil {
		return in, unsupported("bidPerGpu", "bidPerGpu: spot (interruptible) pods are bids on a market of hosts; Berth deploys on-demand pods only")
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"stopAfter", a.StopAfter}, {"terminateAfter", a.TerminateAfter}} {
		if err := refuseSet(f.name, f.v, "Berth does not schedule pod stops; stop or terminate the pod when done"); err != nil {
			return in, err
		}
	}
	if a.Compliance != nil && len(*a.Compliance) > 0 {
		return in, unsupported("compliance", "compliance: Berth is one host with no certifications to choose from")
	}
	// ALL (runpod-python's default) is either cloud: SECURE here. COMMUNITY
	// is recorded, as on every surface (one host serves it either way).
	in.CloudType = ptr("SECURE")
	if a.CloudType != nil && *a.CloudType == "COMMUNITY" {
		in.CloudType = a.CloudType
	}
	in.Name, in.ImageName = a.Name, given(a.ImageName)
	if cpu {
		in.ComputeType = ptr("CPU")
		if id := given(a.InstanceId); id != nil {
			// "cpu3c-2-4": flavor, vCPUs, memory GB; mgmt's rule.
			flavor, n, err := mgmt.ParseInstanceID("instanceId", *id)
			if err != nil {
				return in, err
			}
			in.CPUFlavorIDs = []string{flavor}
			if n > 0 {
				in.VCPUCount = &n
			}
		}
	} else {
		in.ComputeType = ptr("GPU")
		if id := given(a.GpuTypeId); id != nil {
			in.GPUTypeIDs = append(in.GPUTypeIDs, *id)
		}
		if a.GpuTypeIdList != nil {
			in.GPUTypeIDs = append(in.GPUTypeIDs, *a.GpuTypeIdList...)
		}
		in.GPUCount = intp(a.GpuCount)
		if a.AllowedCudaVersions != nil {
			in.AllowedCudaVersions = *a.AllowedCudaVersions
		}
	}
	if in.VCPUCount == nil {
		in.VCPUCount = intp(a.VcpuCount)
	}
	if in.VCPUCount == nil {
		in.VCPUCount = intp(a.MinVcpuCount)
	}
	in.SupportPublicIP, in.GlobalNetworking = a.SupportPublicIp, a.GlobalNetwork
	// SSH and Jupyter: PUBLIC_KEY (the account's keys) and a
	// JUPYTER_PASSWORD in the pod's env, as RunPod's images expect.
	in.StartSSH, in.StartJupyter = a.StartSsh, a.StartJupyter
	in.VolumeInGb, in.ContainerDiskInGb = intp(a.VolumeInGb), intp(a.ContainerDiskInGb)
	if dc := given(a.DataCenterId); dc != nil {
		in.DataCenterIDs = []string{*dc}
	}
	if cc := given(a.CountryCode); cc != nil {
		in.CountryCodes = []string{*cc}
	}
	if a.DockerArgs != nil {
		ep, cmd, err := parseDockerArgs(*a.DockerArgs)
		if err != nil {
			return in, err
		}
		in.DockerEntrypoint, in.DockerStartCmd = ep, cmd
		if len(cmd) == 0 && ep == nil {
			// "" (runpod-python's default) keeps the image's or
			// template's command.
			in.DockerStartCmd = nil
		}
	}
	if a.Ports != nil {
		in.Ports = mgmt.SplitPorts(*a.Ports)
	}
	in.VolumeMountPath = given(a.VolumeMountPath)
	var err error
	if in.Env, err = envMap(a.Env); err != nil {
		return in, err
	}
	if t := given(a.TemplateId); t != nil {
		// RunPod's official templates ("runpod-ubuntu", the SDK's default
		// for CPU pods) are not Berth ids: with an image given, the image
		// is what runs.
		if mgmt.CheckTemplateID(*t) != nil && in.ImageName != nil {
			t = nil
		} else if mgmt.CheckTemplateID(*t) != nil {
			return in, invalid("templateId", "templateId %q is not a template on this host (RunPod's official templates are not served); give imageName", *t)
		}
		in.TemplateID = t
	}
	in.NetworkVolumeID, in.ContainerRegistryAuthID = given(a.NetworkVolumeId), given(a.ContainerRegistryAuthId)
	if a.MinDownload != nil {
		in.MinDownloadMbps = ptr(float64(*a.MinDownload))
	}
	if a.MinUpload != nil {
		in.MinUploadMbps = ptr(float64(*a.MinUpload))
	}
	return in, nil
}

// podFields are mgmt's names of the deploy inputs' fields.
var podFields = map[string]string{"gpuTypeIds": "gpuTypeId", "dataCenterIds": "dataCenterId", "countryCodes": "countryCode",
	"minDownloadMbps": "minDownload", "minUploadMbps": "minUpload", "globalNetworking": "globalNetwork", "supportPublicIp": "supportPublicIp"}

func (r *resolver) deploy(ctx context.Context, a *podDeployInput, cpu bool) (*podView, error) {
	v, err := r.deployPod(ctx, a, cpu)
	return v, wrap(renamed(err, podFields))
}

func (r *resolver) deployPod(ctx context.Context, a *podDeployInput, cpu bool) (*podView, error) {
	if a == nil {
		return nil, invalid("input", "input is required")
	}
	in, err := a.mgmt(cpu)
	if err != nil {
		return nil, err
	}
	if a.DeployCost != nil && *a.DeployCost <= 0 {
		return nil, invalid("deployCost", "deployCost must be a positive price per hour, got %g", *a.DeployCost)
	}
	p, err := r.mg().CreatePod(ctx, in)
	if err != nil {
		return nil, wrap(err)
	}
	prices := r.mg().PricesOrZero()
	if cost := prices.PodHourly(p); a.DeployCost != nil && cost > *a.DeployCost {
		// RunPod finds no machine under the ceiling; this host is the
		// only machine, and its price is known once the GPUs are chosen.
		if err := r.mg().DeletePod(ctx, p.ID); err != nil {
			return nil, wrap(err)
		}
		return nil, wrap(&mgmt.Error{Kind: mgmt.Conflict, Field: "deployCost",
			Msg: fmt.Sprintf("deployCost: this host's price for the pod is $%.4g/hr (prices.json), above the ceiling of $%.4g/hr; the pod was not created", cost, *a.DeployCost)})
	}
	noteWarnings(ctx, "pod "+p.ID, renameWarnings(p.Warnings, podFields))
	return r.podView(p, prices), nil
}

func (r *resolver) PodFindAndDeployOnDemand(ctx context.Context, args struct{ Input *podDeployInput }) (*podView, error) {
	return r.deploy(ctx, args.Input, false)
}

func (r *resolver) DeployCpuPod(ctx context.Context, args struct{ Input *cpuDeployInput }) (*podView, error) {
	if args.Input == nil {
		return nil, invalid("input", "input is required")
	}
	return r.deploy(ctx, args.Input.deploy(), true)
}

func (r *resolver) podAction(ctx context.Context, id, action string) (*podView, error) {
	p, err := r.mg().DoPodAction(ctx, id, action)
	if err != nil {
		return nil, wrap(err)
	}
	if action != "stop" {
		noteWarnings(ctx, "pod "+p.ID, renameWarnings(p.Warnings, podFields))
	}
	return r.podView(p, r.mg().PricesOrZero()), nil
}

func (r *resolver) PodStop(ctx context.Context, args struct {
	Input *struct {
		PodId            string
		IncrementVersion *bool
	}
}) (*podView, error) {
	if args.Input == nil {
		return nil, invalid("input", "input {podId} is required")
	}
	return r.podAction(ctx, args.Input.PodId, "stop")
}

// PodResume starts a stopped pod with the GPUs it was made with.
func (r *resolver) PodResume(ctx context.Context, args struct {
	Input *struct {
		PodId    string
		GpuCount *int32
	}
}) (*podView, error) {
	if args.Input == nil {
		return nil, invalid("input", "input {podId, gpuCount} is required")
	}
	p, err := r.mg().GetPod(ctx, args.Input.PodId)
	if err != nil {
		return nil, wrap(err)
	}
	if n := args.Input.GpuCount; n != nil && p.ComputeType != "CPU" && int(*n) != p.GPUCount {
		return nil, invalid("gpuCount", "gpuCount: pod %s has %d GPUs and resumes with them; got %d", p.ID, p.GPUCount, *n)
	}
	return r.podAction(ctx, p.ID, "start")
}

func (r *resolver) PodTerminate(ctx context.Context, args struct{ Input *struct{ PodId string } }) (*bool, error) {
	if args.Input == nil {
		return nil, invalid("input", "input {podId} is required")
	}
	if err := r.mg().DeletePod(ctx, args.Input.PodId); err != nil {
		return nil, wrap(err)
	}
	return ptr(true), nil
}

const noSpot = "spot (interruptible) pods are bids on a market of hosts; Berth is one host and deploys on-demand pods only: use podFindAndDeployOnDemand"

func (r *resolver) PodRentInterruptable(args struct {
	Input *struct {
		BidPerGpu            *float64
		GpuTypeId, ImageName *string
		GpuCount             *int32
		Name                 *string
	}
}) (*podView, error) {
	return nil, unsupported("bidPerGpu", "podRentInterruptable: %s", noSpot)
}

func (r *resolver) PodBidResume(args struct {
	Input *struct {
		PodId     string
		BidPerGpu *float64
		GpuCount  *int32
	}
}) (*podView, error) {
	return nil, unsupported("bidPerGpu", "podBidResume: %s", noSpot)
}
