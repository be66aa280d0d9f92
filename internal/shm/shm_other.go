//go:build !linux

package shm

import "errors"

// Write is Linux only.
func Write(int64) (int64, error) { return 0, errors.New("shm_write_bytes: Linux only") }
