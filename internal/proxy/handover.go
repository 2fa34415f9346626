package proxy

import (
	"context"
	"os"

	"golang.org/x/sys/unix"
)

// The proxy's side of a live upgrade (package handover has the protocol, cmd/snigate the
// conversation): the old process gives its listening sockets (ListenerFDs), stops accepting
// once the new one accepts on them (StopAccepting), and the new process serves the sockets
// it was given as if it had bound them itself (Inherit, before its first Apply).

// Inherit gives the proxy listening sockets bound by the process it replaces, by address:
// Apply serves these instead of binding its own. Call it before the first Apply; the
// sockets are the proxy's from now on, and those Apply did not take are closed by
// DropInherited.
func (p *Proxy) Inherit(fds map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inherited == nil {
		p.inherited = map[string]int{}
	}
	for a, fd := range fds {
		p.inherited[a] = fd
	}
}

// DropInherited closes the inherited sockets no port of the serving snapshot took (the new
// configuration dropped their ports).
func (p *Proxy) DropInherited() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, fd := range p.inherited {
		unix.Close(fd)
		delete(p.inherited, a)
	}
}

// takeInherited returns the inherited socket for addr, -1 when there is none (p.mu held).
func (p *Proxy) takeInherited(addr string) int {
	fd, ok := p.inherited[addr]
	if !ok {
		return -1
	}
	delete(p.inherited, addr)
	return fd
}

// ListenerFDs returns a duplicate of every listening socket and its address, for the
// process that replaces this one. The duplicates are the caller's to close.
func (p *Proxy) ListenerFDs() (addrs []string, fds []int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, pl := range p.listeners {
		fd, err := unix.FcntlInt(uintptr(pl.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, nil, os.NewSyscallError("fcntl", err)
		}
		addrs, fds = append(addrs, a), append(fds, fd)
	}
	return addrs, fds, nil
}

// StopAccepting takes every port out of the relay's loops and refuses later Applies: the
// process that replaced this one accepts on the same sockets, which stay open as long as it
// holds them. Connections open here go on; Shutdown drains them.
func (p *Proxy) StopAccepting() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closing = true
	for addr, pl := range p.listeners {
		pl.ln.Close()
		// HTTP connections released to goroutines are Shutdown's to drain.
		p.stoppedPorts = append(p.stoppedPorts, pl)
		delete(p.listeners, addr)
	}
}

// shutdownStopped ends the HTTP servers of the ports StopAccepting took out.
func (p *Proxy) shutdownStopped(ctx context.Context) {
	p.mu.Lock()
	stopped := p.stoppedPorts
	p.stoppedPorts = nil
	p.mu.Unlock()
	for _, pl := range stopped {
		pl.shutdownHTTP(ctx)
	}
}
