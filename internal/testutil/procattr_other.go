//go:build !linux

package testutil

import "syscall"

// DieWithParent does nothing off Linux, which has no parent-death signal: a child outlives a
// run that crashed.
func DieWithParent(*syscall.SysProcAttr) {}
