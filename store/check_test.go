package store_test

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth/store"
)

// filledDB writes n job records into a new database file, closes it and
// returns its path and size.
func filledDB(t *testing.T, n int) (string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "berth.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	val := []byte(`{"pad":"` + strings.Repeat("x", 290) + `"}`) // decodes as a job record
	for i := 0; i < n; i += 500 {
		ops := make([]store.Op, 0, 500)
		for j := i; j < i+500 && j < n; j++ {
			ops = append(ops, store.PutRaw(store.Jobs, fmt.Sprintf("job-%08d", j), val))
		}
		if err := db.Write(ops...); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, info.Size()
}

// overwrite writes fill over [from, to) of the file.
func overwrite(t *testing.T, path string, from, to int64, fill func([]byte)) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, to-from)
	fill(buf)
	if _, err := f.WriteAt(buf, from); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusesDamagedFiles damages a real database file the ways disks
// and interrupted copies do and checks that Open (what 'berth serve' calls)
// and Check both refuse it with ErrCorrupt, naming the file and the damage,
// instead of crashing or starting empty.
func TestOpenRefusesDamagedFiles(t *testing.T) {
	page := int64(os.Getpagesize())
	zero := func(b []byte) { clear(b) }
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, size int64)
		want   string
	}{
		{"empty", func(t *testing.T, path string, _ int64) { os.Truncate(path, 0) }, "empty (0 bytes)"},
		// bbolt grows the file ahead of its high-water mark, so the cut
		// must be well inside the data to be a truncation.
		{"truncated to 8 pages", func(t *testing.T, path string, _ int64) { os.Truncate(path, 8*page) }, "truncated"},
		{"truncated mid-page", func(t *testing.T, path string, _ int64) { os.Truncate(path, 20*page+100) }, "truncated"},
		{"shorter than a header", func(t *testing.T, path string, _ int64) { os.Truncate(path, 100) }, "header"},
		{"both header pages overwritten", func(t *testing.T, path string, _ int64) {
			overwrite(t, path, 0, 2*page, func(b []byte) {
				for i := range b {
					b[i] = 0xA5
				}
			})
		}, "header (meta) page"},
		// After a crash there is no clean-close marker: Open walks the pages.
		{"second half zeroed after a crash", func(t *testing.T, path string, size int64) {
			os.Remove(path + ".clean")
			overwrite(t, path, size/2/page*page, size, zero)
		}, "is broken"},
		{"second half random after a crash", func(t *testing.T, path string, size int64) {
			os.Remove(path + ".clean")
			overwrite(t, path, size/2/page*page, size, func(b []byte) { rand.New(rand.NewSource(1)).Read(b) })
		}, "is broken"},
		// Written over later, after a clean close: the marker no longer
		// matches the file's mtime (set explicitly: the test runs within
		// one timestamp tick of the close).
		{"second half zeroed after a clean close", func(t *testing.T, path string, size int64) {
			overwrite(t, path, size/2/page*page, size, zero)
			later := time.Now().Add(2 * time.Second)
			os.Chtimes(path, later, later)
		}, "is broken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, size := filledDB(t, 5000)
			if err := store.Check(path); err != nil {
				t.Fatalf("the undamaged file fails the check: %v", err)
			}
			tc.damage(t, path, size)
			db, err := store.Open(path, store.Options{})
			if err == nil {
				db.Close()
				t.Fatal("Open accepted the damaged file")
			}
			for _, e := range []error{err, store.Check(path)} {
				if !errors.Is(e, store.ErrCorrupt) {
					t.Fatalf("got %v, want ErrCorrupt", e)
				}
				if msg := e.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, tc.want) {
					t.Errorf("message %q should name %s and say %q", msg, path, tc.want)
				}
			}
			if !strings.Contains(err.Error(), "berth check") {
				t.Errorf("Open's message %q should point to 'berth check'", err)
			}
			if info, _ := os.Stat(path); info.Size() == 0 && tc.name != "empty" {
				t.Error("the damaged file was emptied")
			}
		})
	}
}

func TestCheckHealthyAndMissing(t *testing.T) {
	path, _ := filledDB(t, 2000)
	if err := store.Check(path); err != nil {
		t.Fatalf("healthy file: %v", err)
	}
	// Open after Check works: Check holds no lock once done.
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// While Berth holds the file, Check says so.
	if err := store.Check(path); !errors.Is(err, store.ErrLocked) {
		t.Errorf("Check on an open file: got %v, want ErrLocked", err)
	}
	db.Close()
	if err := store.Check(filepath.Join(t.TempDir(), "nope.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want ErrNotExist", err)
	}
}

// TestCleanCloseMarker: a clean close leaves a marker that lets the next
// Open skip its page walk; Open consumes it, so a crash leaves none.
func TestCleanCloseMarker(t *testing.T) {
	path, _ := filledDB(t, 1000)
	if _, err := os.Stat(path + ".clean"); err != nil {
		t.Fatalf("no marker after a clean close: %v", err)
	}
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".clean"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the marker outlived Open: %v", err)
	}
	if err := db.Write(store.PutRaw(store.Meta, "k", []byte("v"))); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Check walks whatever the marker says and leaves it in place.
	if err := store.Check(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".clean"); err != nil {
		t.Fatalf("Check consumed the marker: %v", err)
	}
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	db.View(func(tx *store.Tx) error { got = tx.GetRaw(store.Meta, "k"); return nil })
	db.Close()
	if string(got) != "v" {
		t.Fatalf("k = %q after reopening", got)
	}
}
