//go:build !linux

package main

import "errors"

func shmWrite(int64) (int64, error) { return 0, errors.New("shm_write_bytes: Linux only") }
