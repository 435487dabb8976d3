package testutil

import "syscall"

// procAttr makes a started process die with the test binary: a binary
// killed by its -timeout (or by anything else) leaves no runner or
// container behind to load the machine for the tests after it. Linux
// sends the signal when the thread that started the process exits; Go
// ends threads only with the whole process, or a goroutine that exits
// locked to one, which the tests do not do.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
