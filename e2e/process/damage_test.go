package process_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"berth/internal/proctest"
	"berth/mgmt"
	"berth/store"
)

// The damage a disk can do that bbolt's own checks do not see, each tried
// against the real binary on a real file: 'berth serve' refuses what
// 'berth check' rejects, check finds what serve refuses, a changed record
// is found by its checksum and isolated, and 'berth check --repair' gives
// a file serve starts on.

const damageEP = "damageep00001"

// keyEnv is the environment of the processes these tests run to their end.
var keyEnv = []string{"BERTH_API_KEY=k"}

// damageJobID is the id of the i-th job of damageDB.
func damageJobID(i int) string { return fmt.Sprintf("0190a000-0000-7000-8000-%012d", i) }

// damageDB writes, through the store, an endpoint and n finished jobs
// (output {"n":i,"tag":"[[OUT-i]]"}), closes it cleanly and returns the data
// directory.
func damageDB(t *testing.T, n int) string {
	t.Helper()
	data := t.TempDir()
	db, err := store.Open(filepath.Join(data, "berth.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := mgmt.NewEndpointDefaults()
	e.ID, e.Name, e.TemplateID, e.CreatedAt = damageEP, "damage", "damagetpl", time.Now().UTC()
	ops := []store.Op{
		store.Put(store.Templates, "damagetpl", store.Template{ID: "damagetpl", Name: "damage", ImageName: "x", IsServerless: true, CreatedAt: e.CreatedAt}),
		store.Put(store.Endpoints, e.ID, e),
	}
	now := time.Now().UTC()
	for i := 0; i < n; i++ {
		j := store.Job{ID: damageJobID(i), EndpointID: damageEP, Seq: uint64(i + 1), Status: store.Completed,
			CreatedAt: now, QueuedAt: now, StartedAt: now, CompletedAt: now, ExpiresAt: now.Add(time.Hour), RetainUntil: now.Add(time.Hour),
			ExecutionTimeoutMs: 600000, Attempts: 1, Output: json.RawMessage(fmt.Sprintf(`{"n":%d,"tag":"[[OUT-%d]]"}`, 10000+i, i))}
		ops = append(ops, store.PutJob(&j)...)
	}
	if err := db.Write(ops...); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return data
}

// serveData starts 'berth serve' on data.
func serveData(t *testing.T, data string) *served {
	t.Helper()
	return &served{proctest.Start(t, proctest.Options{Data: data, Key: "k", Args: []string{"--rate-limits=off"}})}
}

// served is a running 'berth serve' (Stop: a clean close) with the
// calls of these tests.
type served struct{ *proctest.Berth }

func (s *served) call(method, path string) (int, http.Header, string) {
	req, _ := http.NewRequest(method, s.Base+path, nil)
	req.Header.Set("Authorization", "Bearer k")
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// patchFile replaces the first occurrence of old by new (same length) in
// the file, keeping its mtime: as bit rot leaves it, so the clean-close
// marker still vouches for it.
func patchFile(t *testing.T, path, old, new string) {
	t.Helper()
	if len(old) != len(new) {
		t.Fatal("patch must keep the length")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(raw, []byte(old))
	if at < 0 {
		t.Fatalf("%q not in the file", old)
	}
	writeAtKeepMtime(t, path, int64(at), []byte(new))
}

func writeAtKeepMtime(t *testing.T, path string, at int64, b []byte) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(path, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// TestServeRefusesBranchPageDamage changes one branch page of the jobs
// bucket the two ways that leave every page readable: a key (so look-ups
// go down the wrong child) and a child pointer (a leaf reached twice,
// another not at all). 'berth serve' started on both and answered 404 for
// hundreds of jobs while 'berth check' rejected the file. Now serve refuses
// both, as check does; 'berth check --repair' writes a copy serve starts
// on.
func TestServeRefusesBranchPageDamage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	for _, tc := range []struct {
		name   string
		damage func(page []byte, elem func(i int) []byte, count int)
	}{
		{"key changed", func(page []byte, elem func(int) []byte, count int) {
			// The middle element's key starts past every other key.
			e := elem(count / 2)
			pos, ksize := binary.LittleEndian.Uint32(e), binary.LittleEndian.Uint32(e[4:])
			key := e[pos : pos+ksize]
			key[0] = '~'
		}},
		{"child pointer changed", func(page []byte, elem func(int) []byte, count int) {
			// The middle element points at its left neighbour's child.
			copy(elem(count / 2)[8:16], elem(count/2 - 1)[8:16])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := damageDB(t, 4001)
			path := filepath.Join(data, "berth.db")
			damageBranch(t, path, tc.damage)

			out, code := proctest.Run(t, keyEnv, "serve", "--addr", "127.0.0.1:0", "--data", data)
			if code == 0 || !strings.Contains(out, path) || !strings.Contains(out, "page tree is broken") || !strings.Contains(out, "berth check") {
				t.Fatalf("serve: exit %d; want it to refuse the file, naming it and the broken page tree:\n%s", code, out)
			}
			if strings.Contains(out, "berth serving") {
				t.Fatalf("serve served the damaged file:\n%s", out)
			}
			out, code = proctest.Run(t, keyEnv, "check", "--data", data)
			if code == 0 || !strings.Contains(out, "page tree is broken") || !strings.Contains(out, "--repair") {
				t.Fatalf("check: exit %d, want the damage and the way to repair it:\n%s", code, out)
			}
			out, code = proctest.Run(t, keyEnv, "check", "--repair", "--data", data)
			if code != 0 || !strings.Contains(out, "repaired") {
				t.Fatalf("check --repair: exit %d\n%s", code, out)
			}
			if out, code := proctest.Run(t, keyEnv, "check", "--data", data); code != 0 || !strings.Contains(out, ": ok") {
				t.Fatalf("check after the repair: exit %d\n%s", code, out)
			}
			s := serveData(t, data)
			found := 0
			for i := 0; i < 4001; i += 40 {
				if code, _, _ := s.call("GET", "/v2/"+damageEP+"/status/"+damageJobID(i)); code == 200 {
					found++
				}
			}
			// A key change loses nothing; a pointer change loses the
			// leaf nothing points at any more (compare with a backup).
			if found < 90 {
				t.Fatalf("after the repair only %d of 101 sampled jobs answer", found)
			}
		})
	}
}

// damageBranch applies damage to the root branch page of the jobs bucket,
// keeping the file's mtime (the clean-close marker still vouches for it).
func damageBranch(t *testing.T, path string, damage func(page []byte, elem func(i int) []byte, count int)) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	pageSize := b.Info().PageSize
	b.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket([]byte(store.Jobs)).Root())
		return nil
	})
	b.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(root) * int64(pageSize)
	page := raw[off : off+int64(pageSize)]
	if flags := binary.LittleEndian.Uint16(page[8:]); flags != 0x01 {
		t.Fatalf("the jobs bucket's root page %d is not a branch page (flags %#x)", root, flags)
	}
	count := int(binary.LittleEndian.Uint16(page[10:]))
	if count < 3 {
		t.Fatalf("root branch page has %d elements", count)
	}
	elem := func(i int) []byte { return page[16+16*i:] }
	damage(page, elem, count)
	writeAtKeepMtime(t, path, off, page)
}

