package runtime

import (
	"testing"

	"berth/gpu"
)

// TestWorkerResources is the rule of resources.go: what a GPU worker asks
// for per GPU, and the /dev/shm of any worker.
func TestWorkerResources(t *testing.T) {
	dev := func(typ string, memMiB uint64) gpu.Device { return gpu.Device{TypeID: typ, MemoryMiB: memMiB} }
	for _, c := range []struct {
		name               string
		devs               []gpu.Device
		vcpusPer, memPer   int
		wantVCPUs, wantMiB int
	}{
		{"catalogue: RTX 4090, 24 GB: 12 GiB", []gpu.Device{dev("NVIDIA GeForce RTX 4090", 0)}, 0, 0, 2, 12 << 10},
		{"catalogue over the node's label", []gpu.Device{dev("NVIDIA A100 80GB PCIe", 40960)}, 0, 0, 2, 40 << 10},
		{"two H100s", []gpu.Device{dev("NVIDIA H100 80GB HBM3", 0), dev("NVIDIA H100 80GB HBM3", 0)}, 0, 0, 4, 80 << 10},
		{"small GPU: the 8 GiB floor", []gpu.Device{dev("NVIDIA GeForce RTX 3070", 0)}, 0, 0, 2, 8 << 10},
		{"unknown type, memory from the node", []gpu.Device{dev("NVIDIA GPU", 49152)}, 0, 0, 2, 24 << 10},
		{"unknown type and memory", []gpu.Device{dev("NVIDIA GPU", 0)}, 0, 0, 2, 16 << 10},
		{"flags", []gpu.Device{dev("NVIDIA GeForce RTX 4090", 0), dev("NVIDIA GeForce RTX 4090", 0)}, 6, 30, 12, 60 << 10},
		{"no GPU", nil, 0, 0, 0, 0},
	} {
		v, m := gpuRequest(c.devs, c.vcpusPer, c.memPer)
		if v != c.wantVCPUs || m != c.wantMiB {
			t.Errorf("%s: %d vCPUs, %d MiB; want %d, %d", c.name, v, m, c.wantVCPUs, c.wantMiB)
		}
	}
	for _, c := range []struct{ mem, override, want int }{
		{0, 0, 1 << 10},          // memory unknown: the floor
		{1 << 10, 0, 1 << 10},    // half of 1 GiB is below the floor
		{4 << 10, 0, 2 << 10},    // a 2-vCPU cpu3c worker
		{12 << 10, 0, 6 << 10},   // one RTX 4090
		{160 << 10, 0, 32 << 10}, // the cap
		{160 << 10, 100 << 10, 100 << 10},
		{4 << 10, 64, 64},
	} {
		if got := ShmMiB(c.mem, c.override); got != c.want {
			t.Errorf("ShmMiB(%d, %d) = %d, want %d", c.mem, c.override, got, c.want)
		}
	}
}

// TestPodResources: a pod asks for what a worker of its shape would, raised
// to its own per-GPU minimums.
func TestPodResources(t *testing.T) {
	rtx := gpu.Device{TypeID: "NVIDIA GeForce RTX 4090"}
	for _, c := range []struct {
		name               string
		spec               PodSpec
		devs               []gpu.Device
		wantVCPUs, wantMiB int
	}{
		{"CPU pod, RunPod's defaults", PodSpec{ComputeType: "CPU"}, nil, 2, 4 << 10},
		{"CPU pod, 4 vCPUs of cpu3m (8 GB each)", PodSpec{ComputeType: "cpu", VCPUCount: 4, CPUFlavorIDs: []string{"cpu3m"}}, nil, 4, 32 << 10},
		{"GPU pod: a worker's share", PodSpec{}, []gpu.Device{rtx}, 2, 12 << 10},
		{"GPU pod: its minimums per GPU win", PodSpec{ComputeType: "GPU", MinVCPUPerGPU: 8, MinRAMPerGPU: 30}, []gpu.Device{rtx, rtx}, 16, 60 << 10},
		{"GPU pod: minimums below the share", PodSpec{MinVCPUPerGPU: 1, MinRAMPerGPU: 4}, []gpu.Device{rtx}, 2, 12 << 10},
		{"GPU pod on a machine without GPUs", PodSpec{MinVCPUPerGPU: 4}, nil, 0, 0},
	} {
		v, m := podRequest(c.spec, c.devs, 0, 0)
		if v != c.wantVCPUs || m != c.wantMiB {
			t.Errorf("%s: %d vCPUs, %d MiB; want %d, %d", c.name, v, m, c.wantVCPUs, c.wantMiB)
		}
	}
}
