package gpu

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// RunPod's GPU ids, in one table: the gpuTypeIds it names boards by and the
// pool ids its serverless endpoints ask for ("AMPERE_16"), with "-" before
// a type id excluding it from a pool ("AMPERE_16,-NVIDIA RTX A4000", as
// runpod-python's gpuIds sends them). The allocator and the management
// validation both read it; docs/management.md shows it.

// Model is one RunPod GPU type.
type Model struct {
	ID       string // RunPod gpuTypeId, e.g. "NVIDIA GeForce RTX 4090"
	Arch     string // Turing, Ampere, Ada, Hopper, Blackwell, CDNA3, Volta
	MemoryGB int
	Pool     string // the serverless pool it belongs to; "" for none
}

// Pool is a RunPod serverless GPU pool: boards of one class and memory.
type Pool struct {
	ID       string
	Arch     string
	MemoryGB int
}

// Pools are RunPod's serverless GPU pools.
var Pools = []Pool{
	{"AMPERE_16", "Ampere", 16},
	{"AMPERE_24", "Ampere", 24},
	{"ADA_24", "Ada", 24},
	{"ADA_32_PRO", "Blackwell", 32},
	{"AMPERE_48", "Ampere", 48},
	{"ADA_48_PRO", "Ada", 48},
	{"AMPERE_80", "Ampere", 80},
	{"ADA_80_PRO", "Hopper", 80},
	{"HOPPER_141", "Hopper", 141},
	{"BLACKWELL_96", "Blackwell", 96},
	{"BLACKWELL_180", "Blackwell", 180},
}

