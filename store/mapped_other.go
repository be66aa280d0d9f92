//go:build !linux

package store

func (db *DB) releaseMapped() {}
