package gpu

import (
	"errors"
	"fmt"
	"maps"
	"testing"
)

// cluster is three nodes: a and b with two 4090s each, c with one A100;
// the nodes named in down are unschedulable, those in gone not listed.
func cluster(down, gone string) []Device {
	var out []Device
	for _, n := range []struct {
		name, typ string
		gpus      int
	}{{"a", rtx, 2}, {"b", rtx, 2}, {"c", a100, 1}} {
		if n.name == gone {
			continue
		}
		for k := range n.gpus {
			out = append(out, Device{Index: len(out), UUID: fmt.Sprintf("%s/gpu%d", n.name, k), Name: n.typ,
				TypeID: n.typ, Node: n.name, Unschedulable: n.name == down})
		}
	}
	return out
}

func holders(a *Allocator) map[string]string {
	out := map[string]string{}
	for _, s := range a.Snapshot() {
		if s.Holder != "" {
			out[s.UUID] = s.Holder
		}
	}
	return out
}

// TestSetCluster: the holders are what the cluster's Pods say, whatever
// the allocator held before; what is free is what is left on schedulable
// nodes.
func TestSetCluster(t *testing.T) {
	tests := []struct {
		name      string
		devs      []Device
		uses      []Use
		want      map[string]string // slot -> holder
		next      []int             // then Allocate(4090, n) for each n, one holder each ...
		nextSlots []string          // ... the first slot each gets ("" for ErrNoCapacity)
	}{
		{
			name: "Berth's and others' bound Pods hold their nodes' slots",
			devs: cluster("", ""),
			uses: []Use{{Holder: "w1", Node: "a", Count: 1, Slots: []string{"a/gpu1"}}, {Node: "b", Count: 2}},
			want: map[string]string{"a/gpu1": "w1", "b/gpu0": HolderOther, "b/gpu1": HolderOther},
			next: []int{1, 1}, nextSlots: []string{"a/gpu0", ""},
		},
		{
			name: "a cordoned node's Pods keep their slots and none is given",
			devs: cluster("a", ""),
			uses: []Use{{Holder: "w1", Node: "a", Count: 1, Slots: []string{"a/gpu0"}}},
			want: map[string]string{"a/gpu0": "w1"},
			next: []int{1, 2, 1}, nextSlots: []string{"b/gpu0", "", "b/gpu1"},
		},
		{
			name: "a node out of the list gives nothing; its Pods hold nothing listed",
			devs: cluster("", "a"),
			uses: []Use{{Holder: "w1", Node: "a", Count: 2}},
			want: map[string]string{},
			next: []int{2, 1}, nextSlots: []string{"b/gpu0", ""},
		},
		{
			name: "two Pods given the same slot by an earlier Berth both hold one",
			devs: cluster("", ""),
			uses: []Use{{Holder: "w1", Node: "a", Count: 1, Slots: []string{"a/gpu0"}}, {Holder: "w2", Node: "a", Count: 1, Slots: []string{"a/gpu0"}}},
			want: map[string]string{"a/gpu0": "w1", "a/gpu1": "w2"},
		},
		{
			name: "a waiting Pod holds where it fits, its own slots first",
			devs: cluster("", ""),
			uses: []Use{{Holder: "w1", TypeID: rtx, Count: 1, Slots: []string{"b/gpu1"}}, {Holder: "w2", TypeID: rtx, Count: 2}},
			want: map[string]string{"b/gpu1": "w1", "a/gpu0": "w2", "a/gpu1": "w2"},
			next: []int{1, 1}, nextSlots: []string{"b/gpu0", ""},
		},
		{
			name: "a waiting Pod that fits nowhere holds nothing",
			devs: cluster("", ""),
			uses: []Use{{Node: "a", Count: 1}, {Node: "b", Count: 1}, {Holder: "w1", TypeID: rtx, Count: 2}},
			want: map[string]string{"a/gpu0": HolderOther, "b/gpu0": HolderOther},
			next: []int{1}, nextSlots: []string{"a/gpu1"},
		},
		{
			name: "a waiting Pod's own slots on a cordoned node are not kept",
			devs: cluster("b", ""),
			uses: []Use{{Holder: "w1", TypeID: rtx, Count: 1, Slots: []string{"b/gpu0"}}},
			want: map[string]string{"a/gpu0": "w1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAllocator(nil)
			a.SetCluster(tc.devs, tc.uses)
			if got := holders(a); !maps.Equal(got, tc.want) {
				t.Fatalf("holders %v, want %v", got, tc.want)
			}
			for i, n := range tc.next {
				got, err := a.Allocate(fmt.Sprintf("new%d", i), []string{rtx}, n)
				switch {
				case tc.nextSlots[i] == "" && !errors.Is(err, ErrNoCapacity):
					t.Errorf("Allocate #%d (%d × 4090) = %v, %v; want ErrNoCapacity", i, n, got, err)
				case tc.nextSlots[i] != "" && (err != nil || got[0].UUID != tc.nextSlots[i]):
					t.Errorf("Allocate #%d (%d × 4090) = %v, %v; want from %s", i, n, got, err, tc.nextSlots[i])
				}
			}
		})
	}
}

