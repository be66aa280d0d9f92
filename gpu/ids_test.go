package gpu

import (
	"strings"
	"testing"
)

func TestCheckID(t *testing.T) {
	for _, c := range []struct {
		id       string
		warn, ok bool
	}{
		{"NVIDIA GeForce RTX 4090", false, true},
		{"GeForce RTX 4090", false, true}, // normalised like an NVML name
		{"AMPERE_16", false, true},
		{"HOPPER_141", false, true},
		{"-NVIDIA RTX A4000", false, true},
		{"QUANTUM_512", true, true},
		{"Acme Tensor 9000", true, true},
		{"", false, false},
		{"-", false, false},
		{"AMPERE_16,ADA_24", false, false},
		{"NVIDIA A40\n", false, false},
		{strings.Repeat("x", 129), false, false},
	} {
		w, err := CheckID(c.id)
		if (err == nil) != c.ok || (w != "") != c.warn {
			t.Errorf("CheckID(%q) = %q, %v; want warning %v, ok %v", c.id, w, err, c.warn, c.ok)
		}
	}
}

func TestMatches(t *testing.T) {
	a4000 := Device{TypeID: "NVIDIA RTX A4000", MemoryMiB: 16376}
	rtx4090 := Device{TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564}
	h100 := Device{TypeID: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}
	odd := Device{TypeID: "NVIDIA Future 48", MemoryMiB: 49140} // not in Models: joins by memory
	for _, c := range []struct {
		ids  []string
		dev  Device
		want bool
	}{
		{nil, a4000, true},
		{[]string{"AMPERE_16"}, a4000, true},
		{[]string{"AMPERE_16", "-NVIDIA RTX A4000"}, a4000, false},
		{SplitIDs("AMPERE_16, -NVIDIA RTX A4000"), a4000, false},
		{[]string{"ADA_24"}, rtx4090, true},
		{[]string{"AMPERE_24"}, rtx4090, false},
		{[]string{"ADA_80_PRO"}, h100, true},
		{[]string{"HOPPER_141"}, h100, false},
		{[]string{"NVIDIA H100 80GB HBM3"}, h100, true},
		{[]string{"-NVIDIA H100 80GB HBM3"}, h100, false},
		{[]string{"-NVIDIA H100 80GB HBM3"}, rtx4090, true},
		{[]string{"AMPERE_48"}, odd, true},
		{[]string{"AMPERE_80"}, odd, false},
		{[]string{"QUANTUM_512"}, a4000, false},
	} {
		if got := Matches(c.ids, c.dev); got != c.want {
			t.Errorf("Matches(%q, %s) = %v, want %v", c.ids, c.dev.TypeID, got, c.want)
		}
	}
}

func TestTableConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Models {
		if seen[m.ID] {
			t.Errorf("model %q listed twice", m.ID)
		}
		seen[m.ID] = true
		if TypeID(m.ID) != m.ID {
			t.Errorf("model %q is not in TypeID's normal form %q", m.ID, TypeID(m.ID))
		}
		if _, ok := LookupPool(m.Pool); m.Pool != "" && !ok {
			t.Errorf("model %q names unknown pool %q", m.ID, m.Pool)
		}
	}
	for _, p := range Pools {
		if !IsPoolID(p.ID) {
			t.Errorf("pool %q does not have the pool id shape", p.ID)
		}
	}
}

func TestAllocatorPools(t *testing.T) {
	a := NewAllocator([]Device{
		{Index: 0, UUID: "GPU-0", TypeID: "NVIDIA RTX A4000", MemoryMiB: 16376},
		{Index: 1, UUID: "GPU-1", TypeID: "NVIDIA RTX A4500", MemoryMiB: 20470},
		{Index: 2, UUID: "GPU-2", TypeID: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564},
	})
	for _, c := range []struct {
		ids  []string
		want string
	}{
		{[]string{"AMPERE_16"}, "NVIDIA RTX A4000,NVIDIA RTX A4500"},
		{[]string{"AMPERE_16", "-NVIDIA RTX A4000"}, "NVIDIA RTX A4500"},
		{[]string{"ADA_24", "AMPERE_16"}, "NVIDIA GeForce RTX 4090,NVIDIA RTX A4000,NVIDIA RTX A4500"},
		{[]string{"-NVIDIA RTX A4000"}, "NVIDIA RTX A4500,NVIDIA GeForce RTX 4090"},
		{[]string{"HOPPER_141"}, ""},
	} {
		if got := strings.Join(a.Resolve(c.ids), ","); got != c.want {
			t.Errorf("Resolve(%q) = %q, want %q", c.ids, got, c.want)
		}
	}
	devs, err := a.Allocate("w1", []string{"AMPERE_16", "-NVIDIA RTX A4000"}, 1)
	if err != nil || devs[0].UUID != "GPU-1" {
		t.Fatalf("Allocate from a pool with an exclusion: %v, %v; want GPU-1", devs, err)
	}
	if _, err := a.Allocate("w2", []string{"HOPPER_141"}, 1); err == nil || !strings.Contains(err.Error(), "HOPPER_141") {
		t.Errorf("Allocate from a pool with no local GPU: %v, want ErrUnknownType naming the pool", err)
	}
}

func TestTypeFromProduct(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA-GeForce-RTX-4090":        "NVIDIA GeForce RTX 4090",
		"NVIDIA-A100-SXM4-80GB":          "NVIDIA A100-SXM4-80GB",
		"NVIDIA-H100-80GB-HBM3":          "NVIDIA H100 80GB HBM3",
		"NVIDIA-L4-SHARED":               "NVIDIA L4",
		"NVIDIA-RTX-4000-Ada-Generation": "NVIDIA RTX 4000 Ada Generation",
		"GeForce-RTX-3090":               "NVIDIA GeForce RTX 3090",
		"A100-SXM-80GB":                  "NVIDIA A100-SXM4-80GB",
		"Tesla-T4":                       "Tesla T4",
		"":                               "",
	} {
		if got := TypeFromProduct(in); got != want {
			t.Errorf("TypeFromProduct(%q) = %q, want %q", in, got, want)
		}
	}
}
