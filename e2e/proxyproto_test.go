package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/proxyproto"
	"github.com/snigate/snigate/internal/testutil"
)

// PROXY protocol through the real binary, against real peers:
//   - BackendPolicy: a real HAProxy (accept-proxy) and a real nginx stream server
//     (proxy_protocol), each in front of a TLS backend, log the client's own address for
//     connections snigate passes through, with v1 and with v2; HAProxy reads the SNI in v2's
//     authority TLV.
//   - ListenerPolicy: a real HAProxy in front of snigate sending send-proxy-v2: snigate's
//     access log names the client (and the balancer as via), and the header it writes on to
//     the backend carries the client too; the same header sent straight from an address
//     outside the trusted range is closed without a byte (proxy_header_untrusted).
//
// The client dials from the host end of a network namespace's link (10.213.x.x), so every
// address it is seen with is plainly not the 127.0.0.1 of everything else.
func TestProxyProtocolWithRealPeers(t *testing.T) {
	names := []string{"h1.test", "h2.test", "n1.test", "n2.test", "lb.test"}
	ca := testutil.NewCA(t)
	tlsBackend := addr(startEcho(t, "echo", ca.Issue(t, names...)))
	haproxy := testutil.StartHAProxyBackend(t, testutil.HAProxyBackendOptions{Upstream: tlsBackend})
	nginx := testutil.StartNginxBackend(t, testutil.NginxBackendOptions{Upstream: tlsBackend})
	from := testutil.NetnsHost(t, "pp-client").HostIP

	tlsPort, lbPort := testutil.FreePort(t), testutil.FreePort(t)
	dir := configDir(t)
	policy := func(name, svc, spec string) string {
		return fmt.Sprintf("apiVersion: snigate.dev/v1alpha1\nkind: BackendPolicy\nmetadata: {name: %s, namespace: default}\n"+
			"spec:\n  targetRefs: [{group: \"\", kind: Service, name: %s}]\n  proxyProtocol: %s\n", name, svc, spec)
	}
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", tlsPort, ""), passthrough("lb", lbPort, "")),
		routeYAML("h1", "tls", []string{"h1.test"}, to("haproxy-v1")),
		routeYAML("h2", "tls", []string{"h2.test"}, to("haproxy-v2")),
		routeYAML("n1", "tls", []string{"n1.test"}, to("nginx-v1")),
		routeYAML("n2", "tls", []string{"n2.test"}, to("nginx-v2")),
		routeYAML("lb", "lb", []string{"lb.test"}, to("haproxy-v2")),
		serviceYAML("haproxy-v1", haproxy.Port), serviceYAML("haproxy-v2", haproxy.Port),
		serviceYAML("nginx-v1", nginx.Port), serviceYAML("nginx-v2", nginx.Port),
		policy("haproxy-v1", "haproxy-v1", "{version: v1}"),
		policy("haproxy-v2", "haproxy-v2", "{version: v2, tlvs: [authority]}"),
		policy("nginx-v1", "nginx-v1", "{version: v1}"),
		policy("nginx-v2", "nginx-v2", "{version: v2}"),
		`apiVersion: snigate.dev/v1alpha1
kind: ListenerPolicy
metadata: {name: from-lb, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: lb}]
  proxyProtocol: {trustedRanges: [127.0.0.0/8], required: true}
`,
	))
	g := startGateway(t, dir)

	// session is a TLS connection from `from` to addr with SNI sni, its greeting read; it
	// returns the client's own address.
	session := func(t *testing.T, to, sni string) netip.AddrPort {
		t.Helper()
		d := &net.Dialer{Timeout: ioTimeout, LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
		c, err := tls.DialWithDialer(d, "tcp", to, ca.ClientConfig(sni))
		if err != nil {
			t.Fatalf("TLS to %s as %s: %v", to, sni, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(ioTimeout))
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatalf("greeting through %s: %v", to, err)
		}
		return c.LocalAddr().(*net.TCPAddr).AddrPort()
	}
	sameClient := func(got, want netip.AddrPort) bool {
		return got.Addr().Unmap() == want.Addr().Unmap() && got.Port() == want.Port()
	}

	for _, c := range []struct{ sni, version string }{{"h1.test", "v1"}, {"h2.test", "v2"}} {
		t.Run("HAProxy backend, "+c.version, func(t *testing.T) {
			me := session(t, addr(tlsPort), c.sni)
			line := haproxy.WaitLine(t, func(l testutil.HAProxyLogLine) bool { return sameClient(l.Client, me) }, waitTimeout)
			if c.version == "v2" && line.Authority != c.sni {
				t.Errorf("HAProxy read authority %q from the v2 header, want the SNI %s (%s)", line.Authority, c.sni, line.Raw)
			}
		})
	}
	for _, c := range []struct{ sni, version string }{{"n1.test", "v1"}, {"n2.test", "v2"}} {
		t.Run("nginx backend, "+c.version, func(t *testing.T) {
			me := session(t, addr(tlsPort), c.sni)
			nginx.WaitLine(t, func(l testutil.NginxLogLine) bool { return sameClient(l.Client, me) }, waitTimeout)
		})
	}

	t.Run("HAProxy in front, send-proxy-v2", func(t *testing.T) {
		front := testutil.StartHAProxyFront(t, testutil.HAProxyFrontOptions{Upstream: addr(lbPort)})
		me := session(t, front.Addr(), "lb.test")
		rec := g.waitLog(t, "the access log line of the connection through the front", 1, func(rec map[string]any, _ string) bool {
			return rec["msg"] == "connection" && rec["sni"] == "lb.test" && rec["client"] == me.String()
		})
		if via, _ := rec["via"].(string); !strings.HasPrefix(via, "127.0.0.1:") {
			t.Errorf("access log via %q, want the front's 127.0.0.1 address: %v", via, rec)
		}
		// And on to the backend: the header snigate writes carries the client, not the front.
		line := haproxy.WaitLine(t, func(l testutil.HAProxyLogLine) bool { return sameClient(l.Client, me) }, waitTimeout)
		if line.Authority != "lb.test" {
			t.Errorf("backend read authority %q, want lb.test", line.Authority)
		}
	})

	t.Run("the same header from outside the trusted range", func(t *testing.T) {
		d := &net.Dialer{Timeout: ioTimeout, LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
		c, err := d.Dial("tcp", addr(lbPort))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hdr, err := proxyproto.Header(2, netip.MustParseAddrPort("198.51.100.1:4242"), netip.MustParseAddrPort(addr(lbPort)), proxyproto.TLVs{})
		if err != nil {
			t.Fatal(err)
		}
		c.Write(hdr)
		tc := tls.Client(c, ca.ClientConfig("lb.test"))
		tc.SetDeadline(time.Now().Add(ioTimeout))
		if err := tc.Handshake(); err == nil {
			t.Fatal("a PROXY header from an untrusted address got through")
		}
		g.waitRejected(t, "proxy_header_untrusted", 1)
	})
}