// TestClusterBlipNeverGivesTwice is issue 28's sequence: a worker holds a
// GPU of node a; a leaves the list (a heartbeat blip) or is cordoned, a
// second worker asks, a comes back. The second never gets the first's
// GPU, and both are still held after the blip.
func TestClusterBlipNeverGivesTwice(t *testing.T) {
	for _, blip := range []struct{ name, down, gone string }{{"cordoned", "a", ""}, {"out of the list", "", "a"}} {
		t.Run(blip.name, func(t *testing.T) {
			a := NewAllocator(nil)
			a.SetCluster(cluster("", "c"), nil)
			got, err := a.Allocate("w1", []string{rtx}, 1)
			if err != nil || got[0].UUID != "a/gpu0" {
				t.Fatalf("Allocate w1 = %v, %v", got, err)
			}
			w1 := Use{Holder: "w1", Node: "a", Count: 1, Slots: []string{"a/gpu0"}}
			a.SetCluster(cluster(blip.down, blip.gone+"c"), []Use{w1})
			a.SetCluster(cluster(blip.down, blip.gone), []Use{w1})
			got, err = a.Allocate("w2", []string{rtx}, 2)
			if err != nil || got[0].Node != "b" {
				t.Fatalf("Allocate w2 (2 × 4090) while a is %s = %v, %v; want node b's", blip.name, got, err)
			}
			if _, err := a.Allocate("w3", []string{rtx}, 1); !errors.Is(err, ErrNoCapacity) {
				t.Fatalf("Allocate w3 while a is %s and b full: %v, want ErrNoCapacity", blip.name, err)
			}
			a.SetCluster(cluster("", ""), []Use{w1})
			want := map[string]string{"a/gpu0": "w1", "b/gpu0": "w2", "b/gpu1": "w2"}
			if h := holders(a); !maps.Equal(h, want) {
				t.Fatalf("after the blip: %v, want %v", h, want)
			}
			// A restart: a new allocator from the same Pods restores both.
			r := NewAllocator(nil)
			r.SetCluster(cluster("", ""), []Use{w1, {Holder: "w2", Node: "b", Count: 2, Slots: []string{"b/gpu0", "b/gpu1"}}})
			for _, w := range []string{"w1", "w2"} {
				if err := r.Restore(w, []string{"a/gpu0"}); err != nil {
					t.Errorf("Restore %s after a restart: %v", w, err)
				}
			}
			if h := holders(r); !maps.Equal(h, want) {
				t.Fatalf("after a restart: %v, want %v", h, want)
			}
		})
	}
}

// TestClusterProvisional: what Allocate gives is held until the Pod is
// reported, then the Pod decides: where it is bound, and nothing once it
// is gone.
func TestClusterProvisional(t *testing.T) {
	a := NewAllocator(nil)
	a.SetCluster(cluster("", ""), nil)
	if got, err := a.Allocate("w", []string{rtx}, 1); err != nil || got[0].UUID != "a/gpu0" {
		t.Fatalf("Allocate = %v, %v", got, err)
	}
	steps := []struct {
		name string
		uses []Use
		want map[string]string
	}{
		{"its Pod not reported yet", nil, map[string]string{"a/gpu0": "w"}},
		{"another workload takes node a", []Use{{Node: "a", Count: 2}}, map[string]string{"a/gpu0": HolderOther, "a/gpu1": HolderOther, "b/gpu0": "w"}},
		{"its Pod waits", []Use{{Holder: "w", TypeID: rtx, Count: 1, Slots: []string{"a/gpu0"}}}, map[string]string{"a/gpu0": "w"}},
		{"its Pod is bound to b", []Use{{Holder: "w", Node: "b", Count: 1, Slots: []string{"a/gpu0"}}}, map[string]string{"b/gpu0": "w"}},
		{"its Pod is gone", nil, map[string]string{}},
	}
	for _, s := range steps {
		a.SetCluster(cluster("", ""), s.uses)
		if h := holders(a); !maps.Equal(h, s.want) {
			t.Fatalf("%s: %v, want %v", s.name, h, s.want)
		}
	}
	// Released before its Pod was reported: nothing is kept.
	if _, err := a.Allocate("x", []string{a100}, 1); err != nil {
		t.Fatal(err)
	}
	a.Release("x")
	a.SetCluster(cluster("", ""), nil)
	if h := holders(a); len(h) != 0 {
		t.Fatalf("after Release: %v", h)
	}
	// Restore of a holder the cluster does not report yet keeps it.
	if err := a.Restore("y", []string{"c/gpu0"}); err != nil {
		t.Fatal(err)
	}
	a.SetCluster(cluster("", ""), nil)
	if h := holders(a); h["c/gpu0"] != "y" {
		t.Fatalf("after Restore of an unreported holder: %v", h)
	}
}

// TestClusterTypesKeepUnschedulable: a GPU type whose only node is
// cordoned is still the cluster's (work waits for it; it is not run
// without a GPU), but Fit finds no room.
func TestClusterTypesKeepUnschedulable(t *testing.T) {
	a := NewAllocator(nil)
	a.SetCluster(cluster("c", ""), nil)
	if ts := a.Types(); len(ts) != 2 {
		t.Fatalf("types %v, want the 4090 and the A100", ts)
	}
	if n, desc := a.Fit([]string{a100}, 1); n != 0 {
		t.Fatalf("Fit(A100) on a cordoned node = %d (%s), want 0", n, desc)
	}
	if _, err := a.Allocate("w", []string{a100}, 1); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("Allocate(A100) on a cordoned node: %v, want ErrNoCapacity", err)
	}
}
