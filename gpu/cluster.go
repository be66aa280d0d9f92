package gpu

import (
	"slices"
	"sort"
)

// On a cluster the scheduler places and the allocator only accounts: what
// is held is derived, at every change, from the Pods that exist (Use), not
// remembered. A node that is cordoned, goes NotReady or disappears for a
// moment therefore never makes a GPU count twice: the Pods bound to it
// still hold theirs when it is back, and the slots they hold were never
// handed out meanwhile (an unschedulable node's slots are not given; a
// missing node's are not listed).

// HolderOther holds the GPUs that other workloads' Pods request.
const HolderOther = "(other workloads)"

// Use is a Pod holding GPUs of a cluster, as the cluster says.
type Use struct {
	// Holder is Berth's worker or pod; "" for another workload.
	Holder string
	// Node is where the scheduler bound the Pod; "" while it waits.
	Node string
	// TypeID is the GPU type a waiting Pod of Berth asks for.
	TypeID string
	Count  int
	// Slots are the slot ids Berth chose for it: kept when they still
	// fit, so a holder's slots do not move at every change.
	Slots []string
}

// provisional is what Allocate (or Restore) gave a holder whose Pod the
// cluster has not reported yet.
type provisional struct {
	typeID string
	count  int
	slots  []string
	seq    int64
}

// SetCluster replaces the devices (one per GPU slot of each node, those
// of unschedulable nodes marked) and the uses (every Pod that holds or
// waits for GPUs), and recomputes every slot's holder from them:
//
//  1. a bound Pod holds Count slots of its node (its own Slots first;
//     nothing when the node is not listed);
//  2. a waiting Pod of Berth, then each holder Allocate gave GPUs whose
//     Pod is not reported yet, holds slots where Allocate would put it now
//     (its own slots first), or nothing if none fit — the scheduler
//     decides, and this only keeps the count honest.
//
// From the first call the allocator is in cluster mode (see Restore).
func (a *Allocator) SetCluster(devs []Device, uses []Use) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cluster = true
	a.setLocked(devs, nil)
	a.uses = slices.Clone(uses)
	a.reported = map[string]bool{}
	for _, u := range uses {
		if u.Holder != "" {
			a.reported[u.Holder] = true
			delete(a.prov, u.Holder) // the Pod is the truth now
		}
	}
	a.placeLocked()
}

// placeLocked recomputes every holder from a.uses and a.prov.
func (a *Allocator) placeLocked() {
	clear(a.holder)
	bound := slices.DeleteFunc(slices.Clone(a.uses), func(u Use) bool { return u.Node == "" })
	// Berth's first, so their own slots are free to be kept.
	sort.SliceStable(bound, func(i, j int) bool { return bound[i].Holder != "" && bound[j].Holder == "" })
	for _, u := range bound {
		h := u.Holder
		if h == "" {
			h = HolderOther
		}
		a.takeOnNode(h, u.Node, u.Count, u.Slots)
	}
	for _, u := range a.uses {
		if u.Node == "" && u.Holder != "" {
			a.takeAnywhere(u.Holder, u.TypeID, u.Count, u.Slots)
		}
	}
	holders := make([]string, 0, len(a.prov))
	for h := range a.prov {
		holders = append(holders, h)
	}
	sort.Slice(holders, func(i, j int) bool { return a.prov[holders[i]].seq < a.prov[holders[j]].seq })
	for _, h := range holders {
		p := a.prov[h]
		a.takeAnywhere(h, p.typeID, p.count, p.slots)
	}
}

// takeOnNode gives holder count free slots of node, prefer first, then
// the lowest free ones (an unschedulable node's too: its Pods hold them).
func (a *Allocator) takeOnNode(holder, node string, count int, prefer []string) {
	for _, u := range prefer {
		if i, ok := a.byUUID[u]; ok && count > 0 && a.devs[i].Node == node && a.holder[i] == "" {
			a.holder[i] = holder
			count--
		}
	}
	for i, d := range a.devs {
		if count > 0 && d.Node == node && a.holder[i] == "" {
			a.holder[i] = holder
			count--
		}
	}
}

// takeAnywhere gives holder count free schedulable slots of typeID on one
// node: prefer when it is exactly that, else where Allocate would choose;
// nothing when no node has room.
func (a *Allocator) takeAnywhere(holder, typeID string, count int, prefer []string) {
	if typeID == "" && len(prefer) > 0 {
		if i, ok := a.byUUID[prefer[0]]; ok {
			typeID = a.devs[i].TypeID
		}
	}
	if len(prefer) == count && count > 0 {
		var pos []int
		for _, u := range prefer {
			i, ok := a.byUUID[u]
			if !ok || a.holder[i] != "" || a.devs[i].Unschedulable || a.devs[i].TypeID != typeID ||
				a.devs[i].Node != a.devs[a.byUUID[prefer[0]]].Node {
				pos = nil
				break
			}
			pos = append(pos, i)
		}
		if len(pos) == count {
			for _, i := range pos {
				a.holder[i] = holder
			}
			return
		}
	}
	for _, free := range a.freeByNode(typeID) {
		if len(free) >= count {
			for _, i := range free[:count] {
				a.holder[i] = holder
			}
			return
		}
	}
}

// remember records what Allocate gave holder on a cluster, until the
// holder's Pod is reported (SetCluster) or it is released.
func (a *Allocator) remember(holder, typeID string, devs []Device) {
	if !a.cluster {
		return
	}
	if a.prov == nil {
		a.prov = map[string]*provisional{}
	}
	a.seq++
	p := &provisional{typeID: typeID, count: len(devs), seq: a.seq}
	for _, d := range devs {
		p.slots = append(p.slots, d.UUID)
	}
	a.prov[holder] = p
}

// restoreClusterLocked: a holder the cluster already reports holds what
// its Pod holds; another is kept like a fresh allocation until its Pod is
// reported.
func (a *Allocator) restoreClusterLocked(holder string, uuids []string) {
	if a.reported[holder] || a.prov[holder] != nil || len(uuids) == 0 {
		return
	}
	typeID := ""
	if i, ok := a.byUUID[uuids[0]]; ok {
		typeID = a.devs[i].TypeID
	}
	if a.prov == nil {
		a.prov = map[string]*provisional{}
	}
	a.seq++
	a.prov[holder] = &provisional{typeID: typeID, count: len(uuids), slots: slices.Clone(uuids), seq: a.seq}
	a.takeAnywhere(holder, typeID, len(uuids), uuids)
}