// TestDamagedJobRecordIsFoundAndIsolated changes one job record after a
// clean stop: one byte that keeps its JSON valid (found by nothing before:
// the job answered with the changed output), or one that breaks it (its
// /status and the endpoint's whole job list answered 500). Now the record's
// checksum finds it: serve starts (jobs are verified as they are read and
// in the background), its /status is a 5xx naming the damage every time,
// the list leaves it out and says so (X-Berth-Damaged-Jobs, the queue
// view's damaged count, a log line, /metrics); 'berth check' names it and
// 'berth check --repair' sets it aside.
func TestDamagedJobRecordIsFoundAndIsolated(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	for _, tc := range []struct{ name, old, new string }{
		{"one byte, JSON still valid", `{"n":10007,`, `{"n":10008,`},
		{"undecodable", `{"n":10007,`, `{"n":1000x,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := damageDB(t, 20)
			path := filepath.Join(data, "berth.db")
			patchFile(t, path, tc.old, tc.new)
			bad, good := damageJobID(7), damageJobID(8)

			s := serveData(t, data)
			for round := 0; round < 2; round++ { // the second read fails as the first
				code, _, body := s.call("GET", "/v2/"+damageEP+"/status/"+bad)
				if code < 500 || !strings.Contains(body, "damaged") || !strings.Contains(body, bad) {
					t.Fatalf("status of the damaged job (read %d): %d %s", round+1, code, body)
				}
			}
			if code, _, body := s.call("GET", "/v2/"+damageEP+"/status/"+good); code != 200 || !strings.Contains(body, "10008") {
				t.Fatalf("status of a sound job: %d %s", code, body)
			}
			code, hdr, body := s.call("GET", "/v1/endpoints/"+damageEP+"/jobs?limit=100")
			var list []struct{ ID string }
			json.Unmarshal([]byte(body), &list)
			if code != 200 || len(list) != 19 || strings.Contains(body, bad) || hdr.Get("X-Berth-Damaged-Jobs") != "1" {
				t.Fatalf("job list: %d, %d jobs, X-Berth-Damaged-Jobs %q, want 200, 19 and 1:\n%s", code, len(list), hdr.Get("X-Berth-Damaged-Jobs"), body)
			}
			if code, _, body := s.call("GET", "/v1/endpoints/"+damageEP+"/queue"); code != 200 || !strings.Contains(body, `"damaged":1`) {
				t.Fatalf("queue view: %d %s", code, body)
			}
			if _, _, body := s.call("GET", "/metrics"); !strings.Contains(body, "berth_store_damaged_records 1") {
				t.Fatalf("metrics do not count the damaged record:\n%s", grepLines(body, "damaged"))
			}
			if logs := s.Logs.String(); !strings.Contains(logs, bad) || !strings.Contains(logs, "damaged") {
				t.Fatalf("no log line names the damaged job:\n%s", logs)
			}
			s.Stop()

			out, code := proctest.Run(t, keyEnv, "check", "--data", data)
			if code == 0 || !strings.Contains(out, "bucket jobs key "+bad+": the record is damaged: checksum mismatch") {
				t.Fatalf("check: exit %d\n%s", code, out)
			}
			out, code = proctest.Run(t, keyEnv, "check", "--repair", "--data", data)
			if code != 0 || !strings.Contains(out, "set aside") {
				t.Fatalf("check --repair: exit %d\n%s", code, out)
			}
			aside, _ := filepath.Glob(path + ".damaged-*.jsonl")
			if len(aside) != 1 {
				t.Fatalf("set-aside files %v", aside)
			}
			if b, _ := os.ReadFile(aside[0]); !strings.Contains(string(b), bad) {
				t.Fatalf("the set-aside file does not hold the damaged record:\n%s", b)
			}
			if out, code := proctest.Run(t, keyEnv, "check", "--data", data); code != 0 {
				t.Fatalf("check after the repair: exit %d\n%s", code, out)
			}
			s = serveData(t, data)
			if code, _, body := s.call("GET", "/v2/"+damageEP+"/status/"+bad); code != 404 {
				t.Fatalf("the job set aside: %d %s, want 404", code, body)
			}
			if code, hdr, _ := s.call("GET", "/v1/endpoints/"+damageEP+"/jobs?limit=100"); code != 200 || hdr.Get("X-Berth-Damaged-Jobs") != "" {
				t.Fatalf("job list after the repair: %d, X-Berth-Damaged-Jobs %q", code, hdr.Get("X-Berth-Damaged-Jobs"))
			}
		})
	}
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestCheckFindsMetaPageDamage damages the newer header (meta) page after a
// clean stop. bbolt silently reads the older one; serve refused (the
// clean-close marker) and told to run 'berth check', which said "ok". Now
// check finds it too, and --repair writes a copy from the valid page.
func TestCheckFindsMetaPageDamage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	data := damageDB(t, 20)
	path := filepath.Join(data, "berth.db")
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var txid int
	b.View(func(tx *bolt.Tx) error { txid = tx.ID(); return nil })
	pageSize := b.Info().PageSize
	b.Close()
	// The newer meta page: the one whose txid is txid (0 or 1). Flip a
	// byte of its root pointer.
	raw, _ := os.ReadFile(path)
	newer := int64(0)
	if binary.LittleEndian.Uint64(raw[int64(pageSize)+16+48:]) == uint64(txid) {
		newer = 1
	}
	at := newer*int64(pageSize) + 16 + 16
	writeAtKeepMtime(t, path, at, []byte{raw[at] ^ 0x01})

	out, code := proctest.Run(t, keyEnv, "serve", "--addr", "127.0.0.1:0", "--data", data)
	if code == 0 || !strings.Contains(out, "header (meta) page") || !strings.Contains(out, "berth check") {
		t.Fatalf("serve: exit %d\n%s", code, out)
	}
	out, code = proctest.Run(t, keyEnv, "check", "--data", data)
	if code == 0 || !strings.Contains(out, fmt.Sprintf("header (meta) page %d is invalid", newer)) {
		t.Fatalf("check: exit %d, want the damaged header page named\n%s", code, out)
	}
	if out, code = proctest.Run(t, keyEnv, "check", "--repair", "--data", data); code != 0 {
		t.Fatalf("check --repair: exit %d\n%s", code, out)
	}
	if out, code = proctest.Run(t, keyEnv, "check", "--data", data); code != 0 {
		t.Fatalf("check after the repair: exit %d\n%s", code, out)
	}
	s := serveData(t, data)
	if code, _, body := s.call("GET", "/v2/"+damageEP+"/status/"+damageJobID(3)); code != 200 || !strings.Contains(body, "10003") {
		t.Fatalf("a job after the repair: %d %s", code, body)
	}
}
