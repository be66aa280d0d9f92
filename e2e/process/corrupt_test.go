package process_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth/internal/proctest"
	"berth/store"
)

// TestServeRefusesDamagedDatabase runs the real binary on a berth.db that
// was truncated or had pages zeroed: 'berth serve' must exit non-zero at
// once with a message naming the file and the damage, and leave the file as
// it was; 'berth check' must report the same and succeed on a sound file.
func TestServeRefusesDamagedDatabase(t *testing.T) {
	t.Parallel() // a process of its own: overlaps the other binaries' tests
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	page := int64(os.Getpagesize())
	for _, tc := range []struct {
		name   string
		damage func(path string, size int64) error
		want   string
	}{
		// The page tree stays whole; one record's bytes are zeroed (every
		// /v2/registries call answered 500 when this passed serve and check).
		{"zeroed inside a record", func(path string, _ int64) error {
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			at := strings.Index(string(raw), "[[SECRET]]")
			if at < 0 {
				return errors.New("record not found in the file")
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err = f.WriteAt(make([]byte, 4096), int64(at+8192)); err != nil {
				return err
			}
			later := time.Now().Add(2 * time.Second)
			return os.Chtimes(path, later, later)
		}, "bucket registry_auths key reg1: the record is damaged: checksum mismatch"},
		{"truncated", func(path string, _ int64) error { return os.Truncate(path, 8*page) }, "truncated"},
		{"zeroed pages", func(path string, size int64) error {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			// Every page after the two meta pages: where the live pages lie
			// depends on how the writes were batched, so zero them all.
			from := 2 * page
			if _, err = f.WriteAt(make([]byte, size-from), from); err != nil {
				return err
			}
			// Later than the clean close, as any later write would be
			// (the test runs within one timestamp tick of it).
			later := time.Now().Add(2 * time.Second)
			return os.Chtimes(path, later, later)
		}, "is broken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			path := filepath.Join(data, "berth.db")
			db, err := store.Open(path, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4000; i++ {
				db.WriteAsync(store.PutRaw(store.Meta, fmt.Sprintf("filler-%06d", i), []byte(strings.Repeat("y", 200))))
			}
			// A record over several pages.
			db.WriteAsync(store.Put(store.RegistryAuths, "reg1", store.RegistryAuth{ID: "reg1", Username: "u", Password: "[[SECRET]]" + strings.Repeat("s", 20000)}))
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if out, code := proctest.Run(t, keyEnv, "check", "--data", data); code != 0 || !strings.Contains(out, path+": ok") {
				t.Fatalf("check of the sound file: exit %d\n%s", code, out)
			}
			info, _ := os.Stat(path)
			if err := tc.damage(path, info.Size()); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(path)

			out, code := proctest.Run(t, keyEnv, "serve", "--addr", "127.0.0.1:0", "--data", data)
			if code == 0 || !strings.Contains(out, path) || !strings.Contains(out, tc.want) || !strings.Contains(out, "berth check") {
				t.Errorf("serve: exit %d; want non-zero and a message naming %s, %q and 'berth check':\n%s", code, path, tc.want, out)
			}
			if strings.Contains(out, "goroutine ") || strings.Contains(out, "berth serving") {
				t.Errorf("serve crashed or served instead of refusing:\n%s", out)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Error("serve changed the damaged file")
			}

			out, code = proctest.Run(t, keyEnv, "check", "--data", data)
			if code == 0 || !strings.Contains(out, path) || !strings.Contains(out, tc.want) {
				t.Errorf("check: exit %d; want non-zero and a message naming %s and %q:\n%s", code, path, tc.want, out)
			}
		})
	}
}
