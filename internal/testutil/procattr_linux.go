package testutil

import "syscall"

// DieWithParent has the kernel kill the child with SIGKILL when the process that started it
// dies (PR_SET_PDEATHSIG), so that a crashed or killed run leaves no server behind.
func DieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
