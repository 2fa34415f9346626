package proxy

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/snigate/snigate/internal/clienthello"
	"github.com/snigate/snigate/internal/fdconn"
	"github.com/snigate/snigate/internal/proxyproto"
	"github.com/snigate/snigate/internal/snapshot"
)

// proxyState is a connection's PROXY protocol state.
type proxyState struct {
	// via is the load balancer's address, when its PROXY header gave the client's.
	via netip.AddrPort
	// backend is the PROXY header the picked backend takes (nil: none). prefixLen is how
	// many bytes of the relay's client→backend count were that header, where the relay
	// wrote it (set by whoever hands it the header with the client's bytes).
	backend   *snapshot.ProxyHeader
	prefixLen int
}

// proxy returns px, made on first use.
func (c *conn) proxy() *proxyState {
	if c.px == nil {
		c.px = &proxyState{}
	}
	return c.px
}

// setBackendProxy notes the picked backend's PROXY header (nil: none).
func (c *conn) setBackendProxy(h *snapshot.ProxyHeader) {
	if h != nil || c.px != nil {
		c.proxy().backend = h
	}
}

// writeProxyHeader writes the picked backend's PROXY header, if it takes one, to bc.
func (c *conn) writeProxyHeader(bc *fdconn.Conn, alpn func() string) error {
	hdr, err := c.proxyHeader(alpn)
	if err == nil && hdr != nil {
		_, err = bc.Write(hdr)
	}
	if err != nil {
		c.p.log.Warn("cannot write the backend's PROXY header", "backend", c.backendName, "endpoint", c.endpoint(), "error", err)
	}
	return err
}

// tcpPeer is the address the connection came from: the load balancer's, after a header.
func (c *conn) tcpPeer() netip.Addr {
	if c.px != nil && c.px.via.IsValid() {
		return c.px.via.Addr()
	}
	return c.peer.Addr()
}

// via is the load balancer's address, when a PROXY header gave the client's (else invalid).
func (c *conn) via() netip.AddrPort {
	if c.px == nil {
		return netip.AddrPort{}
	}
	return c.px.via
}

// acceptProxy takes the client's address from the PROXY header d skipped (once). A LOCAL
// header (the balancer's own connection) leaves the balancer's address as the client's.
func (c *conn) acceptProxy(d *decision) {
	if d.skip == 0 || c.via().IsValid() {
		return
	}
	c.proxy().via = c.peer
	if d.source.IsValid() {
		c.peer = d.source
	}
}

// localAddr is the address the client connected to (the PROXY header's destination).
func (c *conn) localAddr() netip.AddrPort {
	if c.client != nil {
		if a, ok := c.client.LocalAddr().(*net.TCPAddr); ok {
			return a.AddrPort()
		}
	}
	sa, err := unix.Getsockname(int(c.fd))
	if err == nil {
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
		case *unix.SockaddrInet6:
			return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
		}
	}
	ap, _ := netip.ParseAddrPort(c.pl.addr)
	return ap
}

// proxyHeader is the PROXY header for the picked backend (nil when it takes none), with
// alpn the ALPN TLV's value when the policy asks for it.
func (c *conn) proxyHeader(alpn func() string) ([]byte, error) {
	if c.px == nil || c.px.backend == nil {
		return nil, nil
	}
	h := c.px.backend
	var tlvs proxyproto.TLVs
	if h.Authority {
		tlvs.Authority = c.sni
	}
	if h.ALPN {
		tlvs.ALPN = alpn()
	}
	b, err := proxyproto.Header(h.Version, c.peer, c.localAddr(), tlvs)
	if err != nil {
		return nil, fmt.Errorf("PROXY header for %s: %w", c.backendName, err)
	}
	return b, nil
}

// offeredALPN is the first ALPN protocol the ClientHello at the start of hello offers ("" if
// none): the ALPN TLV where snigate passes TLS through, the backend not having chosen yet.
func offeredALPN(hello []byte) string {
	var h clienthello.Hello
	var p clienthello.Parser
	if p.Parse(hello, &h) != nil || len(h.ALPN) < 1 || int(h.ALPN[0]) >= len(h.ALPN) {
		return ""
	}
	return string(h.ALPN[1 : 1+int(h.ALPN[0])])
}
