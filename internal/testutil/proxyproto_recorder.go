package testutil

// A Go server that records each connection's PROXY header, for the tests that check the
// header's bytes themselves.

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
)

// ProxyProtoHeader is one connection's PROXY header as a ProxyProtoRecorder parsed it.
type ProxyProtoHeader struct {
	Version int  // 1 or 2
	Local   bool // a v2 LOCAL command (or v1 UNKNOWN): no addresses
	// Client and Dest are the header's source and destination.
	Client, Dest netip.AddrPort
	// Peer is the TCP peer that sent the header.
	Peer netip.AddrPort
	// Authority and ALPN are the v2 TLVs 0x02 and 0x01, empty when absent.
	Authority, ALPN string
	TLVs            []proxyproto.TLV
	// Err is why the header could not be read (proxyproto.ErrNoProxyProtocol when there was
	// none); the connection was then closed without an answer.
	Err error
}

// ProxyProtoRecorderOptions configures StartProxyProtoRecorder.
type ProxyProtoRecorderOptions struct {
	// IP is the address to listen on; default 127.0.0.1. A Go server cannot listen inside a
	// network namespace: for a backend an EndpointSlice can name, use a Host's HostIP.
	IP netip.Addr
}

// ProxyProtoRecorder is a Go server that reads each connection's PROXY v1/v2 header with
// github.com/pires/go-proxyproto (a parser independent of snigate's) and records all of it,
// TLVs included: the check for what the real servers above cannot log, such as the ALPN TLV
// with Debian 12's HAProxy and nginx. After the header it answers Greeting and echoes.
type ProxyProtoRecorder struct {
	addr    string
	mu      sync.Mutex
	headers []ProxyProtoHeader
}

// StartProxyProtoRecorder starts a ProxyProtoRecorder, stopped in t.Cleanup.
func StartProxyProtoRecorder(t testing.TB, o ProxyProtoRecorderOptions) *ProxyProtoRecorder {
	t.Helper()
	ip := "127.0.0.1"
	if o.IP.IsValid() {
		ip = o.IP.String()
	}
	r := &ProxyProtoRecorder{}
	r.addr = serveConns(t, ip, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		h := ProxyProtoHeader{Peer: netAddrPort(c.RemoteAddr())}
		hdr, err := proxyproto.Read(br)
		if err == nil {
			h.Version, h.Local = int(hdr.Version), hdr.Command.IsLocal() || hdr.TransportProtocol == proxyproto.UNSPEC
			h.Client, h.Dest = netAddrPort(hdr.SourceAddr), netAddrPort(hdr.DestinationAddr)
			h.TLVs, err = hdr.TLVs()
			for _, tlv := range h.TLVs {
				switch tlv.Type {
				case proxyproto.PP2_TYPE_AUTHORITY:
					h.Authority = string(tlv.Value)
				case proxyproto.PP2_TYPE_ALPN:
					h.ALPN = string(tlv.Value)
				}
			}
		}
		h.Err = err
		r.mu.Lock()
		r.headers = append(r.headers, h)
		r.mu.Unlock()
		if err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if _, err := io.WriteString(c, Greeting); err != nil {
			return
		}
		_, _ = io.Copy(c, br)
	})
	return r
}

// Addr is the host:port the recorder listens on.
func (r *ProxyProtoRecorder) Addr() string { return r.addr }

// Headers returns the headers read so far, oldest first.
func (r *ProxyProtoRecorder) Headers() []ProxyProtoHeader {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ProxyProtoHeader(nil), r.headers...)
}

// WaitHeader waits up to timeout for a header that match accepts and returns it; it fails
// the test with every header read when none comes.
func (r *ProxyProtoRecorder) WaitHeader(t testing.TB, match func(ProxyProtoHeader) bool, timeout time.Duration) ProxyProtoHeader {
	t.Helper()
	var found ProxyProtoHeader
	if !waitFor(timeout, func() bool {
		for _, h := range r.Headers() {
			if match(h) {
				found = h
				return true
			}
		}
		return false
	}) {
		t.Fatalf("PROXY recorder %s: no matching header within %v; got %+v", r.addr, timeout, r.Headers())
	}
	return found
}

// netAddrPort converts a TCP address; anything else is the zero AddrPort.
func netAddrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
