package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	rtx  = "NVIDIA GeForce RTX 4090"
	a100 = "NVIDIA A100-SXM4-80GB"
	h100 = "NVIDIA H100 80GB HBM3"
)

// mixed is a hand-built machine: 4090s at indexes 0, 2, 4 and A100s at 1, 3,
// listed out of order to check that the allocator sorts by index.
func mixed() []Device {
	mk := func(i int, name string) Device {
		return Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Name: name, TypeID: TypeID(name), MemoryMiB: 24564}
	}
	return []Device{mk(4, rtx), mk(3, a100), mk(2, rtx), mk(1, a100), mk(0, rtx)}
}

type req struct {
	holder string
	types  []string
	count  int
}

func indexes(ds []Device) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.Index
	}
	return out
}

func TestAllocate(t *testing.T) {
	tests := []struct {
		name    string
		devs    []Device
		before  []req // must succeed
		req     req
		want    []int // indexes, when no error
		wantErr error // nil: success; errAny: any error
	}{
		{name: "lowest index first", req: req{"w", []string{rtx}, 1}, want: []int{0}},
		{name: "count 2 same type", req: req{"w", []string{rtx}, 2}, want: []int{0, 2}},
		{name: "first listed type wins", req: req{"w", []string{a100, rtx}, 1}, want: []int{1}},
		{
			name:   "first type exhausted falls back to second",
			before: []req{{"x", []string{a100}, 2}},
			req:    req{"w", []string{a100, rtx}, 1},
			want:   []int{0},
		},
		{name: "first type too small for count", req: req{"w", []string{a100, rtx}, 3}, want: []int{0, 2, 4}},
		{
			name:    "never mixes types",
			before:  []req{{"x", []string{rtx}, 2}},
			req:     req{"w", []string{rtx, a100}, 3},
			wantErr: ErrNoCapacity,
		},
		{
			name:   "skips a partly free type",
			before: []req{{"x", []string{rtx}, 2}},
			req:    req{"w", []string{rtx, a100}, 2},
			want:   []int{1, 3},
		},
		{name: "any type", req: req{"w", nil, 1}, want: []int{0}},
		{
			name:   "any type falls back",
			before: []req{{"x", []string{rtx}, 2}},
			req:    req{"w", nil, 2},
			want:   []int{1, 3},
		},
		{name: "unknown type listed first is skipped", req: req{"w", []string{h100, rtx}, 1}, want: []int{0}},
		{name: "request is normalised", req: req{"w", []string{"NVIDIA  GeForce RTX 4090 "}, 1}, want: []int{0}},
		{name: "only unknown types", req: req{"w", []string{h100}, 1}, wantErr: ErrUnknownType},
		{name: "no GPUs at all", devs: []Device{}, req: req{"w", nil, 1}, wantErr: ErrUnknownType},
		{
			name:    "exhausted",
			before:  []req{{"x", []string{rtx}, 3}},
			req:     req{"w", []string{rtx}, 1},
			wantErr: ErrNoCapacity,
		},
		{name: "more than exist", req: req{"w", []string{a100}, 3}, wantErr: ErrNoCapacity},
		{
			name:    "holder already holds",
			before:  []req{{"w", []string{rtx}, 1}},
			req:     req{"w", []string{a100}, 1},
			wantErr: ErrAlreadyHeld,
		},
		{name: "count 0", req: req{"w", []string{rtx}, 0}, wantErr: errAny},
		{name: "negative count", req: req{"w", nil, -1}, wantErr: errAny},
		{name: "empty holder", req: req{"", []string{rtx}, 1}, wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs := tt.devs
			if devs == nil {
				devs = mixed()
			}
			a := NewAllocator(devs)
			for _, r := range tt.before {
				if _, err := a.Allocate(r.holder, r.types, r.count); err != nil {
					t.Fatalf("setup Allocate(%v): %v", r, err)
				}
			}
			snap := a.Snapshot()
			got, err := a.Allocate(tt.req.holder, tt.req.types, tt.req.count)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("got %v, want error %v", indexes(got), tt.wantErr)
				}
				if tt.wantErr != errAny && !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if !slices.Equal(a.Snapshot(), snap) {
					t.Errorf("failed Allocate changed state")
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if !slices.Equal(indexes(got), tt.want) {
				t.Errorf("got indexes %v, want %v", indexes(got), tt.want)
			}
			for _, s := range a.Snapshot() {
				if slices.Contains(tt.want, s.Index) && s.Holder != tt.req.holder {
					t.Errorf("index %d holder %q, want %q", s.Index, s.Holder, tt.req.holder)
				}
			}
		})
	}
}

