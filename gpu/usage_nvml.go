//go:build cgo && linux

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// SampleSystem reads this machine's GPU usage through NVML.
func SampleSystem() ([]Usage, error) { return Sample(nvml.New()) }

// Sample reads every device's memory use and utilisation from lib.
func Sample(lib nvml.Interface) ([]Usage, error) {
	if err := initLib(lib); err != nil {
		return nil, err
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: count devices: %w", ret)
	}
	out := make([]Usage, 0, n)
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: device %d: handle: %w", i, ret)
		}
		u := Usage{Index: i}
		if u.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: device %d: uuid: %w", i, ret)
		}
		u.Name, _ = h.GetName()
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			u.MemoryUsedBytes, u.MemoryTotalBytes = m.Used, m.Total
		}
		// Utilisation is not supported on every board (some vGPUs): 0.
		if r, ret := h.GetUtilizationRates(); ret == nvml.SUCCESS {
			u.Utilization = float64(r.Gpu) / 100
		}
		out = append(out, u)
	}
	return out, nil
}
