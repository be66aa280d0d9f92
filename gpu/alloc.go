package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Allocation errors. Callers test them with errors.Is; the wrapped messages
// say what was asked and what is free.
var (
	// ErrNoCapacity: the requested types exist but too few are free now.
	ErrNoCapacity = errors.New("gpu: not enough free GPUs")
	// ErrUnknownType: none of the requested types exist on this machine, so
	// waiting will not help.
	ErrUnknownType = errors.New("gpu: no GPU of the requested types on this machine")
	// ErrAlreadyHeld: the holder already has GPUs, or a GPU belongs to
	// another holder.
	ErrAlreadyHeld = errors.New("gpu: already held")
	// ErrUnknownDevice: a UUID that is not one of this machine's GPUs.
	ErrUnknownDevice = errors.New("gpu: unknown device")
)

// Status is a device with its current holder ("" when free).
type Status struct {
	Device
	Holder string `json:"holder"`
}

// Allocator hands out whole GPUs exclusively to holders (workers). It is safe
// for concurrent use.
type Allocator struct {
	mu     sync.Mutex
	devs   []Device       // ordered by Index
	holder []string       // holder[i] owns devs[i]; "" is free
	byUUID map[string]int // UUID -> position in devs
	types  []string       // distinct TypeIDs, by lowest index
	sample []Device       // sample[i] is a device of types[i]

	// A cluster's accounting (SetCluster); cluster is false on a machine.
	cluster  bool
	uses     []Use                   // the cluster's last word
	reported map[string]bool         // holders its uses name
	prov     map[string]*provisional // given by Allocate or Restore, not in uses yet
	seq      int64
}

// NewAllocator tracks devs, all free. The slice is copied.
func NewAllocator(devs []Device) *Allocator {
	a := &Allocator{}
	a.setLocked(devs, nil)
	return a
}

// SetDevices replaces the devices (a cluster's nodes came or went). A
// device that stays keeps its holder; the GPUs of a device that went are
// no longer anyone's.
func (a *Allocator) SetDevices(devs []Device) {
	a.mu.Lock()
	defer a.mu.Unlock()
	held := map[string]string{}
	for i, d := range a.devs {
		if a.holder[i] != "" {
			held[d.UUID] = a.holder[i]
		}
	}
	a.setLocked(devs, held)
}

func (a *Allocator) setLocked(devs []Device, held map[string]string) {
	a.devs = slices.Clone(devs)
	a.byUUID = make(map[string]int, len(devs))
	a.types, a.sample = nil, nil
	slices.SortStableFunc(a.devs, func(x, y Device) int { return x.Index - y.Index })
	a.holder = make([]string, len(a.devs))
	for i, d := range a.devs {
		a.byUUID[d.UUID] = i
		a.holder[i] = held[d.UUID]
		if !slices.Contains(a.types, d.TypeID) {
			a.types = append(a.types, d.TypeID)
			a.sample = append(a.sample, d)
		}
	}
}

