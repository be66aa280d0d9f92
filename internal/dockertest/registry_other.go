//go:build !linux

package dockertest

import "syscall"

func registrySysProcAttr() *syscall.SysProcAttr { return nil }
