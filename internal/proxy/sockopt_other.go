//go:build !linux

package proxy

import "time"

// Off Linux no listener is ever made (see accept_other.go); the socket options fail with the
// same error, so that a dial does not quietly go without them.

func setListenerSockopts(int, time.Duration) error { return errNotLinux }
func setKeepAliveTimes(int, time.Duration) error   { return errNotLinux }
