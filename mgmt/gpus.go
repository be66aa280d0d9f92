package mgmt

import (
	"slices"

	"berth/gpu"
)

// GPUType is one GPU type of the catalogue the APIs show: RunPod's types
// (gpu.Models) and this host's boards, with what the price table charges.
type GPUType struct {
	gpu.Model         // ID, architecture, memory, serverless pool
	Known     bool    // in gpu.Models (else a local board RunPod does not list)
	Total     int     // this host's boards of the type
	Free      int     // of those, held by no worker or pod
	Price     float64 // per GPU-hour from the price table; 0 when unpriced, as billing counts it
}

// GPUCatalogue lists this host's types first, in device order, then the
// rest of RunPod's. A local board missing from gpu.Models is listed under
// its own id with its memory.
func GPUCatalogue(devs []gpu.Status, prices Prices) []GPUType {
	total, free, mem := map[string]int{}, map[string]int{}, map[string]uint64{}
	var order []string
	for _, d := range devs {
		id := d.TypeID
		if id == "" {
			id = gpu.TypeID(d.Name)
		}
		if total[id] == 0 {
			order = append(order, id)
		}
		total[id]++
		if d.Holder == "" {
			free[id]++
		}
		mem[id] = d.MemoryMiB
	}
	for _, m := range gpu.Models {
		if !slices.Contains(order, m.ID) {
			order = append(order, m.ID)
		}
	}
	out := make([]GPUType, 0, len(order))
	for _, id := range order {
		m, known := gpu.LookupModel(id)
		if !known {
			m = gpu.Model{ID: id, MemoryGB: int((mem[id] + 1023) / 1024)}
		}
		out = append(out, GPUType{Model: m, Known: known, Total: total[id], Free: free[id], Price: prices.GPUHourly[id]})
	}
	return out
}

// Stock is how available n boards of the type are: "" (the host has
// fewer), LOW (none free), MEDIUM (under half free) or HIGH.
func (g GPUType) Stock(n int) string {
	switch {
	case g.Total < max(n, 1):
		return ""
	case g.Free < max(n, 1):
		return "LOW"
	case g.Free*2 < g.Total:
		return "MEDIUM"
	}
	return "HIGH"
}
