// Package proxyproto reads and writes PROXY protocol headers (v1 text, v2 binary; HAProxy's
// specification) for the proxy: Header builds the header written to a backend (the client's
// address, and in v2 the authority and ALPN TLVs), Parse reads the one a load balancer
// sends before a client's first bytes.
//
//	n, src, err := proxyproto.Parse(pre) // n == 0, err == nil: more bytes needed
//	hdr, err := proxyproto.Header(2, client, local, proxyproto.TLVs{Authority: sni})
//
// The encoding and decoding are github.com/pires/go-proxyproto's. What is written here is
// only the framing its reader lacks: the proxy decides on the bytes a socket gave so far,
// and must tell "not a header", "a header, incomplete" and "complete, this long" apart
// without blocking, which the library's bufio-based Read cannot.
package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	pp "github.com/pires/go-proxyproto"
)

// MaxV1 is the longest v1 header, CRLF included (the specification's 107 bytes).
const MaxV1 = 107

// maxV2 caps what Parse accepts of a v2 header: the 16-byte preamble and its addresses and
// TLVs. The specification allows 64 KiB of TLVs; a load balancer sends far less, and a
// connection may not hold the proxy's buffer with a header alone.
const maxV2 = 16 + 2048

var (
	sigV1 = []byte("PROXY ")
	sigV2 = pp.SIGV2
)

// ErrMalformed is a header that begins like one and is not one.
var ErrMalformed = errors.New("malformed PROXY protocol header")

// Detect says whether b starts with a PROXY header: yes (true, true), no (false, true), or
// too few bytes to tell (false, false). Neither signature can start a TLS record (0x16) or
// a PostgreSQL request (0x00).
func Detect(b []byte) (header, sure bool) {
	for _, sig := range [][]byte{sigV1, sigV2} {
		n := min(len(b), len(sig))
		if bytes.Equal(b[:n], sig[:n]) {
			if n == len(sig) {
				return true, true
			}
			return false, false
		}
	}
	return false, true
}

// Parse reads the header at the start of b, which Detect said is there. It returns the
// header's length and the client's address; n == 0 with a nil error when b holds only part
// of it. src is invalid for a LOCAL (v2) or UNKNOWN (v1) header: a load balancer's own
// connection, a health check, which keeps its own address.
func Parse(b []byte) (n int, src netip.AddrPort, err error) {
	switch {
	case bytes.HasPrefix(b, sigV1):
		i := bytes.Index(b[:min(len(b), MaxV1)], []byte("\r\n"))
		if i < 0 {
			if len(b) >= MaxV1 {
				return 0, src, fmt.Errorf("%w: v1 without CRLF in %d bytes", ErrMalformed, MaxV1)
			}
			return 0, src, nil
		}
		n = i + 2
	case bytes.HasPrefix(b, sigV2):
		if len(b) < 16 {
			return 0, src, nil
		}
		n = 16 + int(binary.BigEndian.Uint16(b[14:16]))
		if n > maxV2 {
			return 0, src, fmt.Errorf("%w: v2 of %d bytes (at most %d)", ErrMalformed, n, maxV2)
		}
		if len(b) < n {
			return 0, src, nil
		}
	default:
		return 0, src, fmt.Errorf("%w: no signature", ErrMalformed)
	}
	r := bufio.NewReaderSize(bytes.NewReader(b[:n]), max(16, n))
	h, err := pp.Read(r)
	if err != nil {
		return 0, src, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if r.Buffered() != 0 {
		return 0, src, fmt.Errorf("%w: %d bytes after the header's end", ErrMalformed, r.Buffered())
	}
	if h.Command.IsLocal() {
		return n, src, nil
	}
	if a, ok := h.SourceAddr.(*net.TCPAddr); ok {
		src = a.AddrPort()
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	}
	return n, src, nil
}

// TLVs are the v2 TLVs Header adds; empty fields are left out.
type TLVs struct {
	// Authority is PP2_TYPE_AUTHORITY: the server name the client asked for (its SNI).
	Authority string
	// ALPN is PP2_TYPE_ALPN: the application protocol.
	ALPN string
}

// Header returns the header of version 1 or 2 for a TCP connection from src to dst (the
// address the client connected to). Mixed families are written as IPv6 (an IPv4 address
// mapped), as the specification asks.
func Header(version uint8, src, dst netip.AddrPort, tlvs TLVs) ([]byte, error) {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	proto := pp.TCPv4
	if !s.Is4() || !d.Is4() {
		proto = pp.TCPv6
		s, d = netip.AddrFrom16(s.As16()), netip.AddrFrom16(d.As16())
	}
	h := &pp.Header{
		Version:           version,
		Command:           pp.PROXY,
		TransportProtocol: proto,
		SourceAddr:        net.TCPAddrFromAddrPort(netip.AddrPortFrom(s, src.Port())),
		DestinationAddr:   net.TCPAddrFromAddrPort(netip.AddrPortFrom(d, dst.Port())),
	}
	if version == 2 {
		var list []pp.TLV
		if tlvs.Authority != "" {
			list = append(list, pp.TLV{Type: pp.PP2_TYPE_AUTHORITY, Value: []byte(tlvs.Authority)})
		}
		if tlvs.ALPN != "" {
			list = append(list, pp.TLV{Type: pp.PP2_TYPE_ALPN, Value: []byte(tlvs.ALPN)})
		}
		if len(list) > 0 {
			if err := h.SetTLVs(list); err != nil {
				return nil, err
			}
		}
	}
	return h.Format()
}
