//go:build cgo && linux

package gpu

import (
	"errors"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DiscoverSystem lists the GPUs of this machine through the driver's NVML.
func DiscoverSystem() ([]Device, error) {
	return Discover(nvml.New())
}

// SystemDriverVersion reports the NVIDIA driver version of this machine.
func SystemDriverVersion() (string, error) {
	return DriverVersion(nvml.New())
}

// Discover lists the GPUs that lib reports, ordered by index. It takes an
// nvml.Interface so tests can pass a mock.
func Discover(lib nvml.Interface) ([]Device, error) {
	if err := initLib(lib); err != nil {
		return nil, err
	}
	// NVML counts Init calls; a failed Shutdown only leaks that count, and
	// the devices are already copied out, so its result is not an error.
	defer lib.Shutdown()

	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: count devices: %w", ret)
	}
	devs := make([]Device, 0, n)
	for i := range n {
		d, err := device(lib, i)
		if err != nil {
			return nil, fmt.Errorf("gpu: device %d: %w", i, err)
		}
		devs = append(devs, d)
	}
	sort.SliceStable(devs, func(a, b int) bool { return devs[a].Index < devs[b].Index })
	return devs, nil
}

// DriverVersion reports the driver version that lib sees, e.g. "550.54.15".
func DriverVersion(lib nvml.Interface) (string, error) {
	if err := initLib(lib); err != nil {
		return "", err
	}
	defer lib.Shutdown()
	v, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("gpu: driver version: %w", ret)
	}
	return v, nil
}

// initLib maps "no driver on this machine" to ErrUnavailable, keeping the
// NVML code in the chain; other failures (e.g. permissions) stay distinct
// because they point at a broken install rather than a CPU-only host.
func initLib(lib nvml.Interface) error {
	ret := lib.Init()
	switch ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: init: %w", ErrUnavailable, ret)
	default:
		return fmt.Errorf("gpu: NVML init: %w", ret)
	}
}

func device(lib nvml.Interface, i int) (Device, error) {
	h, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("handle: %w", ret)
	}
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("uuid: %w", ret)
	}
	if uuid == "" {
		// Containers are pinned by UUID; without one the GPU cannot be
		// handed out safely.
		return Device{}, errors.New("empty uuid")
	}
	name, ret := h.GetName()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("name: %w", ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("memory: %w", ret)
	}
	pci, ret := h.GetPciInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("pci info: %w", ret)
	}
	return Device{
		// The handle for index i is NVML device i.
		Index:     i,
		UUID:      uuid,
		Name:      name,
		TypeID:    TypeID(name),
		MemoryMiB: mem.Total / (1 << 20),
		PCIBusID:  busID(pci),
	}, nil
}

// busID reads the NUL-terminated bus id, falling back to the legacy field.
// It may be empty (the go-nvml mocks fill neither); the UUID is what matters.
func busID(p nvml.PciInfo) string {
	if s := cString(p.BusId[:]); s != "" {
		return s
	}
	return cString(p.BusIdLegacy[:])
}

func cString[T ~int8 | ~uint8](b []T) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