var errAny = errors.New("any error")

func TestAllocateErrorMessages(t *testing.T) {
	a := NewAllocator(mixed())
	if _, err := a.Allocate("x", []string{a100}, 1); err != nil {
		t.Fatal(err)
	}
	_, err := a.Allocate("w", []string{a100, h100}, 2)
	for _, want := range []string{"w wants 2", a100, "1 of 2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ErrNoCapacity message %q lacks %q", err, want)
		}
	}
	_, err = a.Allocate("w", []string{h100}, 1)
	for _, want := range []string{h100, rtx, a100} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ErrUnknownType message %q lacks %q", err, want)
		}
	}
}

func TestReleaseThenReallocate(t *testing.T) {
	a := NewAllocator(mixed())
	first, err := a.Allocate("w1", []string{rtx}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("w2", []string{rtx}, 1); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("err = %v, want ErrNoCapacity", err)
	}
	a.Release("w1")
	a.Release("w1")     // idempotent
	a.Release("nobody") // unknown holder
	a.Release("")
	if n := a.Free(rtx); n != 3 {
		t.Fatalf("Free after release = %d, want 3", n)
	}
	again, err := a.Allocate("w2", []string{rtx}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(indexes(first), indexes(again)) {
		t.Errorf("reallocated %v, want %v", indexes(again), indexes(first))
	}
	// A released holder may allocate again.
	if _, err := a.Allocate("w1", []string{a100}, 1); err != nil {
		t.Errorf("w1 after release: %v", err)
	}
}

func TestRestore(t *testing.T) {
	tests := []struct {
		name    string
		before  map[string][]string // holder -> uuids, restored first
		holder  string
		uuids   []string
		wantErr error
	}{
		{name: "free GPUs", holder: "w1", uuids: []string{"GPU-1", "GPU-3"}},
		{name: "nothing", holder: "w1", uuids: nil},
		{name: "same holder again", before: map[string][]string{"w1": {"GPU-1"}}, holder: "w1", uuids: []string{"GPU-1", "GPU-3"}},
		{name: "unknown uuid", holder: "w1", uuids: []string{"GPU-1", "GPU-99"}, wantErr: ErrUnknownDevice},
		{name: "held by another", before: map[string][]string{"w2": {"GPU-3"}}, holder: "w1", uuids: []string{"GPU-1", "GPU-3"}, wantErr: ErrAlreadyHeld},
		{name: "empty holder", holder: "", uuids: []string{"GPU-1"}, wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(mixed())
			for h, us := range tt.before {
				if err := a.Restore(h, us); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			snap := a.Snapshot()
			err := a.Restore(tt.holder, tt.uuids)
			if tt.wantErr != nil {
				if err == nil || (tt.wantErr != errAny && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if !slices.Equal(a.Snapshot(), snap) {
					t.Errorf("failed Restore changed state") // all or nothing
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range a.Snapshot() {
				if slices.Contains(tt.uuids, s.UUID) && s.Holder != tt.holder {
					t.Errorf("%s holder %q, want %q", s.UUID, s.Holder, tt.holder)
				}
			}
		})
	}
}

func TestRestoreThenAllocate(t *testing.T) {
	a := NewAllocator(mixed())
	if err := a.Restore("w1", []string{"GPU-0", "GPU-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("w1", []string{rtx}, 1); !errors.Is(err, ErrAlreadyHeld) {
		t.Errorf("restored holder allocates again: err = %v, want ErrAlreadyHeld", err)
	}
	got, err := a.Allocate("w2", []string{rtx}, 1)
	if err != nil || !slices.Equal(indexes(got), []int{4}) {
		t.Errorf("Allocate after restore = %v, %v; want [4]", indexes(got), err)
	}
}

func TestSnapshotFreeTypes(t *testing.T) {
	a := NewAllocator(mixed())
	if _, err := a.Allocate("w1", []string{a100}, 1); err != nil {
		t.Fatal(err)
	}
	snap := a.Snapshot()
	wantHolders := []string{"", "w1", "", "", ""}
	for i, s := range snap {
		if s.Index != i {
			t.Errorf("snapshot[%d].Index = %d", i, s.Index)
		}
		if s.Holder != wantHolders[i] {
			t.Errorf("snapshot[%d].Holder = %q, want %q", i, s.Holder, wantHolders[i])
		}
	}
	snap[0].Holder = "mutated" // a copy: must not leak into the allocator
	if a.Snapshot()[0].Holder != "" {
		t.Error("Snapshot shares memory with the allocator")
	}

	for _, tt := range []struct {
		typeID string
		want   int
	}{{rtx, 3}, {a100, 1}, {h100, 0}, {"", 0}, {"GeForce RTX 4090", 3}} {
		if got := a.Free(tt.typeID); got != tt.want {
			t.Errorf("Free(%q) = %d, want %d", tt.typeID, got, tt.want)
		}
	}
	if got := a.Types(); !slices.Equal(got, []string{rtx, a100}) {
		t.Errorf("Types() = %q", got)
	}
	if got := NewAllocator(nil).Types(); len(got) != 0 {
		t.Errorf("empty Types() = %q", got)
	}
}

func TestNewAllocatorCopies(t *testing.T) {
	devs := mixed()
	a := NewAllocator(devs)
	devs[0].UUID = "changed"
	for _, s := range a.Snapshot() {
		if s.UUID == "changed" {
			t.Fatal("allocator shares the caller's slice")
		}
	}
}

// manyDevices builds n devices alternating between two types.
func manyDevices(n int) []Device {
	devs := make([]Device, n)
	for i := range devs {
		name := rtx
		if i%2 == 1 {
			name = a100
		}
		devs[i] = Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Name: name, TypeID: name}
	}
	return devs
}

func TestConcurrentAllocateOnce(t *testing.T) {
	const nDev, nWorkers = 16, 64
	a := NewAllocator(manyDevices(nDev))
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		owner   = map[string]string{}
		granted int
	)
	for w := range nWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d", w)
			types := [][]string{{rtx}, {a100, rtx}, nil}[w%3]
			got, err := a.Allocate(holder, types, 1+w%2)
			if err != nil {
				if !errors.Is(err, ErrNoCapacity) {
					t.Errorf("%s: %v", holder, err)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, d := range got {
				if prev, ok := owner[d.UUID]; ok {
					t.Errorf("%s handed to %s and %s", d.UUID, prev, holder)
				}
				owner[d.UUID] = holder
				granted++
			}
			if len(got) == 2 && got[0].TypeID != got[1].TypeID {
				t.Errorf("%s got mixed types %v", holder, got)
			}
		}()
	}
	wg.Wait()
	if granted > nDev {
		t.Errorf("granted %d GPUs of %d", granted, nDev)
	}
	held := 0
	for _, s := range a.Snapshot() {
		if s.Holder != "" {
			held++
			if owner[s.UUID] != s.Holder {
				t.Errorf("%s: snapshot holder %q, granted to %q", s.UUID, s.Holder, owner[s.UUID])
			}
		}
	}
	if held != granted {
		t.Errorf("snapshot holds %d, granted %d", held, granted)
	}
}

// TestConcurrentChurn allocates and releases from many goroutines and checks
// that no GPU is ever in two holders' hands at once.
func TestConcurrentChurn(t *testing.T) {
	const nDev, nWorkers, rounds = 8, 32, 200
	a := NewAllocator(manyDevices(nDev))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		inUse = map[string]string{}
	)
	for w := range nWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d", w)
			for r := range rounds {
				got, err := a.Allocate(holder, [][]string{{rtx}, {a100}, nil}[(w+r)%3], 1+r%2)
				if err != nil {
					if !errors.Is(err, ErrNoCapacity) {
						t.Errorf("%s: %v", holder, err)
						return
					}
					continue
				}
				mu.Lock()
				for _, d := range got {
					if prev, ok := inUse[d.UUID]; ok {
						t.Errorf("%s handed to %s while %s holds it", d.UUID, holder, prev)
					}
					inUse[d.UUID] = holder
				}
				mu.Unlock()
				runtime.Gosched() // hold the GPUs while others try
				// Forget ownership before releasing, so the next holder
				// never sees a stale entry.
				mu.Lock()
				for _, d := range got {
					delete(inUse, d.UUID)
				}
				mu.Unlock()
				a.Release(holder)
			}
		}()
	}
	wg.Wait()
	for _, s := range a.Snapshot() {
		if s.Holder != "" {
			t.Errorf("%s still held by %s", s.UUID, s.Holder)
		}
	}
}