// Models are the gpuTypeIds of RunPod's OpenAPI documents (v1.json
// GPUTypeId and the billing filter), with their pool.
var Models = []Model{
	{"NVIDIA RTX A4000", "Ampere", 16, "AMPERE_16"},
	{"NVIDIA RTX A4500", "Ampere", 20, "AMPERE_16"},
	{"NVIDIA RTX 4000 Ada Generation", "Ada", 20, "AMPERE_16"},
	{"NVIDIA RTX 4000 SFF Ada Generation", "Ada", 20, "AMPERE_16"},
	{"NVIDIA RTX 2000 Ada Generation", "Ada", 16, "AMPERE_16"},
	{"NVIDIA RTX A5000", "Ampere", 24, "AMPERE_24"},
	{"NVIDIA L4", "Ada", 24, "AMPERE_24"},
	{"NVIDIA GeForce RTX 3090", "Ampere", 24, "AMPERE_24"},
	{"NVIDIA GeForce RTX 3090 Ti", "Ampere", 24, ""},
	{"NVIDIA GeForce RTX 4090", "Ada", 24, "ADA_24"},
	{"NVIDIA GeForce RTX 5090", "Blackwell", 32, "ADA_32_PRO"},
	{"NVIDIA RTX A6000", "Ampere", 48, "AMPERE_48"},
	{"NVIDIA A40", "Ampere", 48, "AMPERE_48"},
	{"NVIDIA L40", "Ada", 48, "ADA_48_PRO"},
	{"NVIDIA L40S", "Ada", 48, "ADA_48_PRO"},
	{"NVIDIA RTX 6000 Ada Generation", "Ada", 48, "ADA_48_PRO"},
	{"NVIDIA A100 80GB PCIe", "Ampere", 80, "AMPERE_80"},
	{"NVIDIA A100-SXM4-80GB", "Ampere", 80, "AMPERE_80"},
	{"NVIDIA H100 80GB HBM3", "Hopper", 80, "ADA_80_PRO"},
	{"NVIDIA H100 PCIe", "Hopper", 80, "ADA_80_PRO"},
	{"NVIDIA H100 NVL", "Hopper", 94, "ADA_80_PRO"},
	{"NVIDIA H200", "Hopper", 141, "HOPPER_141"},
	{"NVIDIA H200 NVL", "Hopper", 141, "HOPPER_141"},
	{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "Blackwell", 96, "BLACKWELL_96"},
	{"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "Blackwell", 96, "BLACKWELL_96"},
	{"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "Blackwell", 96, "BLACKWELL_96"},
	{"NVIDIA B200", "Blackwell", 180, "BLACKWELL_180"},
	{"NVIDIA A100-SXM4-40GB", "Ampere", 40, ""},
	{"NVIDIA A30", "Ampere", 24, ""},
	{"NVIDIA RTX A2000", "Ampere", 12, ""},
	{"NVIDIA RTX 5000 Ada Generation", "Ada", 32, ""},
	{"NVIDIA A5000 Ada", "Ada", 32, ""},
	{"NVIDIA GeForce RTX 3080", "Ampere", 10, ""},
	{"NVIDIA GeForce RTX 3080 Ti", "Ampere", 12, ""},
	{"NVIDIA GeForce RTX 3070", "Ampere", 8, ""},
	{"NVIDIA GeForce RTX 4080", "Ada", 16, ""},
	{"NVIDIA GeForce RTX 4080 SUPER", "Ada", 16, ""},
	{"NVIDIA GeForce RTX 4070 Ti", "Ada", 12, ""},
	{"NVIDIA GeForce RTX 5080", "Blackwell", 16, ""},
	{"Tesla V100-PCIE-16GB", "Volta", 16, ""},
	{"Tesla V100-FHHL-16GB", "Volta", 16, ""},
	{"Tesla V100-SXM2-16GB", "Volta", 16, ""},
	{"Tesla V100-PCIE-32GB", "Volta", 32, ""},
	{"Tesla V100-SXM2-32GB", "Volta", 32, ""},
	{"Tesla T4", "Turing", 16, ""},
	{"AMD Instinct MI300X OAM", "CDNA3", 192, ""},
}

// LookupModel finds a gpuTypeId (normalised with TypeID) in Models.
func LookupModel(id string) (Model, bool) {
	id = TypeID(id)
	i := slices.IndexFunc(Models, func(m Model) bool { return m.ID == id })
	if i < 0 {
		return Model{}, false
	}
	return Models[i], true
}

// LookupPool finds a pool id in Pools.
func LookupPool(id string) (Pool, bool) {
	i := slices.IndexFunc(Pools, func(p Pool) bool { return p.ID == id })
	if i < 0 {
		return Pool{}, false
	}
	return Pools[i], true
}

var poolRe = regexp.MustCompile(`^[A-Z]+_[0-9]+(_[A-Z]+)?$`)

// IsPoolID reports whether id has the shape of a pool id ("ADA_24"),
// known or not.
func IsPoolID(id string) bool { return poolRe.MatchString(id) }

// SplitIDs splits a comma-joined id list ("AMPERE_16,-NVIDIA RTX A4000"),
// trimming blanks and dropping empty parts.
func SplitIDs(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// CheckID checks one entry of a gpuTypeIds/gpuIds list: a type id, a pool
// id, or either with a leading "-" (an exclusion). It returns a warning for
// an id that is well formed but not in the table, and an error for a
// malformed one (empty, a control character or a comma, over 128 bytes).
func CheckID(id string) (warning string, err error) {
	name := strings.TrimPrefix(id, "-")
	switch {
	case strings.TrimSpace(name) == "":
		return "", fmt.Errorf("%q is not a GPU type or pool id", id)
	case len(name) > 128:
		return "", fmt.Errorf("%q is longer than 128 bytes", id)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ',' }):
		return "", fmt.Errorf("%q holds a comma or a control character", id)
	}
	if IsPoolID(name) {
		if _, ok := LookupPool(name); !ok {
			return fmt.Sprintf("GPU pool %q is not one Berth knows; it matches no GPU", name), nil
		}
		return "", nil
	}
	if strings.EqualFold(name, "CPU") {
		return fmt.Sprintf("%q is not a GPU type: it matches no GPU; a CPU endpoint or pod is computeType CPU (REST) or instanceIds (GraphQL)", name), nil
	}
	if _, ok := LookupModel(name); !ok {
		return fmt.Sprintf("GPU type %q is not one Berth knows; it matches only a local GPU of that exact name", name), nil
	}
	return "", nil
}

// Matches reports whether device d is one of ids: a gpuTypeId naming it,
// or a pool holding its model (a local board missing from Models joins a
// pool of its memory size, within 2 GB),
// and no "-" entry excluding its type. Only exclusions, or no ids, match
// every device not excluded.
func Matches(ids []string, d Device) bool {
	t := d.TypeID
	if t == "" {
		t = TypeID(d.Name)
	}
	included, positive := false, false
	for _, id := range ids {
		if ex, ok := strings.CutPrefix(id, "-"); ok {
			if TypeID(ex) == t {
				return false
			}
			continue
		}
		positive = true
		if IsPoolID(id) {
			included = included || inPool(id, t, d.MemoryMiB)
		} else if TypeID(id) == t {
			included = true
		}
	}
	return included || !positive
}

func inPool(pool, typeID string, memMiB uint64) bool {
	if m, ok := LookupModel(typeID); ok {
		return m.Pool == pool
	}
	p, ok := LookupPool(pool)
	if !ok {
		return false
	}
	gb := int((memMiB + 512) / 1024)
	return gb >= p.MemoryGB-2 && gb <= p.MemoryGB+2
}

// TypeFromProduct maps the nvidia.com/gpu.product label NVIDIA's GPU
// Feature Discovery puts on a Kubernetes node — the NVML name with spaces
// as dashes ("NVIDIA-GeForce-RTX-4090", "NVIDIA-A100-SXM4-80GB"), with
// "-SHARED" appended under time-slicing — to RunPod's gpuTypeId by the same
// table as NVML names. An unknown product keeps its name, spaces restored.
func TypeFromProduct(product string) string {
	p := strings.TrimSuffix(strings.TrimSpace(product), "-SHARED")
	if p == "" {
		return ""
	}
	canon := func(s string) string {
		return strings.ToLower(strings.NewReplacer(" ", "-", "_", "-").Replace(s))
	}
	for _, name := range []string{p, "NVIDIA-" + p} {
		for _, m := range Models {
			if canon(m.ID) == canon(name) {
				return m.ID
			}
		}
		for alias, id := range typeAliases {
			if canon(alias) == canon(name) {
				return id
			}
		}
	}
	return TypeID(strings.ReplaceAll(p, "-", " "))
}

// CPUMemoryPerVCPU is the memory in GB a CPU flavour (a RunPod compute id
// such as "cpu3c") gives each vCPU, as RunPod's flavours do: 2 for compute
// ("c"), 4 for general ("g"), 8 for memory ("m"). It lives with the GPU ids
// because both the management rules and the runtime read it, and neither
// may import the other.
func CPUMemoryPerVCPU(flavor string) int {
	switch {
	case strings.HasSuffix(flavor, "c"):
		return 2
	case strings.HasSuffix(flavor, "m"):
		return 8
	}
	return 4
}
