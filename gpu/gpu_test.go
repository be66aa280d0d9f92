package gpu

import (
	"encoding/json"
	"testing"
)

func TestTypeID(t *testing.T) {
	tests := []struct {
		nvml, want string
	}{
		{"NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"},
		{"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"},
		{"Mock NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"},
		{"Tesla V100-SXM2-16GB", "Tesla V100-SXM2-16GB"},
		{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"},
		{"NVIDIA RTX A6000", "NVIDIA RTX A6000"},
		{"NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"},
		{"NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX 6000 Ada Generation"},
		{"Tesla T4", "Tesla T4"},
		{"AMD Instinct MI300X OAM", "AMD Instinct MI300X OAM"},
		// older drivers left out the brand
		{"GeForce RTX 3090", "NVIDIA GeForce RTX 3090"},
		{"A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"},
		{"A100-SXM-80GB", "NVIDIA A100-SXM4-80GB"},
		// whitespace
		{"  NVIDIA   RTX  A4500 ", "NVIDIA RTX A4500"},
		{"NVIDIA\tL40S\n", "NVIDIA L40S"},
		{"Mock  GeForce RTX 3090", "NVIDIA GeForce RTX 3090"},
		{"", ""},
		{"   ", ""},
	}
	for _, tt := range tests {
		if got := TypeID(tt.nvml); got != tt.want {
			t.Errorf("TypeID(%q) = %q, want %q", tt.nvml, got, tt.want)
		}
	}
}

func TestDeviceJSON(t *testing.T) {
	d := Device{Index: 1, UUID: "GPU-1", Name: "NVIDIA A40", TypeID: "NVIDIA A40", MemoryMiB: 46068, PCIBusID: "00000000:01:00.0"}
	b, err := json.Marshal(Status{Device: d, Holder: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"index":1,"uuid":"GPU-1","name":"NVIDIA A40","gpuTypeId":"NVIDIA A40","memoryInMiB":46068,"pciBusId":"00000000:01:00.0","holder":"w1"}`
	if string(b) != want {
		t.Errorf("json:\n got %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(Status{Device: d})
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if h, ok := m["holder"]; !ok || h != "" {
		t.Errorf("free device: holder = %v (present %v), want \"\"", h, ok)
	}
}
