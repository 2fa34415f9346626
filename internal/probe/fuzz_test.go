package probe

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// FuzzLooksLikeTLS checks the plaintext sniff against crypto/tls itself: for five bytes or
// more, looksLikeTLS says "not TLS" exactly when crypto/tls's client rejects the server's
// first record header (RecordHeaderError); and a verdict on fewer bytes never contradicts a
// verdict on more.
func FuzzLooksLikeTLS(f *testing.F) {
	for _, s := range realFirstFlights(f) {
		f.Add(s)
	}
	for _, s := range []string{
		"", "\x16", "\x15", "\x16\x03", "\x16\x03\x03\x48", "\x16\x03\x03\x48\x00", "\x16\x03\x01\x48\x01",
		"\x15\x03\x03\x00\x02\x02\x28", "\x16\x0f\xff\x00\x10", "\x16\x10\x00\x00\x10", "\x80\x2e\x01\x00\x02",
		"-ERR unknown command\r\n", "-E", "N", "SSH-2.0-OpenSSH_9.2p1\r\n", "HTTP/1.1 400 Bad Request\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := looksLikeTLS(b)
		for i := range len(b) {
			if got && !looksLikeTLS(b[:i]) {
				t.Fatalf("% x looks like TLS, its first %d bytes do not", b, i)
			}
		}
		if len(b) < 5 {
			return
		}
		err := clientReads(firstRecord(b))
		var rh tls.RecordHeaderError
		rejected := errors.As(err, &rh) && bytes.Equal(rh.RecordHeader[:], b[:5])
		if got == rejected {
			t.Fatalf("looksLikeTLS(% x) = %v, crypto/tls's client: %v", b[:5], got, err)
		}
	})
}

// firstRecord is b cut after the record its header announces: crypto/tls then reads that one
// record and an EOF, so any RecordHeaderError it returns is about b's first header.
func firstRecord(b []byte) []byte {
	n := 5 + (int(b[3])<<8 | int(b[4]))
	return b[:min(len(b), n)]
}

// clientReads runs a crypto/tls client handshake against a server that answers with b and
// then closes.
func clientReads(b []byte) error {
	c := tls.Client(&replayConn{r: bytes.NewReader(b)}, &tls.Config{ServerName: "fuzz.example.com", InsecureSkipVerify: true})
	return c.Handshake()
}

// replayConn is a net.Conn whose peer sends r and ignores whatever it is sent.
type replayConn struct{ r *bytes.Reader }

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }

// realFirstFlights are the first bytes real crypto/tls servers answer a ClientHello with:
// TLS 1.3, TLS 1.2, and an alert.
func realFirstFlights(tb testing.TB) [][]byte {
	cert := testutil.SelfSigned(tb, "flight.example.com")
	var out [][]byte
	for _, cfg := range []*tls.Config{
		{Certificates: []tls.Certificate{cert}},
		{Certificates: []tls.Certificate{cert}, MaxVersion: tls.VersionTLS12},
		{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("none") }},
	} {
		cs, ss := net.Pipe()
		go func() {
			_ = tls.Server(ss, cfg).Handshake()
			ss.Close()
		}()
		rec := &recordingConn{Conn: cs}
		_ = cs.SetDeadline(time.Now().Add(10 * time.Second))
		_ = tls.Client(rec, &tls.Config{ServerName: "flight.example.com", InsecureSkipVerify: true}).Handshake()
		cs.Close()
		if len(rec.first) == 0 {
			tb.Fatalf("no first flight from %+v", cfg)
		}
		out = append(out, bytes.Clone(rec.first))
	}
	return out
}

func TestRealFirstFlightsLookLikeTLS(t *testing.T) {
	t.Parallel()
	for _, b := range realFirstFlights(t) {
		for i := range len(b) + 1 {
			if !looksLikeTLS(b[:i]) {
				t.Fatalf("a real server's first %d bytes % x do not look like TLS", i, b[:i])
			}
		}
	}
}

// FuzzParseGreeting reads arbitrary bytes as a MySQL greeting: it never reads past the packet
// its header announces, every failure is classified, an error packet's message is printable
// and bounded, and what it accepts re-encodes to the same greeting and gets a well-formed
// SSLRequest.
func FuzzParseGreeting(f *testing.F) {
	f.Add(appendGreeting(nil, "10.11.6-MariaDB-0+deb12u1", mysqlCaps))
	f.Add(appendGreeting(nil, "8.0.36", mysqlCaps&^clientSSL))
	f.Add(appendGreeting(nil, "", 0))
	f.Add(appendPacket(nil, 0, append([]byte{0xff, 0x10, 0x04}, "Too many connections"...)))
	f.Add(appendPacket(nil, 0, append([]byte{0xff, 0x6a, 0x04, '#', 'H', 'Y', '0', '0', '0'}, "Host 'x' is blocked\x01"...)))
	f.Add(appendPacket(nil, 0, []byte{10, '5', 0, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x00, 0x08})) // 4.1 greeting, no upper half
	f.Add(appendPacket(nil, 1, []byte{10, 0}))
	f.Add([]byte("SSH-2.0-OpenSSH_9.2p1\r\n"))
	f.Add([]byte{0xff, 0xff, 0xff, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		g, err := readGreeting(r)
		var me *mysqlError
		switch {
		case err == nil:
		case errors.As(err, &me):
			if len(me.message) > 203 || strings.ContainsFunc(me.message, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
				t.Fatalf("error message %q", me.message)
			}
			return
		case errors.Is(err, errNotMySQL), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return
		default:
			t.Fatalf("unclassified error %v", err)
		}
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if read := len(b) - r.Len(); read != 4+n || n > maxGreeting || g.seq != 0 {
			t.Fatalf("read %d bytes of a %d-byte packet (seq %d)", read, 4+n, g.seq)
		}
		// appendGreeting always writes both halves of the capabilities; a greeting that had
		// only the lower half parsed with an upper half of zero, which re-encodes the same.
		g2, err := readGreeting(bytes.NewReader(appendGreeting(nil, g.version, g.caps)))
		if err != nil || g2 != g {
			t.Fatalf("re-encoded %+v parses as %+v, %v", g, g2, err)
		}
		req := sslRequest(g)
		caps := binary.LittleEndian.Uint32(req[4:])
		if len(req) != 36 || req[0] != 32 || req[1] != 0 || req[2] != 0 || req[3] != g.seq+1 ||
			caps&(clientSSL|clientProtocol41) != clientSSL|clientProtocol41 || caps&^(g.caps|clientSSL|clientProtocol41) != 0 ||
			!bytes.Equal(req[13:], make([]byte, 23)) {
			t.Fatalf("SSLRequest % x for %+v", req, g)
		}
	})
}
