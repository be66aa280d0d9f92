package gpu

import (
	"errors"
	"strings"
)

// Device is one GPU a worker or pod can be given: a physical GPU as NVML
// sees it (Docker), or one nvidia.com/gpu slot of a cluster node
// (Kubernetes), whose UUID is then a name Berth gives the slot.
type Device struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Name      string `json:"name"`
	TypeID    string `json:"gpuTypeId"`
	MemoryMiB uint64 `json:"memoryInMiB"`
	PCIBusID  string `json:"pciBusId"`
	// Node is the cluster node the GPU is on, "" for this machine. The
	// GPUs of one allocation are always on one node.
	Node string `json:"node,omitempty"`
	// Unschedulable: the node is cordoned or not Ready, or the operator's
	// Pod template keeps Berth's Pods off it. Its GPUs are
	// counted (the Pods on it still hold theirs, and it may come back)
	// but none is given.
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// ErrUnavailable means GPU discovery is impossible here: no cgo build, or no
// NVIDIA driver library. Callers fall back to CPU-only work.
var ErrUnavailable = errors.New("gpu: NVML unavailable")

// typeAliases maps normalised NVML names that differ from RunPod's gpuTypeId.
// Older drivers reported some boards under other names.
var typeAliases = map[string]string{
	"A100-SXM-80GB":        "NVIDIA A100-SXM4-80GB",
	"NVIDIA A100-SXM-80GB": "NVIDIA A100-SXM4-80GB",
}

// brands are leading words that RunPod keeps as they are; any other name gets
// the "NVIDIA " prefix that older drivers left out ("GeForce RTX 3090").
var brands = []string{"NVIDIA ", "Tesla ", "Quadro ", "AMD "}

// DisplayName is a gpuTypeId as RunPod shows it to people ("RTX 4090",
// "A40"): every surface's displayName of a type or a pod's GPU.
func DisplayName(typeID string) string {
	s := strings.TrimPrefix(typeID, "NVIDIA ")
	return strings.TrimPrefix(s, "GeForce ")
}

// TypeID maps an NVML product name to RunPod's gpuTypeId. RunPod's ids are
// mostly the NVML name itself, so this only normalises whitespace, drops the
// "Mock " prefix of the go-nvml mocks, restores a missing "NVIDIA " prefix and
// applies a few aliases.
func TypeID(nvmlName string) string {
	name := strings.Join(strings.Fields(nvmlName), " ")
	name = strings.TrimPrefix(name, "Mock ")
	if name == "" {
		return ""
	}
	if alias, ok := typeAliases[name]; ok {
		return alias
	}
	for _, b := range brands {
		if strings.HasPrefix(name, b) {
			return name
		}
	}
	name = "NVIDIA " + name
	if alias, ok := typeAliases[name]; ok {
		return alias
	}
	return name
}
