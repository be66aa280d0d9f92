package store_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth/store"
)

// TestSnapshot: the snapshot is a complete, valid copy as of its moment
// (a later write is not in it), it has no name in the directory, and a
// directory without room for it and the reserve refuses it before writing.
func TestSnapshot(t *testing.T) {
	db := openTemp(t)
	dir := filepath.Dir(db.Path())
	if err := db.Write(store.Put(store.Templates, "before", store.Template{ID: "before", Name: "t", ImageName: "img"})); err != nil {
		t.Fatal(err)
	}
	f, size, err := db.Snapshot(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := db.Write(store.Put(store.Templates, "after", store.Template{ID: "after", Name: "t2", ImageName: "img"})); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), "snapshot") {
			t.Errorf("the snapshot has a name in the data directory: %s", e.Name())
		}
	}
	copyPath := filepath.Join(t.TempDir(), "berth.db")
	out, err := os.Create(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(out, f); err != nil || n != size {
		t.Fatalf("copied %d of %d bytes: %v", n, size, err)
	}
	out.Close()
	if err := store.Check(copyPath); err != nil {
		t.Fatalf("the snapshot: %v", err)
	}
	cp, err := store.Open(copyPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	var tpl store.Template
	if err := cp.View(func(tx *store.Tx) error { return tx.Get(store.Templates, "before", &tpl) }); err != nil {
		t.Errorf("the record written before: %v", err)
	}
	if err := cp.View(func(tx *store.Tx) error { return tx.Get(store.Templates, "after", &tpl) }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the record written after the snapshot: %v", err)
	}

	_, _, err = db.Snapshot(dir, 1<<60)
	var nse *store.NoSpaceError
	if !errors.As(err, &nse) || !errors.Is(err, store.ErrNoSpace) || nse.Need <= 1<<60 {
		t.Fatalf("without room: %v", err)
	}
}
