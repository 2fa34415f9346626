package testutil

// The PROXY protocol peers of the end-to-end tests: real HAProxy and nginx servers that accept
// a PROXY v1/v2 header (what snigate sends its backends) and log what they read from it, and
// a real HAProxy that sends one (a load balancer in front of snigate).

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Greeting is what the PROXY protocol backends answer a connection with when they have no
// Upstream: the HAProxy backend's responder writes it and then echoes what it reads, nginx
// returns it and closes.
const Greeting = "ok\n"

// ppLogMarker starts every connection log line the backends write, so that the parsers skip
// the servers' own notices and warnings sharing the file.
const ppLogMarker = "snigate-pp "

// HAProxyBackendOptions configures StartHAProxyBackend. Every field is optional.
type HAProxyBackendOptions struct {
	// Upstream is where HAProxy forwards each connection after reading its PROXY header
	// (it sends none on): a real server, such as a TLS database, so that a client's handshake
	// through the gateway completes. It must be reachable from Netns when that is set.
	// Default: a responder the helper runs, which writes Greeting and echoes.
	Upstream string
	// Netns runs HAProxy inside that network namespace, bound to its IP: a backend an
	// EndpointSlice can name (the default responder then listens on the host end, HostIP).
	// Default: the host, on 127.0.0.1.
	Netns *Host
}

// HAProxyBackend is a running private HAProxy (TCP mode) whose only frontend is
// "bind IP:Port accept-proxy": every connection must start with a PROXY v1 or v2 header.
// It logs one line per connection (option logasap: when the connection to its server is
// made) to LogPath, which Lines parses.
type HAProxyBackend struct {
	Port    int
	Dir     string
	LogPath string // HAProxy's stdout and stderr: its connection log and its own messages
	// Version is the first line of haproxy -v.
	Version string
	// LogsALPN reports whether this HAProxy has the fc_pp_tlv sample fetch (HAProxy 2.9 and
	// later), so that HAProxyLogLine.ALPN holds the ALPN TLV. Debian 12's 2.6 does not:
	// there ALPN is always empty.
	LogsALPN bool

	addr string
	proc *process
}

// HAProxyLogLine is one connection as the HAProxy backend logged it.
type HAProxyLogLine struct {
	// Client is the source address and port after the PROXY header (%ci:%cp): the client the
	// gateway announced.
	Client netip.AddrPort
	// Dest is the destination after the PROXY header (%fi:%fp).
	Dest netip.AddrPort
	// Peer is the TCP peer that sent the header (fc_src:fc_src_port): the gateway itself.
	Peer netip.AddrPort
	// Proxied reports that the connection began with a PROXY header (fc_rcvd_proxy).
	Proxied bool
	// Authority is the PROXY v2 authority TLV, 0x02 (fc_pp_authority): the client's SNI.
	Authority string
	// UniqueID is the PROXY v2 unique ID TLV, 0x05 (fc_pp_unique_id).
	UniqueID string
	// ALPN is the PROXY v2 ALPN TLV, 0x01 (fc_pp_tlv(0x01)), when HAProxyBackend.LogsALPN.
	ALPN string
	Raw  string
}

// StartHAProxyBackend starts a private HAProxy that accepts PROXY protocol v1 and v2 on
// 127.0.0.1 (or HAProxyBackendOptions.Netns's IP) and answers each connection (the default
// responder, or Upstream), and returns when it accepts connections. It is stopped in
// t.Cleanup.
func StartHAProxyBackend(t testing.TB, o HAProxyBackendOptions) *HAProxyBackend {
	t.Helper()
	bin := Binary(t, "haproxy", "/usr/sbin")
	dir := serverDir(t, "haproxy-backend", nil)
	b := &HAProxyBackend{Dir: dir, LogPath: filepath.Join(dir, "haproxy.log")}
	b.Version, b.LogsALPN = haproxyFeatures(t, bin, dir)

	upstream := o.Upstream
	if upstream == "" {
		ip := "127.0.0.1"
		if o.Netns != nil {
			ip = o.Netns.HostIP.String()
		}
		upstream = startResponder(t, ip)
	}
	bind := bindIP(o.Netns)
	format := ppLogMarker + `ci=%ci cp=%cp fi=%fi fp=%fp src=%[fc_src] srcport=%[fc_src_port] proxy=%[fc_rcvd_proxy]` +
		` authority=%{+Q}[fc_pp_authority] unique_id=%{+Q}[fc_pp_unique_id]`
	if b.LogsALPN {
		format += ` alpn=%{+Q}[fc_pp_tlv(0x01)]`
	}
	b.Port = withPortRetry(t, func(port int) error {
		b.addr = net.JoinHostPort(bind, strconv.Itoa(port))
		conf := haproxyGlobal + fmt.Sprintf(`
frontend pp
	bind %s accept-proxy
	option logasap
	option dontlognull
	log-format "%s"
	default_backend answer

backend answer
	server answer %s
`, b.addr, format, upstream)
		proc, err := startHAProxy(bin, dir, conf, b.LogPath, "haproxy backend", o.Netns, b.addr)
		b.proc = proc
		return err
	})
	t.Cleanup(func() {
		b.proc.stop()
		if t.Failed() {
			t.Logf("haproxy backend %s log (%s):\n%s", b.addr, b.LogPath, b.proc.logTail())
		}
	})
	return b
}

