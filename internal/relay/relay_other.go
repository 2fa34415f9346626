//go:build !linux

package relay

import (
	"errors"
	"net/netip"
	"time"
)

// The relay is made of Linux system calls (epoll, splice, eventfd, accept4's sockets). On
// other systems the package compiles, so that the rest of snigate builds and vets there, but
// New fails with errNotLinux and no Relay or Pair exists.

var errNotLinux = errors.New("relay: snigate's data plane runs on Linux only (it is built on epoll and splice)")

// Relay is a set of event loops; off Linux there is none (New fails).
type Relay struct{}

// Pair is one relayed connection; off Linux there is none.
type Pair struct{}

// New fails off Linux.
func New(int, ...Option) (*Relay, error) { return nil, errNotLinux }

// Option changes how New makes a Relay.
type Option func()

// WithIOURing does nothing off Linux.
func WithIOURing(bool) Option { return func() {} }

// WithSpin does nothing off Linux.
func WithSpin(time.Duration) Option { return func() {} }

// DefaultSpin is WithSpin's default on Linux.
const DefaultSpin = 10 * time.Microsecond

// Wait names nothing off Linux.
func (*Relay) Wait() (string, error) { return "", errNotLinux }

// Close does nothing off Linux.
func (*Relay) Close() {}

// Pairs is 0 off Linux.
func (*Relay) Pairs() int { return 0 }

// Start fails off Linux; a and b are still the caller's.
func (*Relay) Start(_, _ Conn, _ Options, _ func(Result)) (*Pair, error) {
	return nil, errNotLinux
}

// Dial fails off Linux.
func (*Relay) Dial(netip.AddrPort, DialOptions) (*Pair, error) { return nil, errNotLinux }

// Listener is a listening socket the loops accept from; off Linux there is none.
type Listener struct{}

// Listen fails off Linux.
func (*Relay) Listen(int, Acceptor) (*Listener, error) { return nil, errNotLinux }

// Close does nothing off Linux.
func (*Listener) Close() error { return nil }

// Attach fails off Linux; a is still the caller's.
func (*Pair) Attach(Conn, []byte, Options, func(Result)) error { return errNotLinux }

// Abandon does nothing off Linux.
func (*Pair) Abandon() {}

// Stop does nothing off Linux.
func (*Pair) Stop(string) {}

// SetBackendSockopts fails off Linux.
func SetBackendSockopts(int, time.Duration) error { return errNotLinux }

// PooledPipes is 0 off Linux.
func PooledPipes() int { return 0 }

// Detach reports errNotLinux off Linux.
func (*Pair) Detach(_ int, done func(Detached, error)) { done(Detached{}, errNotLinux) }

// Resume fails off Linux; the fds are still the caller's.
func (*Relay) Resume(Detached, Options, func(Result)) (*Pair, error) { return nil, errNotLinux }
