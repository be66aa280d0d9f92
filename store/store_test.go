package store_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth/store"
)

// openTemp opens a database in t.TempDir and checks the file's consistency
// when the test ends (bbolt's own test helper does the same).
func openTemp(t testing.TB) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Check(); err != nil {
			t.Errorf("database check: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return db
}

func TestWriteIsReadableAfterReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Template{ID: "abc", Name: "t", ImageName: "img"}
	if err := db.Write(store.Put(store.Templates, want.ID, want)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got store.Template
	if err := db.View(func(tx *store.Tx) error { return tx.Get(store.Templates, "abc", &got) }); err != nil {
		t.Fatal(err)
	}
	if got.Name != want.Name || got.ImageName != want.ImageName {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestSecondOpenFailsWithLocked(t *testing.T) {
	db := openTemp(t)
	_, err := store.Open(db.Path(), store.Options{})
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
}

func TestGroupCommitKeepsQueueOrder(t *testing.T) {
	db := openTemp(t)
	// Later writes to one key win, whether they were waited on or not.
	for i := 0; i < 100; i++ {
		db.WriteAsync(store.PutRaw(store.Meta, "k", []byte(fmt.Sprint(i))))
	}
	if err := db.Write(store.Delete(store.Meta, "gone"), store.PutRaw(store.Meta, "last", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	var got []byte
	db.View(func(tx *store.Tx) error { got = tx.GetRaw(store.Meta, "k"); return nil })
	if string(got) != "99" {
		t.Fatalf("k = %q, want 99", got)
	}
}

func TestConcurrentWritesAllLand(t *testing.T) {
	db := openTemp(t)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				key := fmt.Sprintf("%02d-%02d", g, i)
				if err := db.Write(store.PutRaw(store.Jobs, key, []byte("v"))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	db.Scan(store.Jobs, func(string, []byte) error { n++; return nil })
	if n != 16*50 {
		t.Fatalf("%d records, want %d", n, 16*50)
	}
}

func TestGetMissingIsNotFound(t *testing.T) {
	db := openTemp(t)
	err := db.View(func(tx *store.Tx) error {
		var v store.Endpoint
		return tx.Get(store.Endpoints, "nope", &v)
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
}

func TestWriteAfterCloseFails(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "b.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := db.Write(store.PutRaw(store.Meta, "k", []byte("v"))); err == nil {
		t.Fatal("write after close succeeded")
	}
}

func BenchmarkGroupCommit(b *testing.B) {
	db := openTemp(b)
	val := make([]byte, 256)
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if err := db.Write(store.PutRaw(store.Jobs, fmt.Sprintf("%p-%d", pb, i), val)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// A clean Close writes the free-page list with its last commit and the
// commits after the next Open skip it again: the file must stay consistent
// across both transitions, with pages freed in between.
func TestFreelistAcrossCloseAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	for round := 0; round < 3; round++ {
		db, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var ops []store.Op
		for i := 0; i < 2000; i++ {
			key := fmt.Sprintf("r%d-%05d", round, i)
			ops = append(ops, store.PutRaw(store.Jobs, key, make([]byte, 300)))
			if round > 0 {
				ops = append(ops, store.Delete(store.Jobs, fmt.Sprintf("r%d-%05d", round-1, i)))
			}
		}
		if err := db.Write(ops...); err != nil {
			t.Fatal(err)
		}
		if err := db.Check(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		n := 0
		db.Scan(store.Jobs, func(string, []byte) error { n++; return nil })
		if n != 2000 {
			t.Fatalf("round %d: %d records", round, n)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkJobWritesNoSync is the write path's CPU without the disk: job
// records (as PutJob writes them: encoded on the writer, plus the index
// entry) through the group commit with fsync off, so what the writer does
// per record (encoding, checksums, bbolt) is what is timed.
func BenchmarkJobWritesNoSync(b *testing.B) {
	db, err := store.Open(filepath.Join(b.TempDir(), "berth.db"), store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	var n atomic.Int64
	b.ResetTimer()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			j := store.Job{ID: fmt.Sprintf("%08x-7d3c-7000-8000-%012x", i, i), EndpointID: "abcdefghijklmn", Seq: uint64(i), Status: store.InQueue,
				CreatedAt: now, QueuedAt: now, ExpiresAt: now.Add(time.Hour), ExecutionTimeoutMs: 600000,
				Input: []byte(`{"prompt":"a photograph of an astronaut riding a horse","steps":30,"seed":12345}`)}
			if err := db.Write(store.PutJob(&j)...); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
