//go:build !linux

package testutil

import "syscall"

// procAttr is nil where there is no parent-death signal.
func procAttr() *syscall.SysProcAttr { return nil }
