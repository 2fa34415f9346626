package proxy

import (
	"net/netip"
	"sync"
	"time"
)

// health remembers endpoints that keep failing to accept connections, so new connections
// skip them for a while instead of paying a dial timeout each. It is runtime state that
// outlives snapshots: an endpoint keeps its record across reloads.
type health struct {
	after int
	dur   time.Duration

	mu sync.Mutex
	m  map[netip.AddrPort]*endpointHealth
}

type endpointHealth struct {
	failures     int
	ejectedUntil time.Time
}

func (h *health) init(after int, d time.Duration) {
	h.after, h.dur, h.m = after, d, map[netip.AddrPort]*endpointHealth{}
}

// ejected reports whether ep should be skipped now.
func (h *health) ejected(ep netip.AddrPort, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.m[ep]
	return e != nil && now.Before(e.ejectedUntil)
}

func (h *health) failed(ep netip.AddrPort, now time.Time) (ejected bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.m[ep]
	if e == nil {
		e = &endpointHealth{}
		h.m[ep] = e
	}
	e.failures++
	if e.failures >= h.after {
		e.ejectedUntil = now.Add(h.dur)
		e.failures = 0
		return true
	}
	return false
}

func (h *health) succeeded(ep netip.AddrPort) {
	h.mu.Lock()
	if len(h.m) > 0 {
		delete(h.m, ep)
	}
	h.mu.Unlock()
}
