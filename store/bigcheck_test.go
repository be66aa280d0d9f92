package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestStartupCheckCost measures the start-up check on a file of
// BERTH_CHECK_JOBS jobs (a million for the README's figure); it is skipped
// unless that is set. BERTH_CHECK_FILE keeps the file between runs.
func TestStartupCheckCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BERTH_CHECK_JOBS"))
	if n == 0 {
		t.Skip("set BERTH_CHECK_JOBS (and BERTH_CHECK_FILE to keep the file) to measure")
	}
	path := os.Getenv("BERTH_CHECK_FILE")
	if path == "" {
		path = filepath.Join(t.TempDir(), "berth.db")
	}
	if _, err := os.Stat(path); err != nil {
		db, err := Open(path, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := 0; i < n; i += 5000 {
			var ops []Op
			for k := i; k < i+5000 && k < n; k++ {
				j := Job{ID: fmt.Sprintf("%08x-7d3c-7000-8000-%012x", k, k), EndpointID: "abcdefghijklmn", Seq: uint64(k + 1), Status: InQueue,
					CreatedAt: time.Now(), QueuedAt: time.Now(), ExpiresAt: time.Now().Add(24 * time.Hour), ExecutionTimeoutMs: 600000,
					Input: []byte(`{"prompt":"a photograph of an astronaut riding a horse","steps":30,"seed":12345}`)}
				ops = append(ops, PutJob(&j)...)
			}
			if err := db.Write(ops...); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("filled %d jobs in %v", n, time.Since(start))
	}
	info, _ := os.Stat(path)
	t.Logf("file %d MB", info.Size()>>20)
	for round := 0; round < 3; round++ {
		b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		b.View(func(tx *bolt.Tx) error {
			start, cpu := time.Now(), cpuTime()
			if err := walk(path, tx); err != nil {
				t.Fatal(err)
			}
			w, wc := time.Since(start), cpuTime()-cpu
			start, cpu = time.Now(), cpuTime()
			if err := structure(path, tx); err != nil {
				t.Fatal(err)
			}
			t.Logf("walk %v (CPU %v), structure %v (CPU %v)", w, wc, time.Since(start), cpuTime()-cpu)
			return nil
		})
		b.Close()
		start, cpu := time.Now(), cpuTime()
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Open %v (CPU %v)", time.Since(start), cpuTime()-cpu)
		db.Close()
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
