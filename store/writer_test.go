package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth/internal/disktest"
	"berth/store"
)

// holdWriter blocks the database's writer: it returns once a transaction
// holds bbolt's write lock, and release lets it go. Writes queued meanwhile
// go to disk together in the next group commit.
func holdWriter(t *testing.T, db *store.DB) (release func()) {
	t.Helper()
	held, rel, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- db.Update(func(*store.Tx) error { close(held); <-rel; return nil })
	}()
	<-held
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(rel)
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// A write whose op fails is retried alone: the writes that shared its group
// commit land, and only its caller sees the error.
func TestFailingWriteFailsOnlyItsCaller(t *testing.T) {
	db := openTemp(t)
	release := holdWriter(t, db)
	var chans []<-chan error
	for i := 0; i < 10; i++ {
		chans = append(chans, db.Enqueue(store.PutRaw(store.Templates, fmt.Sprintf("k%d", i), []byte(`{}`))))
	}
	bad := db.Enqueue(store.PutRaw(store.Templates, "fine", []byte(`{}`)), store.PutRaw(store.Templates, "", []byte(`{}`)))
	for i := 10; i < 20; i++ {
		chans = append(chans, db.Enqueue(store.PutRaw(store.Templates, fmt.Sprintf("k%d", i), []byte(`{}`))))
	}
	db.WriteAsync(store.PutRaw("no-such-bucket", "x", []byte(`{}`)))
	release()
	for i, ch := range chans {
		if err := <-ch; err != nil {
			t.Errorf("write %d failed with another's error: %v", i, err)
		}
	}
	if err := <-bad; err == nil || !strings.Contains(err.Error(), "key required") {
		t.Errorf("the bad write: got %v, want bbolt's key required", err)
	} else if errors.Is(err, store.ErrUnavailable) {
		t.Errorf("an op's own error is not a retryable unavailability: %v", err)
	}
	n := 0
	db.Scan(store.Templates, func(k string, _ []byte) error {
		if k == "fine" {
			t.Error("the failed write's other op landed: a write is all or nothing")
		}
		n++
		return nil
	})
	if n != 20 {
		t.Fatalf("%d records, want 20", n)
	}
	if err := db.Write(); err != nil { // the async one has been answered
		t.Fatal(err)
	}
	if st := db.Stats(); st.Failed != 2 || st.Retrying != 0 {
		t.Fatalf("stats %+v: want 2 failed writes, none kept (an op error never lands)", st)
	}
}

// Past its bound the write queue makes new work wait (Admit), and gives up
// with a retryable ErrBusy; once the disk catches up there is room again.
func TestWriteQueueBackPressure(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "berth.db"), store.Options{MaxPending: 8, AdmitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	release := holdWriter(t, db)
	// The writer takes what is queued into its (blocked) transaction
	// once; from then on the queue grows until Admit says no.
	var chans []<-chan error
	for len(chans) < 100 {
		if err = db.Admit(context.Background()); err != nil {
			break
		}
		chans = append(chans, db.Enqueue(store.PutRaw(store.Meta, fmt.Sprint(len(chans)), []byte("v"))))
	}
	if !errors.Is(err, store.ErrBusy) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("admit over the bound: got %v after %d writes, want ErrBusy (an ErrUnavailable)", err, len(chans))
	}
	if st := db.Stats(); st.Pending < 8 {
		t.Fatalf("pending %d, want ≥ 8", st.Pending)
	}
	release()
	for _, ch := range chans {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	// Every queued write answered: the queue is empty. (An Admit waiting
	// meanwhile may give up first: the drain can take longer than the
	// 50 ms AdmitTimeout on a busy machine.)
	if err := db.Admit(context.Background()); err != nil {
		t.Fatalf("admit once the queue drained: %v", err)
	}
}

// On a full disk writes fail with a retryable error, the failed writes of
// state held in memory are kept and land once space frees (unless a newer
// write of the same key landed first), and the file stays consistent.
func TestDiskFullWritesFailAndRecover(t *testing.T) {
	dir := disktest.Tmpfs(t, 4<<20)
	path := filepath.Join(dir, "berth.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Write(store.PutRaw(store.Meta, "newer", []byte("0"))); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	disktest.Fill(t, filler)
	// Fill what is left inside the file too: write until a write fails.
	val := make([]byte, 8<<10)
	var full error
	for i := 0; i < 10000 && full == nil; i++ {
		full = db.Write(store.PutRaw(store.JobInputs, fmt.Sprintf("fill-%05d", i), val))
	}
	if full == nil {
		t.Fatal("the disk never filled")
	}
	if !errors.Is(full, store.ErrUnavailable) || !strings.Contains(full.Error(), "no space left") {
		t.Fatalf("write on a full disk: got %v, want ErrUnavailable naming the cause", full)
	}
	// State changes of memory, fire-and-forget: kept.
	for i := 0; i < 50; i++ {
		db.WriteAsync(store.PutRaw(store.JobInputs, fmt.Sprintf("kept-%02d", i), val))
	}
	db.WriteAsync(store.PutRaw(store.Meta, "newer", []byte("old")))
	if err := <-db.EnqueueState(store.PutRaw(store.Meta, "state", val)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("EnqueueState on a full disk: %v", err)
	}
	st := db.Stats()
	if st.Failed < 52 || st.Retrying < 52 {
		t.Fatalf("stats %+v: want every failed write counted and the state writes kept", st)
	}
	if !db.Pending(store.Meta, "state") {
		t.Fatal("a kept write is not reported pending")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The newer write of "newer" lands with (or before) the kept older one.
	if err := db.Write(store.PutRaw(store.Meta, "newer", []byte("new"))); err != nil {
		t.Fatalf("write after space freed: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for db.Stats().Retrying > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("kept writes never landed: %+v", db.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	db.View(func(tx *store.Tx) error {
		if v := tx.GetRaw(store.Meta, "newer"); string(v) != "new" {
			t.Errorf("newer = %q: a kept older write overwrote a newer one", v)
		}
		if tx.GetRaw(store.Meta, "state") == nil {
			t.Error("the kept state write did not land")
		}
		for i := 0; i < 50; i++ {
			if tx.GetRaw(store.JobInputs, fmt.Sprintf("kept-%02d", i)) == nil {
				t.Errorf("kept-%02d did not land", i)
			}
		}
		return nil
	})
	if err := db.Check(); err != nil {
		t.Fatalf("file after the full disk: %v", err)
	}
}