// Addr is the host:port the backend listens on.
func (b *HAProxyBackend) Addr() string { return b.addr }

// Lines returns the connections logged so far, oldest first.
func (b *HAProxyBackend) Lines() []HAProxyLogLine {
	var out []HAProxyLogLine
	for _, raw := range logLines(b.LogPath) {
		f := logFields(raw)
		out = append(out, HAProxyLogLine{
			Client:    addrPort(f["ci"], f["cp"]),
			Dest:      addrPort(f["fi"], f["fp"]),
			Peer:      addrPort(f["src"], f["srcport"]),
			Proxied:   f["proxy"] == "1",
			Authority: f["authority"],
			UniqueID:  f["unique_id"],
			ALPN:      f["alpn"],
			Raw:       raw,
		})
	}
	return out
}

// WaitLine waits up to timeout for a logged connection that match accepts and returns it; it
// fails the test with every line logged when none comes.
func (b *HAProxyBackend) WaitLine(t testing.TB, match func(HAProxyLogLine) bool, timeout time.Duration) HAProxyLogLine {
	t.Helper()
	var line HAProxyLogLine
	if !waitFor(timeout, func() bool {
		for _, l := range b.Lines() {
			if match(l) {
				line = l
				return true
			}
		}
		return false
	}) {
		t.Fatalf("haproxy backend %s: no matching connection logged within %v; log %s:\n%s", b.addr, timeout, b.LogPath, b.proc.logTail())
	}
	return line
}

// HAProxyFrontOptions configures StartHAProxyFront.
type HAProxyFrontOptions struct {
	// Upstream (host:port) is where every connection goes, behind a PROXY header that
	// carries the client's address and the address it connected to. Required; it must be
	// reachable from Netns when that is set.
	Upstream string
	// ProxyV1 sends the text header (send-proxy) instead of v2 (send-proxy-v2).
	ProxyV1 bool
	// Netns runs HAProxy inside that network namespace, bound to its IP. Default: the host,
	// on 127.0.0.1.
	Netns *Host
}

// HAProxyFront is a running private HAProxy (TCP mode) on IP:Port that forwards every
// connection to Upstream with a PROXY header (send-proxy-v2, or send-proxy with ProxyV1): a
// load balancer in front of the gateway, which must trust it.
type HAProxyFront struct {
	Port     int
	Upstream string
	// ProxyVersion is the PROXY protocol version it sends: 1 or 2.
	ProxyVersion int
	Dir          string
	LogPath      string // HAProxy's stdout and stderr

	addr string
	proc *process
}

// StartHAProxyFront starts a private HAProxy that relays to HAProxyFrontOptions.Upstream with
// a PROXY header, and returns when it accepts connections. It is stopped in t.Cleanup.
func StartHAProxyFront(t testing.TB, o HAProxyFrontOptions) *HAProxyFront {
	t.Helper()
	if o.Upstream == "" {
		t.Fatal("StartHAProxyFront: no Upstream")
	}
	bin := Binary(t, "haproxy", "/usr/sbin")
	dir := serverDir(t, "haproxy-front", nil)
	f := &HAProxyFront{Upstream: o.Upstream, ProxyVersion: 2, Dir: dir, LogPath: filepath.Join(dir, "haproxy.log")}
	send := "send-proxy-v2"
	if o.ProxyV1 {
		send, f.ProxyVersion = "send-proxy", 1
	}
	bind := bindIP(o.Netns)
	f.Port = withPortRetry(t, func(port int) error {
		f.addr = net.JoinHostPort(bind, strconv.Itoa(port))
		conf := haproxyGlobal + fmt.Sprintf(`
frontend front
	bind %s
	option dontlognull
	default_backend upstream

backend upstream
	server upstream %s %s
`, f.addr, o.Upstream, send)
		proc, err := startHAProxy(bin, dir, conf, f.LogPath, "haproxy front", o.Netns, f.addr)
		f.proc = proc
		return err
	})
	t.Cleanup(func() {
		f.proc.stop()
		if t.Failed() {
			t.Logf("haproxy front %s log (%s):\n%s", f.addr, f.LogPath, f.proc.logTail())
		}
	})
	return f
}

// Addr is the host:port the front listens on.
func (f *HAProxyFront) Addr() string { return f.addr }

