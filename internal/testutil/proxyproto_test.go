package testutil

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
)

// ppCase is a PROXY header a test client sends: addresses no test machine has, so that a
// logged address is clearly the header's.
type ppCase struct {
	name      string
	version   byte
	src, dst  netip.AddrPort
	authority string // v2 only
	alpn      string // v2 only
}

var ppCases = []ppCase{
	{name: "v1", version: 1, src: netip.MustParseAddrPort("203.0.113.7:4242"), dst: netip.MustParseAddrPort("198.51.100.1:443")},
	{name: "v2", version: 2, src: netip.MustParseAddrPort("203.0.113.8:5353"), dst: netip.MustParseAddrPort("198.51.100.2:8443"),
		authority: "alpha.db.test", alpn: "postgresql"},
	{name: "v2 ipv6", version: 2, src: netip.MustParseAddrPort("[2001:db8::7]:6464"), dst: netip.MustParseAddrPort("[2001:db8::1]:443"),
		authority: "beta.cache.test", alpn: "h2"},
}

// dialWithHeader connects to addr and writes c's header (go-proxyproto formats it). The
// connection is closed in t.Cleanup.
func dialWithHeader(t *testing.T, addr string, c ppCase) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	proto := proxyproto.TCPv4
	if c.src.Addr().Is6() {
		proto = proxyproto.TCPv6
	}
	h := &proxyproto.Header{
		Version:           c.version,
		Command:           proxyproto.PROXY,
		TransportProtocol: proto,
		SourceAddr:        net.TCPAddrFromAddrPort(c.src),
		DestinationAddr:   net.TCPAddrFromAddrPort(c.dst),
	}
	if c.version == 2 {
		if err := h.SetTLVs([]proxyproto.TLV{
			{Type: proxyproto.PP2_TYPE_AUTHORITY, Value: []byte(c.authority)},
			{Type: proxyproto.PP2_TYPE_ALPN, Value: []byte(c.alpn)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.WriteTo(conn); err != nil {
		t.Fatalf("writing the PROXY header: %v", err)
	}
	return conn
}

// localAddrPort is conn's own address: what a server sees as its peer.
func localAddrPort(t *testing.T, conn net.Conn) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// placements are where the servers run: on loopback, or in a network namespace, where the
// host's connections come from the host end of the link (Host.HostIP), not 127.0.0.1.
var placements = []string{"loopback", "netns"}

func placement(t *testing.T, where string) (*Host, netip.Addr) {
	t.Helper()
	if where == "netns" {
		h := NetnsHost(t, "pp")
		return h, h.HostIP
	}
	return nil, netip.MustParseAddr("127.0.0.1")
}

func TestHAProxyBackend(t *testing.T) {
	t.Parallel()
	for _, where := range placements {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			h, peerIP := placement(t, where)
			b := StartHAProxyBackend(t, HAProxyBackendOptions{Netns: h})
			t.Logf("%s at %s, logs ALPN: %v", b.Version, b.Addr(), b.LogsALPN)
			for _, c := range ppCases {
				t.Run(c.name, func(t *testing.T) {
					conn := dialWithHeader(t, b.Addr(), c)
					r := bufio.NewReader(conn)
					if got, err := r.ReadString('\n'); err != nil || got != Greeting {
						t.Fatalf("greeting %q, %v", got, err)
					}
					if _, err := io.WriteString(conn, "ping\n"); err != nil {
						t.Fatal(err)
					}
					if got, err := r.ReadString('\n'); err != nil || got != "ping\n" {
						t.Fatalf("echo %q, %v", got, err)
					}
					peer := localAddrPort(t, conn)
					l := b.WaitLine(t, func(l HAProxyLogLine) bool { return l.Client == c.src }, 10*time.Second)
					if l.Dest != c.dst || l.Peer != peer || !l.Proxied || l.Authority != c.authority || l.UniqueID != "" {
						t.Errorf("logged %+v; want dest %s, peer %s, authority %q", l, c.dst, peer, c.authority)
					}
					if peer.Addr() != peerIP {
						t.Errorf("client's address %s, want %s", peer, peerIP)
					}
					if b.LogsALPN && l.ALPN != c.alpn {
						t.Errorf("ALPN %q, want %q", l.ALPN, c.alpn)
					}
				})
			}
			t.Run("no header", func(t *testing.T) {
				conn, err := net.DialTimeout("tcp", b.Addr(), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.WriteString(conn, "hello, no PROXY header\r\n")
				// HAProxy closes it, maybe with a reset (the junk is unread): either way no answer.
				if got, _ := io.ReadAll(conn); len(got) != 0 {
					t.Fatalf("a connection without a header got %q; want it closed", got)
				}
			})
			if n := len(b.Lines()); n != len(ppCases) {
				t.Errorf("%d connections logged, want %d (the readiness probes and the connection without a header are not):\n%v", n, len(ppCases), b.Lines())
			}
		})
	}
}

func TestNginxBackend(t *testing.T) {
	t.Parallel()
	for _, where := range placements {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			h, peerIP := placement(t, where)
			n := StartNginxBackend(t, NginxBackendOptions{Netns: h})
			for _, c := range ppCases {
				t.Run(c.name, func(t *testing.T) {
					conn := dialWithHeader(t, n.Addr(), c)
					if got, err := io.ReadAll(conn); err != nil || string(got) != Greeting {
						t.Fatalf("answer %q, %v", got, err)
					}
					peer := localAddrPort(t, conn)
					l := n.WaitLine(t, func(l NginxLogLine) bool { return l.Client == c.src }, 10*time.Second)
					if l.Dest != c.dst || l.Peer != peer || l.Local.String() != n.Addr() || l.Status != 200 {
						t.Errorf("logged %+v; want dest %s, peer %s, local %s, status 200", l, c.dst, peer, n.Addr())
					}
					if peer.Addr() != peerIP {
						t.Errorf("client's address %s, want %s", peer, peerIP)
					}
				})
			}
			t.Run("no header", func(t *testing.T) {
				conn, err := net.DialTimeout("tcp", n.Addr(), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.WriteString(conn, "hello, no PROXY header\r\n")
				if got, _ := io.ReadAll(conn); len(got) != 0 {
					t.Fatalf("a connection without a header got %q; want it closed", got)
				}
				peer := localAddrPort(t, conn)
				l := n.WaitLine(t, func(l NginxLogLine) bool { return l.Peer == peer }, 10*time.Second)
				if l.Status != 400 || l.Client.IsValid() {
					t.Errorf("logged %+v; want status 400 and no client", l)
				}
			})
		})
	}
}

func TestHAProxyFront(t *testing.T) {
	t.Parallel()
	for _, where := range placements {
		for _, v1 := range []bool{false, true} {
			name := where + "/v2"
			if v1 {
				name = where + "/v1"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h, clientIP := placement(t, where)
				// The host end of the link is reachable from the namespace.
				rec := StartProxyProtoRecorder(t, ProxyProtoRecorderOptions{IP: clientIP})
				f := StartHAProxyFront(t, HAProxyFrontOptions{Upstream: rec.Addr(), ProxyV1: v1, Netns: h})
				conn, err := net.DialTimeout("tcp", f.Addr(), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if got, err := bufio.NewReader(conn).ReadString('\n'); err != nil || got != Greeting {
					t.Fatalf("answer through the front %q, %v", got, err)
				}
				client := localAddrPort(t, conn)
				hdr := rec.WaitHeader(t, func(h ProxyProtoHeader) bool { return h.Client == client }, 10*time.Second)
				if n := len(rec.Headers()); n != 1 {
					t.Errorf("the upstream got %d connections, want 1 (no readiness probe): %+v", n, rec.Headers())
				}
				if client.Addr() != clientIP {
					t.Errorf("client's address %s, want %s", client, clientIP)
				}
				if hdr.Err != nil || hdr.Version != f.ProxyVersion || hdr.Local {
					t.Errorf("header %+v, want version %d PROXY", hdr, f.ProxyVersion)
				}
				if hdr.Client != client {
					t.Errorf("header source %s, want the client %s", hdr.Client, client)
				}
				if hdr.Dest.String() != f.Addr() {
					t.Errorf("header destination %s, want the front %s", hdr.Dest, f.Addr())
				}
				if hdr.Peer.Addr() == clientIP && where == "netns" {
					t.Errorf("header came from %s: the front should connect from inside the namespace", hdr.Peer)
				}
			})
		}
	}
}

// TestHAProxyFrontToBackends chains the real servers: a client through an HAProxyFront
// reaches the HAProxy and nginx backends, which log the client's own address.
func TestHAProxyFrontToBackends(t *testing.T) {
	t.Parallel()
	h := NetnsHost(t, "ppchain")
	hb := StartHAProxyBackend(t, HAProxyBackendOptions{})
	nb := StartNginxBackend(t, NginxBackendOptions{})
	for _, tc := range []struct {
		name    string
		backend string
		v1      bool
		logged  func(t *testing.T, client netip.AddrPort) string
	}{
		{"haproxy backend v2", hb.Addr(), false, func(t *testing.T, client netip.AddrPort) string {
			l := hb.WaitLine(t, func(l HAProxyLogLine) bool { return l.Client == client }, 10*time.Second)
			return l.Dest.String()
		}},
		{"nginx backend v1", nb.Addr(), true, func(t *testing.T, client netip.AddrPort) string {
			l := nb.WaitLine(t, func(l NginxLogLine) bool { return l.Client == client }, 10*time.Second)
			return l.Dest.String()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The front runs on the host, the client in the namespace's place: the host
			// reaches its own end of the link from HostIP, never 127.0.0.1.
			f := StartHAProxyFront(t, HAProxyFrontOptions{Upstream: tc.backend, ProxyV1: tc.v1})
			conn, err := net.DialTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.HostIP, 0)), net.TCPAddrFromAddrPort(netip.MustParseAddrPort(f.Addr())))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if got, err := bufio.NewReader(conn).ReadString('\n'); err != nil || got != Greeting {
				t.Fatalf("answer %q, %v", got, err)
			}
			client := localAddrPort(t, conn)
			if dest := tc.logged(t, client); dest != f.Addr() {
				t.Errorf("logged destination %s, want the front %s", dest, f.Addr())
			}
			if strings.HasPrefix(client.String(), "127.") {
				t.Errorf("client %s is on loopback", client)
			}
		})
	}
}

