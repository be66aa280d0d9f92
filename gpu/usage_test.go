//go:build cgo && linux

package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestSampleReadsMemoryAndUtilisation(t *testing.T) {
	s, inits, shutdowns := mockServer(t)
	for i := range s.Devices {
		d := mockDevice(s, i)
		used := uint64(i+1) << 30
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 40 << 30, Used: used, Free: 40<<30 - used}, nvml.SUCCESS
		}
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			if i == 7 {
				return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.Utilization{Gpu: uint32(10 * i)}, nvml.SUCCESS
		}
	}
	us, err := Sample(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 8 || *inits != 1 || *shutdowns != 1 {
		t.Fatalf("%d devices, %d inits, %d shutdowns", len(us), *inits, *shutdowns)
	}
	for i, u := range us {
		wantUtil := float64(10*i) / 100
		if i == 7 {
			wantUtil = 0 // not supported: reported as idle
		}
		if u.Index != i || u.UUID != mockDevice(s, i).UUID || u.MemoryTotalBytes != 40<<30 || u.MemoryUsedBytes != uint64(i+1)<<30 || u.Utilization != wantUtil {
			t.Errorf("device %d: %+v", i, u)
		}
	}
}

func TestSampleWithoutDriver(t *testing.T) {
	s, _, _ := mockServer(t)
	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	if _, err := Sample(s); err == nil {
		t.Fatal("no error without a driver")
	}
}
