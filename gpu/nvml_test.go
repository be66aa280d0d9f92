//go:build cgo && linux

package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// mockServer returns a DGX A100 mock whose devices report their bus ids
// (the mock keeps them in a field that GetPciInfo leaves out), and counts of
// Init and Shutdown calls.
func mockServer(t *testing.T) (s *dgxa100.Server, inits, shutdowns *int) {
	t.Helper()
	s = dgxa100.New()
	inits, shutdowns = new(int), new(int)
	s.InitFunc = func() nvml.Return { *inits++; return nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { *shutdowns++; return nvml.SUCCESS }
	for _, d := range s.Devices {
		md := d.(*dgxa100.Device)
		md.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for i, c := range []byte(md.PciBusID) {
				p.BusId[i] = int8(c)
			}
			return p, nvml.SUCCESS
		}
	}
	return s, inits, shutdowns
}

func mockDevice(s *dgxa100.Server, i int) *dgxa100.Device {
	return s.Devices[i].(*dgxa100.Device)
}

func TestDiscoverDGXA100(t *testing.T) {
	s, inits, shutdowns := mockServer(t)
	devs, err := Discover(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 8 {
		t.Fatalf("got %d devices, want 8", len(devs))
	}
	for i, d := range devs {
		want := Device{
			Index:     i,
			UUID:      mockDevice(s, i).UUID,
			Name:      "Mock NVIDIA A100-SXM4-40GB",
			TypeID:    "NVIDIA A100-SXM4-40GB",
			MemoryMiB: 40960,
			PCIBusID:  fmt.Sprintf("0000:%02x:00.0", i),
		}
		if d != want {
			t.Errorf("device %d:\n got %+v\nwant %+v", i, d, want)
		}
	}
	if *inits != 1 || *shutdowns != 1 {
		t.Errorf("Init %d times, Shutdown %d times; want 1 and 1", *inits, *shutdowns)
	}
}

func TestDiscoverPlainMockHasNoBusID(t *testing.T) {
	devs, err := Discover(dgxa100.New())
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 8 || devs[0].PCIBusID != "" || !strings.HasPrefix(devs[0].UUID, "GPU-") {
		t.Errorf("devices[0] = %+v", devs[0])
	}
}

func TestDiscoverErrors(t *testing.T) {
	tests := []struct {
		name         string
		mutate       func(s *dgxa100.Server)
		want         []error // all must match with errors.Is
		notWant      error
		wantText     string
		wantShutdown int
	}{
		{
			name:   "no driver library",
			mutate: func(s *dgxa100.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND } },
			want:   []error{ErrUnavailable, nvml.ERROR_LIBRARY_NOT_FOUND},
		},
		{
			name:   "driver not loaded",
			mutate: func(s *dgxa100.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED } },
			want:   []error{ErrUnavailable, nvml.ERROR_DRIVER_NOT_LOADED},
		},
		{
			name:    "no permission is not a CPU-only host",
			mutate:  func(s *dgxa100.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_NO_PERMISSION } },
			want:    []error{nvml.ERROR_NO_PERMISSION},
			notWant: ErrUnavailable,
		},
		{
			name: "count fails",
			mutate: func(s *dgxa100.Server) {
				s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
			},
			want:         []error{nvml.ERROR_UNKNOWN},
			wantText:     "count devices",
			wantShutdown: 1,
		},
		{
			name: "uuid fails on device 3",
			mutate: func(s *dgxa100.Server) {
				mockDevice(s, 3).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
			},
			want:         []error{nvml.ERROR_GPU_IS_LOST},
			wantText:     "device 3: uuid",
			wantShutdown: 1,
		},
		{
			name: "empty uuid",
			mutate: func(s *dgxa100.Server) {
				mockDevice(s, 5).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.SUCCESS }
			},
			wantText:     "device 5: empty uuid",
			wantShutdown: 1,
		},
		{
			name: "memory fails",
			mutate: func(s *dgxa100.Server) {
				mockDevice(s, 0).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED }
			},
			want:         []error{nvml.ERROR_NOT_SUPPORTED},
			wantText:     "device 0: memory",
			wantShutdown: 1,
		},
		{
			name: "handle fails",
			mutate: func(s *dgxa100.Server) {
				s.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_INVALID_ARGUMENT }
			},
			want:         []error{nvml.ERROR_INVALID_ARGUMENT},
			wantText:     "device 0: handle",
			wantShutdown: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, shutdowns := mockServer(t)
			tt.mutate(s)
			devs, err := Discover(s)
			if err == nil {
				t.Fatalf("got %d devices, want an error", len(devs))
			}
			if devs != nil {
				t.Errorf("devices %v returned with error", devs)
			}
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Errorf("err = %v; errors.Is(%v) = false", err, w)
				}
			}
			if tt.notWant != nil && errors.Is(err, tt.notWant) {
				t.Errorf("err = %v; must not be %v", err, tt.notWant)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantText)
			}
			if *shutdowns != tt.wantShutdown {
				t.Errorf("Shutdown called %d times, want %d", *shutdowns, tt.wantShutdown)
			}
		})
	}
}

