package relay

import (
	"errors"
	"net/netip"
	"time"
)

// Errors of adopted clients, passed to Router.Release.
var (
	// ErrDeadline: the client's first bytes were not routed by the deadline its Acceptor gave.
	ErrDeadline = errors.New("preface deadline passed")
	// ErrPrefaceFull: the router still waited for more once a 16 KiB buffer was full.
	ErrPrefaceFull = errors.New("preface larger than the relay's buffer")
)

// OutcomeDialFailed ends an adopted pair whose router gave up dialing (Result.Err says why).
const OutcomeDialFailed = "dial_failed"

// OutcomeClosed ends an adopted pair its router closed (a Close verdict).
const OutcomeClosed = "closed"

// Acceptor is told of every connection the loops accept on a Listener. Its methods run on
// a loop and must not block: the loop's other pairs wait meanwhile.
type Acceptor interface {
	// Accepted gets a new client socket (non-blocking, close-on-exec, with the options the
	// listening socket passes on) and the client's address. It returns the router and tag
	// the loop adopts the socket with and the time by which its first bytes must be
	// routed; ok false when Accepted took the socket itself (closed it).
	Accepted(fd int, peer netip.AddrPort) (rt Router, tag any, deadline time.Time, ok bool)
	// Failed reports an accept error that is not one client's (out of file descriptors,
	// say): the loop stops accepting on the listener for a while (5 ms, doubling up to 1 s
	// while the errors go on) instead of spinning on it.
	Failed(err error)
}

// Router decides where the clients a Listener accepted go, from the first bytes they send.
// Route, Dialed and Done run on a loop goroutine and must not block: the loop's other
// pairs wait meanwhile. tag is what the Acceptor gave.
//
// For every adopted client exactly one of Release and Done is called in the end, unless the
// Relay is closed first.
type Router interface {
	// Route says what to do with a client given everything it sent so far: first with
	// nothing (at once when the loop adopts it), then each time more arrived. pre is valid
	// during the call only. p is the client's pair (Stop ends it) from the first call on.
	Route(p *Pair, tag any, pre []byte) Verdict
	// Dialed reports a connect that a Connect verdict started, and how long it took. After a
	// failure, a valid address returned is dialed next (the same options); otherwise the
	// pair ends with OutcomeDialFailed.
	Dialed(tag any, ep netip.AddrPort, took time.Duration, err error) (next netip.AddrPort)
	// Release hands the client's socket back to the caller, out of the loop's epoll set,
	// with the bytes read from it (valid during the call only): because Route said so (err
	// nil), because the client closed or failed (io.EOF, a read error), sent more than the
	// buffer holds while Route kept waiting (ErrPrefaceFull), or was not routed by the
	// deadline (ErrDeadline). It runs on a goroutine outside the loops, one at a time with
	// the relay's other hand-overs: it may start goroutines, but should not block either.
	Release(tag any, fd int, pre []byte, err error)
	// Done is called when the pair ended after a Connect verdict, after a Close verdict
	// (Result.Outcome OutcomeClosed), or was stopped before any (Result.Outcome is then
	// what Stop was given). Both sockets are closed.
	Done(tag any, res Result)
}

// Action is what a Verdict asks for.
type Action uint8

const (
	// Wait for more bytes from the client.
	Wait Action = iota
	// Release the client back to the caller (Router.Release).
	Release
	// Connect to Verdict.To and relay: the bytes read so far go to the backend first.
	Connect
	// Close the client's socket on the loop, writing nothing to it; Router.Done follows
	// with OutcomeClosed. For the clients a router refuses: no goroutine, no hand-over
	// (which every other client released waits behind), so that a flood of refused
	// connections costs as little as the relay can make it.
	Close
)

// Verdict is Router.Route's answer.
type Verdict struct {
	Action Action
	// With Connect: where, how, and the options of the relay that follows.
	To      netip.AddrPort
	Dial    DialOptions
	Options Options
	// With Connect: the first Skip bytes read from the client are dropped (a PROXY header
	// the router consumed), and Prefix is written to the backend before the rest (the PROXY
	// header for the backend). Result.Bytes[0] counts Prefix. When the client's bytes and
	// Prefix do not fit the relay's buffer together, the client is released with
	// ErrPrefaceFull.
	Skip   int
	Prefix []byte
}
