package dockertest

import "syscall"

// registrySysProcAttr kills the registry with the test binary, should it
// die without running its cleanups (a -timeout panic, say).
func registrySysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