// TestFit: Fit counts the allocations Allocate would then make, one after
// another, and says what is free.
func TestFit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		held  []req
		types []string
		count int
		want  int
		desc  string
	}{
		{name: "any type, one each", count: 1, want: 5},
		{name: "pairs of 4090s", types: []string{rtx}, count: 2, want: 1, desc: `2 × "` + rtx + `"; free: "` + rtx + `" 3 of 3`},
		{name: "pairs of either", types: []string{rtx, a100}, count: 2, want: 2},
		{name: "held ones do not count", held: []req{{"x", []string{a100}, 1}}, types: []string{a100}, count: 1, want: 1,
			desc: `1 × "` + a100 + `"; free: "` + a100 + `" 1 of 2`},
		{name: "none free", held: []req{{"x", []string{a100}, 2}}, types: []string{a100}, count: 1, want: 0},
		{name: "unknown type", types: []string{h100}, count: 1, want: 0},
		{name: "count below one is one", types: []string{a100}, count: 0, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAllocator(mixed())
			for _, r := range tc.held {
				if _, err := a.Allocate(r.holder, r.types, r.count); err != nil {
					t.Fatal(err)
				}
			}
			n, desc := a.Fit(tc.types, tc.count)
			if n != tc.want || tc.desc != "" && desc != tc.desc {
				t.Fatalf("Fit = %d %q, want %d %q", n, desc, tc.want, tc.desc)
			}
			// Allocate agrees: exactly n more allocations succeed.
			count := max(tc.count, 1)
			for i := 0; i < n; i++ {
				if _, err := a.Allocate(fmt.Sprintf("h%d", i), tc.types, count); err != nil {
					t.Fatalf("allocation %d of %d: %v", i+1, n, err)
				}
			}
			if _, err := a.Allocate("one-more", tc.types, count); err == nil {
				t.Fatalf("allocation %d succeeded past Fit", n+1)
			}
		})
	}
}

