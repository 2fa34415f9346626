package proxy

import (
	"net"
	"net/netip"
	"sync"
)

// pgTracker remembers, per client address, the backend endpoints that client holds
// PostgreSQL connections to through one port. It is what makes a plaintext CancelRequest
// routable without leaking it to other tenants.
type pgTracker struct {
	mu sync.Mutex
	m  map[netip.Addr]map[netip.AddrPort]int
}

func (t *pgTracker) add(client netip.Addr, ep netip.AddrPort) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[netip.Addr]map[netip.AddrPort]int{}
	}
	e := t.m[client]
	if e == nil {
		e = map[netip.AddrPort]int{}
		t.m[client] = e
	}
	e[ep]++
}

func (t *pgTracker) remove(client netip.Addr, ep netip.AddrPort) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[client]
	if e == nil {
		return
	}
	if e[ep]--; e[ep] <= 0 {
		delete(e, ep)
	}
	if len(e) == 0 {
		delete(t.m, client)
	}
}

func (pl *portListener) pgEndpoints(client netip.Addr) []netip.AddrPort {
	t := &pl.pg
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []netip.AddrPort
	for ep := range t.m[client] {
		out = append(out, ep)
	}
	return out
}

func netipAddr(a net.Addr) (netip.Addr, bool) {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(ta.IP)
		return ip.Unmap(), ok
	}
	return netip.Addr{}, false
}
