//go:build cgo && linux

package httpapi_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"berth/gpu"
	"berth/internal/apitest"
)

// GPU series come from NVML at scrape time (go-nvml's DGX A100 mock here).
func TestMetricsGPUSeries(t *testing.T) {
	lib := dgxa100.New()
	for i, d := range lib.Devices {
		md := d.(*dgxa100.Device)
		md.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(i * 10)}, nvml.SUCCESS
		}
	}
	e := newMetricsEnv(t, func(e *apitest.Env) {
		e.Cfg.GPUUsage = func() ([]gpu.Usage, error) { return gpu.Sample(lib) }
	})
	text := e.scrape()
	uuid := lib.Devices[3].(*dgxa100.Device).UUID
	if v := metric(text, "berth_gpu_utilization_ratio", "gpu", "3", "uuid", uuid); v != 0.3 {
		t.Errorf("utilisation of GPU 3: %v", v)
	}
	if v := metric(text, "berth_gpu_memory_total_bytes", "gpu", "0"); v != 40960*1024*1024 {
		t.Errorf("memory total: %v\n", v)
	}
	if v := metric(text, "berth_gpu_memory_used_bytes", "gpu", "7"); v < 0 {
		t.Errorf("no memory used series")
	}
}