// Allocate gives holder count free GPUs, all of one type and on one node.
// typeIDs are tried in order and the first type with count free GPUs on a
// node wins; an empty list means any type, tried in the order of Types.
// Within a type the lowest indexes go first (the node of the lowest free
// index that has enough), so allocation is deterministic.
func (a *Allocator) Allocate(holder string, typeIDs []string, count int) ([]Device, error) {
	if holder == "" {
		return nil, errors.New("gpu: allocate: empty holder")
	}
	if count < 1 {
		return nil, fmt.Errorf("gpu: allocate %d GPUs for %s: count must be at least 1", count, holder)
	}

	a.mu.Lock()
	defer a.mu.Unlock()

	if slices.Contains(a.holder, holder) {
		return nil, fmt.Errorf("%w: %s already holds GPUs; release them first", ErrAlreadyHeld, holder)
	}
	want := a.known(typeIDs)
	if len(want) == 0 {
		asked := "any type"
		if len(typeIDs) > 0 {
			asked = describeTypes(typeIDs)
		}
		return nil, fmt.Errorf("%w: %s asked for %s; this machine has %s",
			ErrUnknownType, holder, asked, describeTypes(a.types))
	}
	for _, t := range want {
		for _, free := range a.freeByNode(t) {
			if len(free) < count {
				continue
			}
			out := make([]Device, count)
			for i, pos := range free[:count] {
				a.holder[pos] = holder
				out[i] = a.devs[pos]
			}
			a.remember(holder, t, out)
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w: %s wants %d × %s; free: %s",
		ErrNoCapacity, holder, count, describeTypes(want), a.describeFree(want))
}

// Fit reports how many holders could each be given count GPUs of one of
// typeIDs (as Allocate chooses them) from the GPUs free now, and describes
// one such request and what is free, e.g. `1 × "NVIDIA L4"; free: "NVIDIA
// L4" 0 of 2`, for a status that says why work waits.
func (a *Allocator) Fit(typeIDs []string, count int) (int, string) {
	count = max(count, 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	want := a.known(typeIDs)
	n := 0
	for _, t := range want {
		for _, free := range a.freeByNode(t) {
			n += len(free) / count
		}
	}
	return n, fmt.Sprintf("%d × %s; free: %s", count, describeTypes(want), a.describeFree(want))
}

// Release frees every GPU of holder. Releasing twice, or a holder that has
// nothing, is a no-op.
func (a *Allocator) Release(holder string) {
	if holder == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.prov, holder)
	for i, h := range a.holder {
		if h == holder {
			a.holder[i] = ""
		}
	}
}

// Restore marks GPUs as held by holder, e.g. after a restart, from the
// labels of containers that are still running. It changes nothing unless
// every UUID is known and free or already held by holder. On a cluster
// (SetCluster) it never refuses: the holder's Pod exists, so its GPUs are
// the cluster's to count and the scheduler's to arbitrate.
func (a *Allocator) Restore(holder string, uuids []string) error {
	if holder == "" {
		return errors.New("gpu: restore: empty holder")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cluster {
		a.restoreClusterLocked(holder, uuids)
		return nil
	}
	pos := make([]int, 0, len(uuids))
	for _, u := range uuids {
		i, ok := a.byUUID[u]
		if !ok {
			return fmt.Errorf("gpu: restore %s: %w %q", holder, ErrUnknownDevice, u)
		}
		if h := a.holder[i]; h != "" && h != holder {
			return fmt.Errorf("gpu: restore %s: %w: %s (index %d) belongs to %s",
				holder, ErrAlreadyHeld, u, a.devs[i].Index, h)
		}
		pos = append(pos, i)
	}
	for _, i := range pos {
		a.holder[i] = holder
	}
	return nil
}

// Snapshot lists every device with its holder, ordered by index.
func (a *Allocator) Snapshot() []Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Status, len(a.devs))
	for i, d := range a.devs {
		out[i] = Status{Device: d, Holder: a.holder[i]}
	}
	return out
}

// Free counts the free devices of a type.
func (a *Allocator) Free(typeID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.freeOf(TypeID(typeID)))
}

// Types lists the distinct gpuTypeIds on this machine, in the order of their
// lowest device index.
func (a *Allocator) Types() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.types)
}

// Resolve returns the local gpuTypeIds that ids (type ids, pool ids and
// "-" exclusions, see Matches) select, in the order asked and without
// duplicates; all types when ids holds no inclusion.
func (a *Allocator) Resolve(ids []string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.known(ids)
}

func (a *Allocator) known(typeIDs []string) []string {
	var out []string
	add := func(i int) {
		if Matches(typeIDs, a.sample[i]) && !slices.Contains(out, a.types[i]) {
			out = append(out, a.types[i])
		}
	}
	for _, id := range typeIDs {
		if strings.HasPrefix(id, "-") {
			continue
		}
		for i, t := range a.types {
			if Matches([]string{id}, a.sample[i]) || TypeID(id) == t {
				add(i)
			}
		}
	}
	if slices.ContainsFunc(typeIDs, func(id string) bool { return !strings.HasPrefix(id, "-") }) {
		return out
	}
	for i := range a.types {
		add(i)
	}
	return out
}

// freeOf returns positions of free devices of type t, lowest index first.
// The caller holds a.mu.
func (a *Allocator) freeOf(t string) []int {
	var out []int
	for i, d := range a.devs {
		if d.TypeID == t && a.holder[i] == "" && !d.Unschedulable {
			out = append(out, i)
		}
	}
	return out
}

// freeByNode groups freeOf(t) by node, the nodes in the order of their
// lowest free index. The caller holds a.mu.
func (a *Allocator) freeByNode(t string) [][]int {
	var out [][]int
	at := map[string]int{}
	for _, pos := range a.freeOf(t) {
		n := a.devs[pos].Node
		i, ok := at[n]
		if !ok {
			i = len(out)
			at[n] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], pos)
	}
	return out
}

func (a *Allocator) describeFree(types []string) string {
	parts := make([]string, len(types))
	for i, t := range types {
		total := 0
		for _, d := range a.devs {
			if d.TypeID == t {
				total++
			}
		}
		parts[i] = fmt.Sprintf("%q %d of %d", t, len(a.freeOf(t)), total)
	}
	return strings.Join(parts, ", ")
}

func describeTypes(types []string) string {
	if len(types) == 0 {
		return "no GPUs"
	}
	q := make([]string, len(types))
	for i, t := range types {
		q[i] = fmt.Sprintf("%q", t)
	}
	return strings.Join(q, " or ")
}
