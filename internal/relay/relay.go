package relay

import (
	"errors"
	"syscall"
	"time"
)

// Conn is a connection whose socket the relay can take over (Start, Attach): a
// *net.TCPConn, or a socket served by package fdconn. The relay duplicates the fd through
// SyscallConn and closes the Conn, which takes the socket out of Go's poller.
type Conn interface {
	SyscallConn() (syscall.RawConn, error)
	Close() error
}

// Outcomes a Result can carry besides the empty one (both sides ended by themselves).
const (
	// OutcomeIdle: nothing moved either way for Options.IdleTimeout.
	OutcomeIdle = "idle_timeout"
	// OutcomeNotTLS: with Options.ExpectTLS, side B's first byte did not start a TLS record.
	OutcomeNotTLS = "backend_not_tls"
	// OutcomeShutdown is what callers usually pass to Pair.Stop.
	OutcomeShutdown = "shutdown"
)

// Options tune one pair.
type Options struct {
	// IdleTimeout ends the pair once no byte moved in either direction for this long
	// (checked a few times per timeout). Zero: never.
	IdleTimeout time.Duration
	// ExpectTLS checks the first byte side B sends: it must start a TLS record (handshake
	// or alert), or the pair ends with OutcomeNotTLS before A sees any of it. A passthrough
	// proxy uses this to catch backends that speak first in plaintext (MySQL greetings).
	ExpectTLS bool
}

// Result is what a pair did, passed to its done callback.
type Result struct {
	// Bytes written: [0] from A to B, [1] from B to A.
	Bytes [2]int64
	// Err is the first error that ended the pair, nil when it ended cleanly or by
	// Outcome. An error of one side's socket (a reset) reaches the other side as a reset
	// (see Pair.finish).
	Err error
	// Outcome is empty when both sides closed by themselves or on an error; see the
	// Outcome constants otherwise (or what Stop was given).
	Outcome string
	// FirstByte is side B's first byte when Outcome is OutcomeNotTLS.
	FirstByte byte
}

// ErrDialTimeout is the error of a Dial that did not connect within its timeout.
var ErrDialTimeout = errors.New("connect timed out")

// DialOptions tune Dial.
type DialOptions struct {
	// Timeout bounds the connect (required); it is enforced within a quarter of itself.
	Timeout time.Duration
	// KeepAlive is the TCP keepalive idle time; negative: none. It is set once the
	// connection has lived about a second (see keepAliveAfter), not at the connect.
	KeepAlive time.Duration
}

// Detached is a relayed pair taken off its loop whole (Pair.Detach), for another process to
// go on with (a live upgrade): both sockets, untouched, and what the relay held of them.
type Detached struct {
	// FD are the sockets, A and B: the caller's now (Resume takes them over).
	FD [2]int
	// Pending holds bytes read and not yet written: [0] from A for B, [1] from B for A.
	Pending [2][]byte
	// EOF: the direction's source has ended; Shut: its end was passed on (a half-close).
	EOF, Shut [2]bool
	// ExpectTLS: side B's first byte has not been checked yet (Options.ExpectTLS).
	ExpectTLS bool
	// Bytes written so far, as in Result.
	Bytes [2]int64
}

// ErrNotDetached is Detach's error for a pair it left running: it was not relaying (still
// dialing, routing, attaching), it is ending, or it holds more bytes in flight than asked.
var ErrNotDetached = errors.New("relay: pair not detachable now")
