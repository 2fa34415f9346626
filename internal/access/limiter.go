package access

import (
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// Verdict is what Admit made of a connection.
type Verdict uint8

const (
	// Admitted: every policy on the path lets the connection through.
	Admitted Verdict = iota
	// NotAllowed: the client's address is denied, or not in an allow-list.
	NotAllowed
	// RouteLimit: the target has MaxConnections open already.
	RouteLimit
	// ClientLimit: the client has PerClient.MaxConnections open to the target already.
	ClientLimit
	// RateLimited: the client opened its PerClient.PerMinute (and burst) already.
	RateLimited
)

var verdictNames = [...]string{Admitted: "admitted", NotAllowed: "not_allowed", RouteLimit: "route_limit",
	ClientLimit: "client_limit", RateLimited: "rate_limited"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "invalid"
}

// MaxPath is how many policies one connection's path can have: its Gateway's, its
// listener's, its ListenerSet's and that set listener's, and its route's (translate
// attaches at most one policy per target).
const MaxPath = 5

// Hold is what an admitted connection counts in a Limiter until Release: a plain value
// (no allocation), kept by the connection.
type Hold struct {
	n    uint8
	held [MaxPath]held
}

// held is one policy's count of a connection.
type held struct {
	st    *state
	slot  int32  // the client's entry in its shard, with client or rate
	shard uint16 // the shard of slot
	pi    uint8  // the policy's index on the path (Admit's undo reads its interval)
	flags uint8
}

const (
	heldRoute  uint8 = 1 << iota // counted in st.conns
	heldClient                   // counted in the client entry's conns
	heldRate                     // advanced the client entry's rate by the policy's interval
)

// Empty reports whether h holds nothing.
func (h *Hold) Empty() bool { return h.n == 0 }

// state is what a Limiter counts for one policy and target: the connections open to the
// target, and an id that keys its clients in the client table.
type state struct {
	lim   *Limiter
	id    uint64
	conns atomic.Int32
}

// DefaultClients is how many clients a Limiter tracks at most, over all policies: about
// 24 MiB when full. It exceeds the connections one process can hold (its file descriptors),
// so a client with connections open is never evicted.
const DefaultClients = 1 << 18

// Limiter holds the counters of one data plane: per policy and target, the connections
// open, and per client the connections open and the rate (a bounded table). Its methods
// are safe for concurrent use.
type Limiter struct {
	mu      sync.Mutex
	states  map[string]weak.Pointer[state]
	nextID  uint64
	clients clientTable
	epoch   time.Time
}

// NewLimiter returns a Limiter tracking at most clients clients (DefaultClients when 0).
func NewLimiter(clients int) *Limiter {
	if clients <= 0 {
		clients = DefaultClients
	}
	l := &Limiter{states: map[string]weak.Pointer[state]{}, epoch: time.Now()}
	l.clients.init(clients)
	return l
}

// Tracked is how many clients the table holds (at most Capacity); Evictions how many it
// has dropped to make room for others since it started.
func (l *Limiter) Tracked() int      { return l.clients.len() }
func (l *Limiter) Evictions() uint64 { return l.clients.evictions.Load() }
func (l *Limiter) Capacity() int     { return l.clients.capacity() }

// Open is how many connections p's target has open (as MaxConnections counts them).
func (l *Limiter) Open(p *Policy) int { return int(l.state(p).conns.Load()) }

// state returns p's counters in l. A policy keeps the state it was first admitted with
// (one atomic load after that); a new Policy for the same name and target (the next
// snapshot's) finds the same state in the registry, so the connections it counts carry
// over a reload. A state nothing refers to any more (no snapshot holds its policy, no
// connection holds a count) is collected, and its registry entry with it.
func (l *Limiter) state(p *Policy) *state {
	if s := p.state.Load(); s != nil && s.lim == l {
		return s
	}
	l.mu.Lock()
	s := l.states[p.key].Value()
	if s == nil {
		l.nextID++
		s = &state{lim: l, id: l.nextID}
		l.states[p.key] = weak.Make(s)
		runtime.AddCleanup(s, l.forget, p.key)
	}
	l.mu.Unlock()
	// Bound once; a policy admitted by two Limiters (tests) keeps the first, and the other
	// finds its own here each time.
	p.state.CompareAndSwap(nil, s)
	return s
}

// forget drops the registry entry of a collected state (unless a new one took the key).
func (l *Limiter) forget(key string) {
	l.mu.Lock()
	if wp, ok := l.states[key]; ok && wp.Value() == nil {
		delete(l.states, key)
	}
	l.mu.Unlock()
}

// Admit checks a connection from client, made at time at, against the policies on its
// path, the listener's then the route's: every range first, then every limit. Admitted
// counts the connection in h (the caller's, empty); anything else counts nothing and names
// the policy that refused. It does not allocate, and reads no clock: the rate is measured
// at at, the time the proxy accepted the connection (it read the clock then anyway; a
// clock read costs as much as the rest of the check on some machines).
func (l *Limiter) Admit(client netip.Addr, at time.Time, listener, route []*Policy, h *Hold) (Verdict, *Policy) {
	client = client.Unmap()
	limited := false
	for _, path := range [2][]*Policy{listener, route} {
		for _, p := range path {
			if !p.Allows(client) {
				return NotAllowed, p
			}
			limited = limited || p.limited
		}
	}
	if !limited {
		return Admitted, nil
	}
	now := int64(1)
	if d := at.Sub(l.epoch); d > 0 {
		now = int64(d)
	}
	pi := uint8(0)
	for _, path := range [2][]*Policy{listener, route} {
		for _, p := range path {
			i := pi
			pi++
			if !p.limited {
				continue
			}
			if int(h.n) == MaxPath {
				// translate attaches at most MaxPath policies: more is a bug, refused
				// rather than counted wrong.
				l.undo(h, listener, route)
				return NotAllowed, p
			}
			st := l.state(p)
			e := held{st: st, pi: i, slot: -1}
			if max := p.Spec.MaxConnections; max > 0 {
				if st.conns.Add(1) > max {
					st.conns.Add(-1)
					l.undo(h, listener, route)
					return RouteLimit, p
				}
				e.flags |= heldRoute
			}
			if p.Spec.PerClient.any() {
				v := l.clients.admit(&e, clientKeyOf(st.id, client, p.v6bits), p.Spec.PerClient.MaxConnections, p.interval, p.tolerance, now)
				if v != Admitted {
					if e.flags&heldRoute != 0 {
						st.conns.Add(-1)
					}
					l.undo(h, listener, route)
					return v, p
				}
			}
			h.held[h.n] = e
			h.n++
		}
	}
	return Admitted, nil
}

// undo gives back what h counted in a refused Admit, the rate included: a connection that
// a later policy refuses does not spend an earlier policy's per-client rate.
func (l *Limiter) undo(h *Hold, listener, route []*Policy) {
	for i := range h.n {
		e := &h.held[i]
		if e.flags&heldRate != 0 {
			e.st.lim.clients.refund(e, pathAt(listener, route, e.pi).interval)
		}
	}
	l.Release(h)
}

func pathAt(listener, route []*Policy, i uint8) *Policy {
	if int(i) < len(listener) {
		return listener[i]
	}
	return route[int(i)-len(listener)]
}

// Release gives back what h counts (the connection ended) and empties h. A hold counted
// under an older snapshot goes back to the very counters it was taken from.
func (l *Limiter) Release(h *Hold) {
	for i := range h.n {
		e := &h.held[i]
		if e.flags&heldRoute != 0 {
			e.st.conns.Add(-1)
		}
		if e.flags&heldClient != 0 {
			e.st.lim.clients.release(e)
		}
	}
	*h = Hold{}
}
