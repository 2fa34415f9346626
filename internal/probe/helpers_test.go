package probe

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/pgwire"
	"github.com/snigate/snigate/internal/testutil"
)

// serverTimeout bounds every read and write of a fake backend.
const serverTimeout = 10 * time.Second

// authority is a CA a test signs certificates with, whatever their validity: fixture's CA
// only issues certificates valid from an hour ago, and these tests need expired and future
// ones too.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// fromCA signs with a testutil CA.
func fromCA(ca *testutil.CA) authority { return authority{ca.Cert, ca.Key} }

func (a authority) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.cert)
	return p
}

// newAuthority makes a root CA valid from notBefore to notAfter.
func newAuthority(t testing.TB, name string, notBefore, notAfter time.Time) authority {
	t.Helper()
	c := sign(t, authority{}, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
	})
	return authority{c.Leaf, c.PrivateKey.(*ecdsa.PrivateKey)}
}

// intermediate makes a CA that a signs, valid from notBefore to notAfter.
func (a authority) intermediate(t testing.TB, name string, notBefore, notAfter time.Time) authority {
	t.Helper()
	c := sign(t, a, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
	})
	return authority{c.Leaf, c.PrivateKey.(*ecdsa.PrivateKey)}
}

// leaf makes a server certificate for names (DNS names; the first is the common name), valid
// from notBefore to notAfter.
func (a authority) leaf(t testing.TB, notBefore, notAfter time.Time, names ...string) tls.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    names,
		NotBefore:   notBefore,
		NotAfter:    notAfter,
	}
	if len(names) > 0 {
		tmpl.Subject.CommonName = names[0]
	}
	return sign(t, a, tmpl)
}

// sign fills in a key and serial and signs tmpl with a's key (a zero a: self-signed).
func sign(t testing.TB, a authority, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120)); err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber.Add(tmpl.SerialNumber, big.NewInt(1))
	parent, parentKey := a.cert, any(a.key)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// withChain appends the CA certificates the server sends after its own.
func withChain(c tls.Certificate, cas ...authority) tls.Certificate {
	for _, a := range cas {
		c.Certificate = append(c.Certificate, a.cert.Raw)
	}
	return c
}

func parsedChain(c tls.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, der := range c.Certificate {
		x, err := x509.ParseCertificate(der)
		if err != nil {
			panic(err)
		}
		out = append(out, x)
	}
	return out
}

// seen is what a fake backend observed on one connection.
type seen struct {
	sni string
	// early: bytes that arrived after the request the server had to answer first, before it
	// answered (a probe must wait for the answer).
	early int
	// after: bytes of application data received after the TLS handshake, or, when the
	// server refused TLS, plaintext the probe sent after the refusal.
	after int
	err   error
}

// backend is a fake database server on loopback: handle serves each connection and reports
// what it saw.
type backend struct {
	addr string
	seen chan seen
}

func startBackend(t *testing.T, handle func(net.Conn) seen) *backend {
	t.Helper()
	l := testutil.Listen(t)
	b := &backend{addr: l.Addr().String(), seen: make(chan seen, 16)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(serverTimeout))
				s := handle(conn)
				select {
				case b.seen <- s:
				default:
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return b
}

// next returns what the backend saw on the probe's connection.
func (b *backend) next(t *testing.T) seen {
	t.Helper()
	select {
	case s := <-b.seen:
		return s
	case <-time.After(serverTimeout + time.Second):
		t.Fatal("the backend saw no connection")
		return seen{}
	}
}

// serveTLS runs a TLS server handshake on conn with cfg and counts the application data
// that follows until the probe closes.
func serveTLS(conn net.Conn, cfg *tls.Config) seen {
	var s seen
	cfg = cfg.Clone()
	inner := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		s.sni = h.ServerName
		if inner != nil {
			return inner(h)
		}
		return nil, nil
	}
	tc := tls.Server(conn, cfg)
	if s.err = tc.Handshake(); s.err != nil {
		return s
	}
	n, err := io.Copy(io.Discard, tc)
	s.after = int(n)
	if err != nil && !isClosed(err) {
		s.err = err
	}
	return s
}

func tlsConfig(certs ...tls.Certificate) *tls.Config { return &tls.Config{Certificates: certs} }

