package pgwire

import "syscall"

var interrupt = syscall.SIGINT
