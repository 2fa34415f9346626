//go:build !linux

package proc

import "syscall"

// dieWithParent does nothing off Linux, which has no parent-death signal: a child outlives a
// run that crashed.
func dieWithParent(*syscall.SysProcAttr) {}
