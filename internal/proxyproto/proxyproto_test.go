package proxyproto

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"

	pp "github.com/pires/go-proxyproto"
)

var (
	client = netip.MustParseAddrPort("203.0.113.7:51234")
	local  = netip.MustParseAddrPort("192.0.2.10:5432")
)

// What Header writes, the library reads back: addresses and TLVs; and Parse finds the same
// address and length, on every split of the bytes into "so far" and "the rest".
func TestHeaderRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name     string
		version  uint8
		src, dst netip.AddrPort
		tlvs     TLVs
	}{
		{"v1", 1, client, local, TLVs{}},
		{"v2", 2, client, local, TLVs{}},
		{"v2 TLVs", 2, client, local, TLVs{Authority: "orders.db.example.com", ALPN: "postgresql"}},
		{"v2 IPv6", 2, netip.MustParseAddrPort("[2001:db8::7]:40000"), netip.MustParseAddrPort("[2001:db8::1]:443"), TLVs{Authority: "a.example"}},
		{"v1 mixed families", 1, netip.MustParseAddrPort("[2001:db8::7]:40000"), local, TLVs{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Header(c.version, c.src, c.dst, c.tlvs)
			if err != nil {
				t.Fatal(err)
			}
			h, err := pp.Read(bufio.NewReader(bytes.NewReader(append(b, 0x16))))
			if err != nil {
				t.Fatalf("library reads %q: %v", b, err)
			}
			src, _ := h.SourceAddr.(*net.TCPAddr)
			if src == nil || src.AddrPort().Addr().Unmap() != c.src.Addr().Unmap() || src.AddrPort().Port() != c.src.Port() {
				t.Errorf("source %v, want %v", h.SourceAddr, c.src)
			}
			if h.Version != c.version {
				t.Errorf("version %d", h.Version)
			}
			got := TLVs{}
			tlvs, _ := h.TLVs()
			for _, tlv := range tlvs {
				switch tlv.Type {
				case pp.PP2_TYPE_AUTHORITY:
					got.Authority = string(tlv.Value)
				case pp.PP2_TYPE_ALPN:
					got.ALPN = string(tlv.Value)
				}
			}
			if got != c.tlvs {
				t.Errorf("TLVs %+v, want %+v", got, c.tlvs)
			}
			for i := range len(b) {
				yes, sure := Detect(b[:i])
				if sure && !yes {
					t.Fatalf("Detect(%d bytes) says no header", i)
				}
				if !yes {
					continue // the signature is not all there: Parse is not asked yet
				}
				if n, _, err := Parse(b[:i]); n != 0 || err != nil {
					t.Fatalf("Parse(%d of %d bytes): %d, %v; want more needed", i, len(b), n, err)
				}
			}
			n, src2, err := Parse(append(b, 0x16, 0x03))
			if err != nil || n != len(b) || src2.Addr() != c.src.Addr().Unmap() || src2.Port() != c.src.Port() {
				t.Errorf("Parse: %d %v %v, want %d %v", n, src2, err, len(b), c.src)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		in           string
		header, sure bool
	}{
		{"", false, false},
		{"PRO", false, false},
		{"PROXY ", true, true},
		{"\r\n\r\n\x00\r\nQUIT\n", true, true},
		{"\r\n\r\n", false, false},
		{"\x16\x03\x01", false, true},
		{"\x00\x00\x00\x08", false, true},
		{"PROXZ", false, true},
		{"GET / HTTP/1.1", false, true},
	} {
		if h, s := Detect([]byte(c.in)); h != c.header || s != c.sure {
			t.Errorf("Detect(%q) = %v, %v; want %v, %v", c.in, h, s, c.header, c.sure)
		}
	}
}

// A LOCAL header (a load balancer's health check) is a header without an address; what is
// not a header is malformed, never "more".
func TestParseLocalAndMalformed(t *testing.T) {
	h := &pp.Header{Version: 2, Command: pp.LOCAL, TransportProtocol: pp.UNSPEC}
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	if n, src, err := Parse(b); err != nil || n != len(b) || src.IsValid() {
		t.Errorf("LOCAL: %d %v %v", n, src, err)
	}
	for _, bad := range []string{
		"PROXY TCP4 1.2.3.4\r\n",
		"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
		"PROXY " + string(bytes.Repeat([]byte("x"), MaxV1)),
		"\r\n\r\n\x00\r\nQUIT\n\x21\x11\xff\xff",
		"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x02xx",
	} {
		if n, _, err := Parse([]byte(bad)); !errors.Is(err, ErrMalformed) || n != 0 {
			t.Errorf("Parse(%q) = %d, %v; want ErrMalformed", bad, n, err)
		}
	}
}

// FuzzParse: whatever the bytes, Parse does not panic; what it accepts the library reads
// the same way (length and address), and what it calls incomplete is a true prefix.
func FuzzParse(f *testing.F) {
	for _, tlvs := range []TLVs{{}, {Authority: "a.example", ALPN: "h2"}} {
		for _, v := range []uint8{1, 2} {
			b, _ := Header(v, client, local, tlvs)
			f.Add(append(b, 0x16, 0x03, 0x01))
		}
	}
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if yes, sure := Detect(b); !yes || !sure {
			return
		}
		n, src, err := Parse(b)
		if err != nil || n == 0 {
			return
		}
		if n > len(b) {
			t.Fatalf("length %d of %d bytes", n, len(b))
		}
		r := bufio.NewReaderSize(bytes.NewReader(b), max(16, len(b)))
		h, lerr := pp.Read(r)
		if lerr != nil {
			t.Fatalf("Parse accepted %q (%d bytes), the library refuses it: %v", b, n, lerr)
		}
		if used := len(b) - r.Buffered(); used != n {
			t.Fatalf("Parse says %d bytes, the library read %d", n, used)
		}
		if a, ok := h.SourceAddr.(*net.TCPAddr); ok && !h.Command.IsLocal() {
			want := a.AddrPort()
			if src.Addr() != want.Addr().Unmap() || src.Port() != want.Port() {
				t.Fatalf("source %v, the library's %v", src, want)
			}
		}
	})
}