// TestAllocateOneNode: the GPUs of one allocation are on one node (the
// slots of a cluster's nodes); a node without enough is passed over.
func TestAllocateOneNode(t *testing.T) {
	slot := func(i int, node, name string) Device {
		return Device{Index: i, UUID: fmt.Sprintf("%s/%d", node, i), Name: name, TypeID: TypeID(name), Node: node}
	}
	a := NewAllocator([]Device{slot(0, "a", rtx), slot(1, "b", rtx), slot(2, "b", rtx), slot(3, "c", rtx), slot(4, "c", rtx), slot(5, "c", a100)})
	if n, _ := a.Fit([]string{rtx}, 2); n != 2 {
		t.Fatalf("Fit(2 × 4090) = %d, want 2 (nodes b and c)", n)
	}
	got, err := a.Allocate("w1", []string{rtx}, 2)
	if err != nil || !slices.Equal(indexes(got), []int{1, 2}) {
		t.Fatalf("Allocate(2 × 4090) = %v, %v; want node b's 1, 2", indexes(got), err)
	}
	if got, err = a.Allocate("w2", []string{rtx}, 1); err != nil || got[0].Node != "a" {
		t.Fatalf("Allocate(1 × 4090) = %v, %v; want node a's", got, err)
	}
	if got, err = a.Allocate("w3", []string{rtx}, 2); err != nil || !slices.Equal(indexes(got), []int{3, 4}) {
		t.Fatalf("Allocate(2 × 4090) = %v, %v; want node c's 3, 4", indexes(got), err)
	}
	// Two of a100 and 4090 free nowhere on one node.
	if _, err := a.Allocate("w4", nil, 2); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("Allocate(2 × any) with one free GPU: %v", err)
	}
	if n, _ := a.Fit(nil, 1); n != 1 {
		t.Fatalf("Fit(1 × any) = %d, want 1", n)
	}
}

// TestSetDevices: devices that stay keep their holders; new ones are free;
// gone ones are no one's.
func TestSetDevices(t *testing.T) {
	a := NewAllocator(mixed())
	if _, err := a.Allocate("w", []string{a100}, 2); err != nil {
		t.Fatal(err)
	}
	devs := mixed()[:4] // drops index 0 (a 4090)
	devs = append(devs, Device{Index: 9, UUID: "GPU-9", Name: h100, TypeID: TypeID(h100)})
	a.SetDevices(devs)
	held := map[string]string{}
	for _, s := range a.Snapshot() {
		held[s.UUID] = s.Holder
	}
	if len(held) != 5 || held["GPU-1"] != "w" || held["GPU-3"] != "w" || held["GPU-9"] != "" {
		t.Fatalf("after SetDevices: %v", held)
	}
	if !slices.Contains(a.Types(), TypeID(h100)) {
		t.Fatalf("types %v lack the new H100", a.Types())
	}
	if _, err := a.Allocate("x", []string{h100}, 1); err != nil {
		t.Fatal(err)
	}
}
