package store

import (
	"bytes"
	"context"
	"encoding/json"
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
)

// TestOldFileIsSealedOnOpen writes a file as Berth wrote it before record
// checksums (plain JSON values, more than one sealing transaction's worth)
// and opens it: every value is then in its envelope, reads give the same
// records, and the file is marked sealed, so from then on a value without
// the envelope is damage.
func TestOldFileIsSealedOnOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	old, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := sealChunk + 500
	err = old.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		tx.Bucket([]byte(Meta)).Put([]byte(layoutKey), []byte(layoutVersion))
		tx.Bucket([]byte(Templates)).Put([]byte("tpl"), []byte(`{"id":"tpl","name":"old"}`))
		for i := 0; i < n; i++ {
			j := Job{ID: fmt.Sprintf("job-%06d", i), EndpointID: "ep", Seq: uint64(i + 1), Status: Completed, RetainUntil: time.Unix(1e9, 0)}
			raw, _ := j.MarshalJSON()
			tx.Bucket([]byte(Jobs)).Put([]byte(j.ID), raw)
			tx.Bucket([]byte(JobIndex)).Put(indexKey(j.Seq, j.ID), j.Entry().encode())
		}
		return nil
	})
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(path); err != nil {
		t.Fatalf("check of the old file (records without checksums are accepted): %v", err)
	}
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var tpl Template
	if err := db.View(func(tx *Tx) error { return tx.Get(Templates, "tpl", &tpl) }); err != nil || tpl.Name != "old" {
		t.Fatalf("template after sealing: %+v %v", tpl, err)
	}
	if j, _, err := db.LoadJob("job-010400"); err != nil || j.Seq != 10401 {
		t.Fatalf("job after sealing: %+v %v", j, err)
	}
	entries := 0
	db.ScanJobIndex(func(JobEntry, func() (Job, json.RawMessage, error)) error { entries++; return nil }, nil)
	if entries != n {
		t.Fatalf("index entries after sealing: %d, want %d", entries, n)
	}
	db.Close()
	ro, _ := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	defer ro.Close()
	ro.View(func(tx *bolt.Tx) error {
		if !sealedFile(tx) {
			t.Error("the file is not marked sealed")
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if len(v) < sealSize || v[0] != sealTag {
					t.Errorf("%s/%s has no checksum", name, k)
				}
				return nil
			})
		})
	})
}

// A one-byte change inside a record that keeps its JSON valid is found by
// every reader: Get and LoadJob fail with ErrDamaged naming it (counted
// once, however often it is read), ForEach leaves it out, Verify and Check
// name it, and Repair writes a copy without it (its job whole) that passes
// the check.
func TestChangedRecordIsFoundByEveryReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	db, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var ops []Op
	for i := 0; i < 5; i++ {
		j := Job{ID: fmt.Sprintf("job-%d", i), EndpointID: "ep", Seq: uint64(i + 1), Status: Completed, Output: json.RawMessage(fmt.Sprintf(`{"v":%d}`, 1000+i))}
		ops = append(ops, PutJob(&j)...)
		ops = append(ops, Put(Templates, fmt.Sprintf("tpl-%d", i), Template{ID: fmt.Sprintf("tpl-%d", i), Readme: fmt.Sprintf("readme %d", 500+i)}))
	}
	if err := db.Write(ops...); err != nil {
		t.Fatal(err)
	}
	db.Close()
	flip := func(old, new string) {
		raw, _ := os.ReadFile(path)
		at := bytes.Index(raw, []byte(old))
		if at < 0 {
			t.Fatalf("%q not in the file", old)
		}
		f, _ := os.OpenFile(path, os.O_WRONLY, 0)
		f.WriteAt([]byte(new), int64(at))
		f.Close()
	}
	flip(`{"v":1002}`, `{"v":1003}`)
	err = Check(path)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "bucket jobs key job-2: the record is damaged: checksum mismatch") {
		t.Fatalf("check: %v", err)
	}
	db, err = Open(path, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("open (jobs are verified as they are read): %v", err)
	}
	for range 3 {
		_, _, err := db.LoadJob("job-2")
		var de *DamagedError
		if !errors.Is(err, ErrDamaged) || !errors.As(err, &de) || de.Key != "job-2" || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("LoadJob: %v", err)
		}
	}
	if _, _, err := db.LoadJob("job-3"); err != nil {
		t.Fatalf("a sound job: %v", err)
	}
	n := 0
	db.Scan(Jobs, func(string, []byte) error { n++; return nil })
	if n != 4 || db.Stats().DamagedRecords != 1 {
		t.Fatalf("scan saw %d records, %d damaged; want 4 and 1", n, db.Stats().DamagedRecords)
	}
	var found []Problem
	db.Verify(context.Background(), func(p Problem) { found = append(found, p) })
	if len(found) != 1 || found[0].Key != "job-2" {
		t.Fatalf("verify: %v", found)
	}
	db.Close()

	// A damaged template (outside the jobs) refuses the file.
	flip(`readme 501`, `readme 502`)
	if _, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "bucket templates key tpl-1: the record is damaged") {
		t.Fatalf("open with a damaged template: %v", err)
	}

	var aside bytes.Buffer
	out := filepath.Join(t.TempDir(), "repaired.db")
	rep, err := Repair(path, out, &aside)
	if err != nil {
		t.Fatal(err)
	}
	// job-2's record, and with it its index entry; tpl-1.
	if rep.SetAside != 3 || !strings.Contains(aside.String(), `"key":"job-2"`) || !strings.Contains(aside.String(), `"key":"tpl-1"`) {
		t.Fatalf("repair: %+v\n%s", rep, aside.String())
	}
	if err := Check(out); err != nil {
		t.Fatalf("the repaired copy: %v", err)
	}
	db, err = Open(out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entries := 0
	db.ScanJobIndex(func(JobEntry, func() (Job, json.RawMessage, error)) error { entries++; return nil }, nil)
	if _, _, err := db.LoadJob("job-2"); !errors.Is(err, ErrNotFound) || entries != 4 {
		t.Fatalf("repaired copy: job-2 %v, %d index entries", err, entries)
	}
}
