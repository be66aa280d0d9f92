// Package disktest gives tests a small file system that fills up: a tmpfs
// of a chosen size mounted for the test. Mounting needs root; without it
// the test is skipped with a message, or fails when BERTH_REQUIRE_DOCKER=1
// (CI runs as root and must not skip it).
package disktest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes under t.TempDir() and returns its
// path; it is unmounted when the test ends.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size))
	if err != nil {
		msg := fmt.Sprintf("cannot mount a tmpfs to fill (needs root: run as root, or in CI): %v", err)
		if os.Getenv("BERTH_REQUIRE_DOCKER") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			// Something still holds it (a child process): detach it.
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		}
	})
	return dir
}

// Fill writes zeros to path until the file system is full and returns the
// bytes written; remove the file to free the space again.
func Fill(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var n int64
	for {
		k, err := f.Write(buf)
		n += int64(k)
		if err != nil {
			return n
		}
	}
}

// Free is the space left on the file system holding path.
func Free(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}
