// Package shm is the test programs' probe of /dev/shm (echoworker's
// shm_write_bytes, testprog's shm mode): its size, and a write through a
// shared mapping as PyTorch's shared tensors make.
package shm

import (
	"fmt"
	"os"
	"syscall"
)

// Write reports the size of /dev/shm and writes n bytes to a file there
// through a shared mapping, touching every page (shm_open, ftruncate, mmap:
// what torch.multiprocessing does); the file is removed afterwards.
func Write(n int64) (size int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil {
		return 0, fmt.Errorf("statfs /dev/shm: %w", err)
	}
	size = int64(st.Blocks) * st.Bsize
	if n <= 0 {
		return size, nil
	}
	f, err := os.CreateTemp("/dev/shm", "shm-")
	if err != nil {
		return size, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := f.Truncate(n); err != nil {
		return size, err
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return size, fmt.Errorf("mmap %d bytes of /dev/shm: %w", n, err)
	}
	defer syscall.Munmap(m)
	for i := 0; i < len(m); i += 4096 {
		m[i] = 1
	}
	return size, nil
}
