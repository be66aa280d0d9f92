package store_test

import (
	"errors"
	"testing"
	"time"

	"berth/store"
)

func ts(h int) time.Time { return time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC) }

func between(t *testing.T, db *store.DB, from, to time.Time) []store.UsageInterval {
	t.Helper()
	var out []store.UsageInterval
	if err := store.UsageBetween(db, from, to, func(iv store.UsageInterval) error { out = append(out, iv); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUsageIntervals(t *testing.T) {
	db := openTemp(t)
	w := store.UsageInterval{Kind: store.UsageWorker, ID: "w1", EndpointID: "ep", GPUTypeID: "NVIDIA A40", GPUCount: 1, Start: ts(1)}
	if err := store.RecordUsageStart(db, w); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordUsageStart(db, store.UsageInterval{Kind: store.UsagePod, ID: "p1", Start: ts(2)}); err != nil {
		t.Fatal(err)
	}
	open, err := store.OpenUsage(db)
	if err != nil || len(open) != 2 {
		t.Fatalf("open intervals %+v %v", open, err)
	}
	if err := store.RecordUsageEnd(db, store.UsageWorker, "w1", ts(3)); err != nil {
		t.Fatal(err)
	}
	// Ending twice, or ending what never started, changes nothing.
	if err := store.RecordUsageEnd(db, store.UsageWorker, "w1", ts(9)); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordUsageEnd(db, store.UsagePod, "nobody", ts(9)); err != nil {
		t.Fatal(err)
	}
	// A start while open (its end was lost in a crash) closes the old one.
	if err := store.RecordUsageStart(db, store.UsageInterval{Kind: store.UsagePod, ID: "p1", Start: ts(5)}); err != nil {
		t.Fatal(err)
	}
	all := between(t, db, ts(0), ts(24))
	if len(all) != 3 {
		t.Fatalf("intervals %+v", all)
	}
	if !all[0].End.Equal(ts(3)) || all[0].EndpointID != "ep" || !all[1].End.Equal(ts(5)) || !all[2].End.IsZero() {
		t.Errorf("intervals %+v", all)
	}
	for _, c := range []struct {
		from, to int
		want     int
	}{
		{0, 1, 0},  // ends before the first start
		{3, 4, 1},  // w1 ended at 3; p1 (2-5) overlaps
		{0, 2, 1},  // p1 starts at 2: not in [0,2)
		{6, 24, 1}, // only the open one
		{2, 3, 2},
	} {
		if got := between(t, db, ts(c.from), ts(c.to)); len(got) != c.want {
			t.Errorf("[%d,%d): %d intervals %+v, want %d", c.from, c.to, len(got), got, c.want)
		}
	}
	if open, _ := store.OpenUsage(db); len(open) != 1 || open[0].ID != "p1" || !open[0].Start.Equal(ts(5)) {
		t.Errorf("open after restart of p1: %+v", open)
	}
	for _, bad := range []store.UsageInterval{
		{Kind: "gpu", ID: "x", Start: ts(1)},
		{Kind: store.UsagePod, Start: ts(1)},
		{Kind: store.UsagePod, ID: "x"},
	} {
		if err := store.PutUsageInterval(db, bad); err == nil {
			t.Errorf("PutUsageInterval(%+v) accepted", bad)
		}
	}
}

func TestRegistryCredentialsAndUpdatePod(t *testing.T) {
	db := openTemp(t)
	if _, _, err := store.RegistryCredentials(db, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing credentials: %v", err)
	}
	err := db.Write(store.Put(store.RegistryAuths, "c1", store.RegistryAuth{ID: "c1", Name: "n", Username: "u", Password: "p"}),
		store.Put(store.Pods, "p1", store.Pod{ID: "p1", DesiredStatus: store.PodRunning}))
	if err != nil {
		t.Fatal(err)
	}
	if u, p, err := store.RegistryCredentials(db, "c1"); u != "u" || p != "p" || err != nil {
		t.Errorf("credentials %q %q %v", u, p, err)
	}
	if err := store.UpdatePod(db, "p1", func(p *store.Pod) error { p.DesiredStatus = store.PodExited; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := store.UpdatePod(db, "p1", func(p *store.Pod) error { p.Name = "x"; return errors.New("no") }); err == nil {
		t.Error("UpdatePod ignored fn's error")
	}
	var p store.Pod
	db.View(func(tx *store.Tx) error { return tx.Get(store.Pods, "p1", &p) })
	if p.DesiredStatus != store.PodExited || p.Name != "" {
		t.Errorf("pod after updates: %+v", p)
	}
	if err := store.UpdatePod(db, "p2", func(*store.Pod) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdatePod of a missing pod: %v", err)
	}
}
