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
	slot  int32 // the client's entry in the client table, with heldClient or heldRate
	pi    uint8 // the policy's index on the path (Admit's undo reads its interval)
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

// DefaultClients is how many clients a Limiter tracks at most, over all policies: 4 MiB.
// A client is refused for want of an entry only when about half of them hold connections at
// once (TestClientTableHoldsAThirdHeld), which takes some 240 000 open file descriptors.
// Twice as many entries (8 MiB) made every check slower on the benchmark machine (its cache
// is 4 MiB).
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
	// Two loops, not one over [2][]*Policy{listener, route}: building that array on every
	// connection was a tenth of the check's time.
	limited := false
	for _, p := range listener {
		if !p.Allows(client) {
			return NotAllowed, p
		}
		limited = limited || p.limited
	}
	for _, p := range route {
		if !p.Allows(client) {
			return NotAllowed, p
		}
		limited = limited || p.limited
	}
	if !limited {
		return Admitted, nil
	}
	now := l.ticks(at)
	for i, p := range listener {
		if p.limited {
			if v := l.count(p, uint8(i), client, now, h); v != Admitted {
				l.undo(h, client, listener, route)
				return v, p
			}
		}
	}
	for i, p := range route {
		if p.limited {
			if v := l.count(p, uint8(len(listener)+i), client, now, h); v != Admitted {
				l.undo(h, client, listener, route)
				return v, p
			}
		}
	}
	return Admitted, nil
}

// count counts a connection of client at now (ticks) against p, the pi-th policy of its
// path, in h; refused, it counts nothing (what earlier policies counted is Admit's to undo).
func (l *Limiter) count(p *Policy, pi uint8, client netip.Addr, now int64, h *Hold) Verdict {
	if int(h.n) == MaxPath {
		// translate attaches at most MaxPath policies: more is a bug, refused rather than
		// counted wrong.
		return NotAllowed
	}
	st := l.state(p)
	e := &h.held[h.n]
	*e = held{st: st, pi: pi}
	if max := p.Spec.MaxConnections; max > 0 {
		if st.conns.Add(1) > max {
			st.conns.Add(-1)
			*e = held{}
			return RouteLimit
		}
		e.flags |= heldRoute
	}
	if p.Spec.PerClient.any() {
		if v := l.clients.admit(e, l.clients.hash(st.id, client, p.v6bits), p.clientMax, p.interval, p.tolerance, now); v != Admitted {
			if e.flags&heldRoute != 0 {
				st.conns.Add(-1)
			}
			*e = held{}
			return v
		}
	}
	h.n++
	return Admitted
}

// Carry counts an established connection from client, which another process admitted
// and handed over (a live upgrade), against the limits on its path: the target's and the
// client's connection counts, so that what comes after it meets the limits as if it had
// been admitted here. It refuses nothing (a held connection is never cut) and spends no
// rate (the connection is not new); a count goes past its cap if the other process's
// policies were looser, and a client the table has no room for is not counted. h (empty)
// holds what was counted, for Release when the connection ends.
func (l *Limiter) Carry(client netip.Addr, listener, route []*Policy, h *Hold) {
	client = client.Unmap()
	now := l.ticks(time.Now())
	for i, p := range listener {
		l.carry(p, uint8(i), client, now, h)
	}
	for i, p := range route {
		l.carry(p, uint8(len(listener)+i), client, now, h)
	}
}

// ticks is at in the client table's time: ticks since the epoch.
func (l *Limiter) ticks(at time.Time) int64 {
	if d := at.Sub(l.epoch); d > 0 {
		return int64(d / tick)
	}
	return 0
}

func (l *Limiter) carry(p *Policy, pi uint8, client netip.Addr, now int64, h *Hold) {
	if !p.limited || int(h.n) == MaxPath || p.Spec.MaxConnections == 0 && p.clientMax == 0 {
		return
	}
	st := l.state(p)
	e := &h.held[h.n]
	*e = held{st: st, pi: pi}
	if p.Spec.MaxConnections > 0 {
		st.conns.Add(1)
		e.flags |= heldRoute
	}
	if p.clientMax > 0 {
		// As admit, with no cap short of what an entry counts, and no rate.
		l.clients.admit(e, l.clients.hash(st.id, client, p.v6bits), maxClientConns, 0, 0, now)
	}
	if e.flags == 0 {
		*e = held{}
		return
	}
	h.n++
}

// undo gives back what h counted in a refused Admit, the rate included: a connection that
// a later policy refuses does not spend an earlier policy's per-client rate.
func (l *Limiter) undo(h *Hold, client netip.Addr, listener, route []*Policy) {
	for i := range h.n {
		e := &h.held[i]
		if e.flags&heldRate != 0 {
			p := pathAt(listener, route, e.pi)
			t := &e.st.lim.clients
			t.refund(e, t.hash(e.st.id, client, p.v6bits), p.interval)
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
		*e = held{}
	}
	h.n = 0
}