func TestProxyProtoRecorder(t *testing.T) {
	t.Parallel()
	rec := StartProxyProtoRecorder(t, ProxyProtoRecorderOptions{})
	for _, c := range ppCases {
		t.Run(c.name, func(t *testing.T) {
			conn := dialWithHeader(t, rec.Addr(), c)
			r := bufio.NewReader(conn)
			if got, err := r.ReadString('\n'); err != nil || got != Greeting {
				t.Fatalf("greeting %q, %v", got, err)
			}
			h := rec.WaitHeader(t, func(h ProxyProtoHeader) bool { return h.Client == c.src }, 10*time.Second)
			if h.Err != nil || h.Version != int(c.version) || h.Dest != c.dst || h.Peer != localAddrPort(t, conn) ||
				h.Authority != c.authority || h.ALPN != c.alpn {
				t.Errorf("recorded %+v; want %+v", h, c)
			}
		})
	}
	t.Run("no header", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", rec.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(conn, "hello, no PROXY header\r\n")
		if got, _ := io.ReadAll(conn); len(got) != 0 {
			t.Fatalf("got %q; want the connection closed", got)
		}
		peer := localAddrPort(t, conn)
		h := rec.WaitHeader(t, func(h ProxyProtoHeader) bool { return h.Peer == peer }, 10*time.Second)
		if !errors.Is(h.Err, proxyproto.ErrNoProxyProtocol) {
			t.Errorf("recorded %+v; want ErrNoProxyProtocol", h)
		}
	})
}
