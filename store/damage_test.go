package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"berth/store"
)

// recordsDB writes a database of every kind of record, some larger than a
// page (their values run over overflow pages), closes it cleanly and
// returns its path. Each big value holds a marker findable in the file.
func recordsDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "berth.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	big := func(tag string) string { return "[[" + tag + "]]" + strings.Repeat("z", 20<<10) + "[[/" + tag + "]]" }
	ops := []store.Op{
		store.Put(store.RegistryAuths, "reg1", store.RegistryAuth{ID: "reg1", Name: "r", Username: "u", Password: big("REGISTRY")}),
		store.Put(store.Templates, "tpl1", store.Template{ID: "tpl1", Name: "t", ImageName: "i", Readme: big("TEMPLATE")}),
		store.Put(store.Endpoints, "ep1", store.Endpoint{ID: "ep1", TemplateID: "tpl1"}),
	}
	for i := range 300 {
		j := store.Job{ID: fmt.Sprintf("job-%04d", i), EndpointID: "ep1", Seq: uint64(i + 1), Status: store.Completed,
			CreatedAt: time.Unix(1, 0), QueuedAt: time.Unix(1, 0), ExpiresAt: time.Unix(1e9, 0), RetainUntil: time.Unix(1e9, 0)}
		if i%100 == 7 {
			j.Output = []byte(`"` + big(fmt.Sprintf("OUTPUT%d", i)) + `"`)
		}
		ops = append(ops, store.PutJob(&j)...)
	}
	if err := db.Write(ops...); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// zeroInside zeroes 4 KiB in the middle of the value tagged tag.
func zeroInside(t *testing.T, path, tag string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(raw, []byte("[["+tag+"]]"))
	if at < 0 {
		t.Fatalf("%s not found in the file", tag)
	}
	overwrite(t, path, int64(at+8<<10), int64(at+12<<10), func(b []byte) { clear(b) })
}

// A zeroed 4 KiB inside a record's overflow pages leaves bbolt's page tree
// whole: 'berth check' and Open passed it, and every read of the record
// failed. Now check names the bucket and key, Open refuses a damaged
// record outside the job buckets, and a damaged job record is named by
// the background walk (Verify) of a running Berth.
func TestDamagedRecordIsFound(t *testing.T) {
	t.Run("registry", func(t *testing.T) {
		path := recordsDB(t)
		zeroInside(t, path, "REGISTRY")
		err := store.Check(path)
		if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "bucket registry_auths key reg1: the record is damaged: checksum mismatch") {
			t.Fatalf("check: %v", err)
		}
		_, err = store.Open(path, store.Options{})
		if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "bucket registry_auths key reg1") || !strings.Contains(err.Error(), "berth check") {
			t.Fatalf("open: %v", err)
		}
	})
	t.Run("job", func(t *testing.T) {
		path := recordsDB(t)
		zeroInside(t, path, "OUTPUT107")
		if err := store.Check(path); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "bucket jobs key job-0107: the record is damaged: checksum mismatch") {
			t.Fatalf("check: %v", err)
		}
		db, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatalf("open (jobs are decoded in the background): %v", err)
		}
		defer db.Close()
		var found []store.Problem
		n, err := db.Verify(context.Background(), func(p store.Problem) { found = append(found, p) })
		if err != nil || n < 600 {
			t.Fatalf("verify: %d records, %v", n, err)
		}
		if len(found) != 1 || found[0].Bucket != store.Jobs || found[0].Key != "job-0107" || found[0].Page {
			t.Fatalf("problems %v", found)
		}
		if err := db.Write(store.PutRaw(store.Meta, "k", []byte("v"))); err != nil {
			t.Fatalf("a damaged record (not page) stops writes: %v", err)
		}
	})
}

// copyFile copies src to dst with src's mtime, and the clean-close marker
// with it: the copy is "as a clean close left it".
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	for _, suffix := range []string{"", ".clean"} {
		b, err := os.ReadFile(src + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	restoreMtime(t, src, dst)
}

func restoreMtime(t *testing.T, src, dst string) {
	t.Helper()
	info, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// Bit rot after a clean stop: the file's size and mtime are as the
// clean-close marker says, so Open skips its page walk. It crashed the
// process on the first write (bbolt's "assertion failed"). Every page of a
// real file is zeroed in turn, as bit rot would leave it: no open, write or
// read crashes, and the damage to every page in use is found — Open
// refuses the file (the header pages' checksums, the free-page list, the
// pages a write goes through, every record outside the jobs), or a write
// is refused with ErrCorrupt, or the background walk names it.
func TestBitRotAfterCleanStopIsFound(t *testing.T) {
	clean := recordsDB(t)
	ro, err := bolt.Open(clean, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var pages int
	free := map[int]bool{}
	ro.View(func(tx *bolt.Tx) error {
		pages = int(tx.Size() / int64(ro.Info().PageSize))
		for id := 2; id < pages; id++ {
			if p, err := tx.Page(id); err == nil && p != nil && p.Type == "free" {
				free[id] = true
			}
		}
		return nil
	})
	ro.Close()
	page := int64(os.Getpagesize())
	how := map[string]int{}
	dir := t.TempDir()
	for id := 0; id < pages; id++ {
		path := filepath.Join(dir, fmt.Sprintf("p%d.db", id))
		copyFile(t, clean, path)
		overwrite(t, path, int64(id)*page, int64(id+1)*page, func(b []byte) { clear(b) })
		restoreMtime(t, clean, path)
		found := damageFound(t, path)
		how[found]++
		if found == "" && !free[id] {
			t.Errorf("page %d (in use) zeroed: nothing found", id)
		}
		os.Remove(path)
		os.Remove(path + ".clean")
	}
	t.Logf("%d pages, %d free: found by %v", pages, len(free), how)
}

// damageFound opens path, writes and verifies it as a running Berth would
// and says what found the damage ("" for nothing).
func damageFound(t *testing.T, path string) string {
	db, err := store.Open(path, store.Options{Logger: discardLogger()})
	if err != nil {
		if !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: open: %v, want ErrCorrupt", path, err)
		}
		return "open"
	}
	defer db.Close()
	found := ""
	for i := range 50 {
		j := store.Job{ID: fmt.Sprintf("new-%04d", i), EndpointID: "ep1", Seq: uint64(1000 + i), Status: store.InQueue}
		if err := db.Write(store.PutJob(&j)...); err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("%s: write: %v, want ErrCorrupt", path, err)
			}
			found = "write"
			break
		}
	}
	n := 0
	if _, err := db.Verify(context.Background(), func(store.Problem) { n++ }); err != nil {
		t.Errorf("%s: verify: %v", path, err)
	}
	if found == "" && n > 0 {
		found = "verify"
	}
	return found
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