// haproxyGlobal is the start of every HAProxy configuration: one thread, logs to stdout
// (no syslog daemon needed: the process's stdout is its log file), TCP mode.
const haproxyGlobal = `global
	nbthread 1
	log stdout format raw local0

defaults
	mode tcp
	log global
	timeout connect 5s
	timeout client 5m
	timeout server 5m
`

// startHAProxy writes conf and runs HAProxy in the foreground (-db) until it accepts
// connections; the caller stops the process. Readiness is probed on a unix socket of its own
// (on the shared filesystem, so reachable in a namespace too): HAProxy binds every listener
// before it accepts on any, and a probe of addr itself would reach a front's upstream.
func startHAProxy(bin, dir, conf, logPath, name string, netns *Host, addr string) (*process, error) {
	ready := filepath.Join(dir, "ready.sock")
	_ = os.Remove(ready)
	conf += fmt.Sprintf(`
frontend ready
	bind unix@%s
	tcp-request connection reject
`, ready)
	confPath := filepath.Join(dir, "haproxy.cfg")
	if err := writeFile(confPath, []byte(conf), 0o644, nil); err != nil {
		return nil, err
	}
	args := []string{"-db", "-f", confPath}
	cmd := command(nil, dir, bin, args...)
	if netns != nil {
		cmd = netns.Command(bin, args...)
		cmd.Dir = dir
	}
	// SIGTERM: hard stop, without waiting for connections to end.
	proc, err := startProcess(cmd, name+" "+addr, logPath, syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	err = proc.waitReady(func() error { return dialClose("unix", ready) }, func(log string) bool {
		return strings.Contains(log, "Address already in use")
	})
	if err != nil {
		proc.stop()
	}
	return proc, err
}

var haproxyFeatureCache struct {
	sync.Mutex
	done    bool
	version string
	tlv     bool
}

// haproxyFeatures returns haproxy -v's first line and whether the binary knows fc_pp_tlv
// (checked with haproxy -c on a configuration that uses it, not guessed from the version).
func haproxyFeatures(t testing.TB, bin, dir string) (string, bool) {
	t.Helper()
	c := &haproxyFeatureCache
	c.Lock()
	defer c.Unlock()
	if c.done {
		return c.version, c.tlv
	}
	out, err := exec.Command(bin, "-v").Output()
	if err != nil {
		t.Fatalf("haproxy -v: %v", err)
	}
	c.version, _, _ = strings.Cut(string(out), "\n")
	probe := filepath.Join(dir, "probe.cfg")
	conf := haproxyGlobal + `
frontend probe
	bind 127.0.0.1:0
	log-format "%[fc_pp_tlv(0x01)]"
	default_backend none

backend none
`
	if err := os.WriteFile(probe, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c.tlv = exec.Command(bin, "-c", "-q", "-f", probe).Run() == nil
	c.done = true
	return c.version, c.tlv
}

// startResponder serves the default answer of the HAProxy backend on ip: Greeting, then an
// echo of whatever the client sends, until it closes. It stops in t.Cleanup and returns its
// host:port.
func startResponder(t testing.TB, ip string) string {
	t.Helper()
	return serveConns(t, ip, func(c net.Conn) {
		if _, err := io.WriteString(c, Greeting); err != nil {
			return
		}
		_, _ = io.Copy(c, c)
	})
}

// serveConns listens on ip (a free port) and runs serve for each connection, closing it when
// serve returns. In t.Cleanup it stops listening, closes the open connections and waits for
// every serve. It returns the listener's host:port.
func serveConns(t testing.TB, ip string, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					c.Close()
				}()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// bindIP is where a server listens: the namespace's IP, or 127.0.0.1.
func bindIP(h *Host) string {
	if h != nil {
		return h.IP.String()
	}
	return "127.0.0.1"
}

// dialClose connects and closes at once: a readiness probe.
func dialClose(network, addr string) error {
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// waitFor polls cond until it is true (true) or timeout passes (false).
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logLines returns the lines of path that start with ppLogMarker, without it.
func logLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, ppLogMarker); ok {
			out = append(out, rest)
		}
	}
	return out
}

// logFields splits `key=value key="quoted value"` into a map. A quoted value may hold spaces
// and backslash escapes; "-" (HAProxy's and nginx's mark of an empty value) is empty.
func logFields(line string) map[string]string {
	f := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		key, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var val string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(rest) && rest[i] != '"'; i++ {
				if rest[i] == '\\' && i+1 < len(rest) {
					i++
				}
				b.WriteByte(rest[i])
			}
			val, line = b.String(), rest[min(i+1, len(rest)):]
		} else {
			val, line, _ = strings.Cut(rest, " ")
		}
		if val == "-" {
			val = ""
		}
		f[key] = val
	}
	return f
}

// addrPort parses a logged address and port; anything else (empty, "-", a unix socket) is
// the zero AddrPort.
func addrPort(ip, port string) netip.AddrPort {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.AddrPort{}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(p))
}
