package runtime

import (
	"strings"

	"berth/gpu"
)

// What a worker asks for beside its GPUs, and its shared memory: one rule
// for both runtimes (docs/operations.md "Worker resources" says it).
//
//   - A CPU worker asks for its instanceIds' or vcpuCount's vCPUs and
//     their flavour's memory (cpuRequest).
//   - A GPU worker asks per GPU for Config.VCPUsPerGPU vCPUs [2] and
//     Config.MemoryGiBPerGPU GiB of memory [the GPU's own memory / 2,
//     at least 8 GiB; 16 GiB when the catalogue and the node do not say
//     the GPU's memory].
//   - Its /dev/shm is the template's shmSizeInMb, or else half the
//     worker's memory, at least 1 GiB and at most 32 GiB.
//   - A pod (REST /v1/pods, GraphQL podFindAndDeployOnDemand) follows the
//     same rule (podRequest): a CPU pod as a CPU worker, a GPU pod per GPU
//     as a GPU worker, raised to its minVCPUPerGPU and minRAMPerGPU; its
//     /dev/shm likewise, its template's shmSizeInMb overriding.
//
// Kubernetes schedules by the requests (no cpu or memory limit: the Pod is
// Burstable); Docker does not limit them, and only the shared memory is
// applied there.

// Defaults of the rule.
const (
	DefaultVCPUsPerGPU     = 2
	minGPUMemoryGiB        = 8
	unknownGPUMemoryGiB    = 16
	shmFloorMiB, shmCapMiB = 1 << 10, 32 << 10
)

// gpuRequest is what a GPU worker with devs asks for beside them:
// vcpusPerGPU (0: DefaultVCPUsPerGPU) and memGiBPerGPU (0: the GPU's
// memory rule) per GPU.
func gpuRequest(devs []gpu.Device, vcpusPerGPU, memGiBPerGPU int) (vcpus, memMiB int) {
	if vcpusPerGPU <= 0 {
		vcpusPerGPU = DefaultVCPUsPerGPU
	}
	for _, d := range devs {
		vcpus += vcpusPerGPU
		gib := memGiBPerGPU
		if gib <= 0 {
			gib = MemoryGiBPerGPU(d)
		}
		memMiB += gib << 10
	}
	return vcpus, memMiB
}

// MemoryGiBPerGPU is the default memory a worker asks for per GPU d: half
// the GPU's memory (the catalogue's for its type, else what the device
// reports), at least 8 GiB; 16 GiB when neither knows it.
func MemoryGiBPerGPU(d gpu.Device) int {
	gb := 0
	if m, ok := gpu.LookupModel(d.TypeID); ok {
		gb = m.MemoryGB
	} else if d.MemoryMiB > 0 {
		gb = int((d.MemoryMiB + 1023) >> 10)
	}
	if gb <= 0 {
		return unknownGPUMemoryGiB
	}
	return max(gb/2, minGPUMemoryGiB)
}

// podRequest is what a pod with devs asks for beside them (see the rule
// above): a CPU pod its vCPUs and their flavour's memory; a GPU pod the
// GPU workers' share per GPU, at least minVCPUPerGPU vCPUs and
// minRAMPerGPU GB per GPU; a GPU pod that got no GPU (a machine without
// any) nothing.
func podRequest(spec PodSpec, devs []gpu.Device, vcpusPerGPU, memGiBPerGPU int) (vcpus, memMiB int) {
	if strings.EqualFold(spec.ComputeType, "CPU") {
		return cpuShape(nil, spec.VCPUCount, spec.CPUFlavorIDs)
	}
	if len(devs) == 0 {
		return 0, 0
	}
	vcpus, memMiB = gpuRequest(devs, vcpusPerGPU, memGiBPerGPU)
	n := len(devs)
	return max(vcpus, spec.MinVCPUPerGPU*n), max(memMiB, spec.MinRAMPerGPU*n<<10)
}

// ShmMiB is a worker's /dev/shm: override (the template's shmSizeInMb)
// when set, else half its memory, within 1-32 GiB (1 GiB when its memory
// is not known).
func ShmMiB(memMiB, override int) int {
	if override > 0 {
		return override
	}
	return min(max(memMiB/2, shmFloorMiB), shmCapMiB)
}