func TestDriverVersion(t *testing.T) {
	s, inits, shutdowns := mockServer(t)
	v, err := DriverVersion(s)
	if err != nil || v != "550.54.15" {
		t.Errorf("DriverVersion = %q, %v; want 550.54.15", v, err)
	}
	if *inits != 1 || *shutdowns != 1 {
		t.Errorf("Init %d, Shutdown %d; want 1 and 1", *inits, *shutdowns)
	}

	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	if _, err := DriverVersion(s); !errors.Is(err, ErrUnavailable) {
		t.Errorf("without library: err = %v, want ErrUnavailable", err)
	}
}

func TestDiscoverThenAllocate(t *testing.T) {
	s, _, _ := mockServer(t)
	devs, err := Discover(s)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAllocator(devs)
	const a100_40 = "NVIDIA A100-SXM4-40GB"
	if got := a.Types(); len(got) != 1 || got[0] != a100_40 {
		t.Fatalf("Types() = %q", got)
	}
	got, err := a.Allocate("w1", []string{"NVIDIA H100 80GB HBM3", a100_40}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].UUID != mockDevice(s, 0).UUID || got[1].UUID != mockDevice(s, 1).UUID {
		t.Errorf("allocated %v, want devices 0 and 1", got)
	}
	if _, err := a.Allocate("w2", []string{a100_40}, 7); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("7 of 6 free: err = %v, want ErrNoCapacity", err)
	}
	if n := a.Free(a100_40); n != 6 {
		t.Errorf("Free = %d, want 6", n)
	}
}

// TestDiscoverSystem runs against the real driver: on a host without one it
// must report ErrUnavailable rather than fail or panic.
func TestDiscoverSystem(t *testing.T) {
	devs, err := DiscoverSystem()
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want nil or ErrUnavailable", err)
		}
		t.Logf("no NVML here: %v", err)
		return
	}
	t.Logf("found %d GPUs: %+v", len(devs), devs)
	v, err := SystemDriverVersion()
	if err != nil {
		t.Errorf("SystemDriverVersion: %v", err)
	}
	t.Logf("driver %s", v)
}

func TestBusID(t *testing.T) {
	set := func(dst []int8, s string) {
		for i, c := range []byte(s) {
			dst[i] = int8(c)
		}
	}
	var both, legacy nvml.PciInfo
	set(both.BusId[:], "00000000:3B:00.0")
	set(both.BusIdLegacy[:], "0000:3B:00.0")
	set(legacy.BusIdLegacy[:], "0000:3B:00.0")
	var full nvml.PciInfo // no NUL at all
	for i := range full.BusId {
		full.BusId[i] = 'a'
	}
	tests := []struct {
		name string
		in   nvml.PciInfo
		want string
	}{
		{"bus id", both, "00000000:3B:00.0"},
		{"legacy only", legacy, "0000:3B:00.0"},
		{"none", nvml.PciInfo{}, ""},
		{"not terminated", full, strings.Repeat("a", 32)},
	}
	for _, tt := range tests {
		if got := busID(tt.in); got != tt.want {
			t.Errorf("%s: busID = %q, want %q", tt.name, got, tt.want)
		}
	}
}
