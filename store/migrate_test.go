package store

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestOpenMigratesFileWithoutJobIndex writes a file the way Berth did before
// the job index (the same buckets less job_index, no layout key, job records
// only) and checks Open builds the index: every job, in submission order,
// with what the queue needs, and the records untouched.
func TestOpenMigratesFileWithoutJobIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "berth.db")
	old, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var want []Job
	err = old.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if name == JobIndex {
				continue
			}
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		// Ids do not sort like the sequence: the index must follow Seq.
		for i, st := range []JobStatus{InQueue, InProgress, Completed, InQueue, InQueue} {
			j := Job{ID: fmt.Sprintf("job-%d", 9-i), EndpointID: "ep" + fmt.Sprint(i%2), Seq: uint64(10 + i), Status: st,
				LowPriority: i == 3, CreatedAt: now, QueuedAt: now.Add(time.Duration(i) * time.Second),
				ExpiresAt: now.Add(24 * time.Hour), Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
			if st != InQueue || i == 4 {
				j.WorkerID = "w1"
			}
			raw, _ := j.MarshalJSON()
			if err := tx.Bucket([]byte(Jobs)).Put([]byte(j.ID), raw); err != nil {
				return err
			}
			want = append(want, j)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	old.Close()

	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []JobEntry
	err = db.ScanJobIndex(func(e JobEntry, load func() (Job, json.RawMessage, error)) error {
		got = append(got, e)
		rec, input, err := load()
		if err != nil || rec.ID != e.ID || string(input) != string(rec.Input) {
			t.Errorf("load %s: %+v %s %v", e.ID, rec, input, err)
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("index has %d entries, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.ID || g.EndpointID != w.EndpointID || g.Seq != w.Seq || g.Status != w.Status ||
			g.LowPriority != w.LowPriority || g.HasWorker != (w.WorkerID != "") ||
			!g.QueuedAt.Equal(w.QueuedAt) || !g.ExpiresAt.Equal(w.ExpiresAt) {
			t.Errorf("entry %d = %+v, want from %+v", i, g, w)
		}
	}
	if err := db.Check(); err != nil {
		t.Fatal(err)
	}
	// A second open finds the layout current and leaves the index alone.
	db.Close()
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	db.ScanJobIndex(func(JobEntry, func() (Job, json.RawMessage, error)) error { n++; return nil }, nil)
	if n != len(want) {
		t.Fatalf("after reopening: %d entries", n)
	}
}

func TestPutJobAndDeleteJobKeepIndexInStep(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "berth.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	j := Job{ID: "a", EndpointID: "ep", Seq: 7, Status: InQueue, ExpiresAt: time.Unix(100, 5)}
	if err := db.Write(PutJob(&j)...); err != nil {
		t.Fatal(err)
	}
	j.Status, j.WorkerID = Completed, "w"
	if err := db.Write(PutJob(&j)...); err != nil {
		t.Fatal(err)
	}
	var got []JobEntry
	db.ScanJobIndex(func(e JobEntry, _ func() (Job, json.RawMessage, error)) error { got = append(got, e); return nil }, nil)
	if len(got) != 1 || got[0].Status != Completed || !got[0].HasWorker || !got[0].ExpiresAt.Equal(j.ExpiresAt) {
		t.Fatalf("index %+v", got)
	}
	if err := db.Write(DeleteJob(j.ID, j.Seq)...); err != nil {
		t.Fatal(err)
	}
	got = nil
	db.ScanJobIndex(func(e JobEntry, _ func() (Job, json.RawMessage, error)) error { got = append(got, e); return nil }, nil)
	if _, _, err := db.LoadJob("a"); len(got) != 0 || err == nil {
		t.Fatalf("after delete: index %+v, load err %v", got, err)
	}
}