// directTLS is a Redis-like backend: TLS at once.
func directTLS(cfg *tls.Config) func(net.Conn) seen {
	return func(conn net.Conn) seen { return serveTLS(conn, cfg) }
}

// readRequest reads want's length and reports whether it was want and how many more bytes
// came within a moment: a probe must send nothing more before the server answered.
func readRequest(conn net.Conn, want []byte) (early int, err error) {
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil {
		return 0, err
	}
	if !bytes.Equal(got, want) {
		return 0, errors.New("unexpected request " + string(got))
	}
	_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	n, _ := conn.Read(make([]byte, 1))
	_ = conn.SetReadDeadline(time.Now().Add(serverTimeout))
	return n, nil
}

// postgres is a PostgreSQL-like backend: SSLRequest, answer, TLS on 'S'.
func postgres(answer byte, cfg *tls.Config) func(net.Conn) seen {
	return func(conn net.Conn) seen {
		early, err := readRequest(conn, []byte(pgwire.SSLRequest))
		if err != nil {
			return seen{err: err}
		}
		if _, err := conn.Write([]byte{answer}); err != nil {
			return seen{err: err}
		}
		if answer != 'S' {
			n, _ := io.Copy(io.Discard, conn)
			return seen{early: early, after: int(n)}
		}
		s := serveTLS(conn, cfg)
		s.early = early
		return s
	}
}

// appendGreeting appends a MySQL protocol-10 greeting packet with sequence id 0.
func appendGreeting(dst []byte, version string, caps uint32) []byte {
	var p []byte
	p = append(p, 10)
	p = append(p, version...)
	p = append(p, 0)
	p = binary.LittleEndian.AppendUint32(p, 42) // connection id
	p = append(p, "scramble"...)                // auth-plugin-data part 1
	p = append(p, 0)                            // filler
	p = binary.LittleEndian.AppendUint16(p, uint16(caps))
	p = append(p, charsetUTF8MB4)
	p = binary.LittleEndian.AppendUint16(p, 2) // status: autocommit
	p = binary.LittleEndian.AppendUint16(p, uint16(caps>>16))
	p = append(p, 21)                  // auth-plugin-data length
	p = append(p, make([]byte, 10)...) // reserved
	p = append(p, "scramble part2\x00"...)
	p = append(p, "mysql_native_password\x00"...)
	return appendPacket(dst, 0, p)
}

func appendPacket(dst []byte, seq byte, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, byte(n), byte(n>>8), byte(n>>16), seq)
	return append(dst, payload...)
}

// mysqlCaps is what a MariaDB 10.11 with TLS announces in its lower and upper halves, roughly.
const mysqlCaps = 0xf7fe | clientSSL | clientPluginAuth | 1<<16 | 1<<17 | 1<<18 | 1<<20 | 1<<21

// mysql is a MySQL-like backend: greeting, then on the client's SSLRequest packet TLS.
func mysql(caps uint32, cfg *tls.Config) func(net.Conn) seen {
	return func(conn net.Conn) seen {
		if _, err := conn.Write(appendGreeting(nil, "10.11.6-MariaDB-0+deb12u1", caps)); err != nil {
			return seen{err: err}
		}
		if caps&clientSSL == 0 {
			n, _ := io.Copy(io.Discard, conn)
			return seen{after: int(n)}
		}
		req := make([]byte, 36)
		if _, err := io.ReadFull(conn, req); err != nil {
			return seen{err: err}
		}
		if n := int(req[0]) | int(req[1])<<8 | int(req[2])<<16; n != 32 || req[3] != 1 {
			return seen{err: errors.New("SSLRequest packet header wrong")}
		}
		if c := binary.LittleEndian.Uint32(req[4:]); c&clientSSL == 0 || c&clientProtocol41 == 0 {
			return seen{err: errors.New("SSLRequest without CLIENT_SSL or CLIENT_PROTOCOL_41")}
		}
		return serveTLS(conn, cfg)
	}
}

// writeAndClose answers whatever comes with msg and closes, like a plaintext server that
// cannot parse a ClientHello.
func writeAndClose(msg string) func(net.Conn) seen {
	return func(conn net.Conn) seen {
		_, _ = conn.Read(make([]byte, 4096))
		_, err := conn.Write([]byte(msg))
		return seen{err: err}
	}
}
