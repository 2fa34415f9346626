package testutil

// The nginx PROXY protocol backend of the end-to-end tests (proxyproto.go has HAProxy's).

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NginxBackendOptions configures StartNginxBackend. Every field is optional.
type NginxBackendOptions struct {
	// Upstream is where nginx forwards each connection after reading its PROXY header
	// (proxy_pass, without a header of its own): a real server, so that a client's handshake
	// through the gateway completes. It must be reachable from Netns when that is set.
	// Default: nginx itself answers Greeting and closes (return).
	Upstream string
	// Netns runs nginx inside that network namespace, listening on its IP. Default: the
	// host, on 127.0.0.1.
	Netns *Host
}

// NginxBackend is a running private nginx stream server on IP:Port with
// "listen ... proxy_protocol": every connection must start with a PROXY v1 or v2 header.
// nginx logs one line per connection, when it ends, to LogPath, which Lines parses.
//
// nginx runs as the current user with everything (pid, logs, configuration) in Dir:
// nginx -p Dir -e Dir/error.log -c Dir/nginx.conf, with "daemon off; master_process off;"
// so that the process the helper started is the one that serves and stops.
type NginxBackend struct {
	Port     int
	Dir      string
	LogPath  string // the access log (log_format snigate_pp)
	ErrorLog string // nginx's error log, stdout and stderr

	addr string
	proc *process
}

// NginxLogLine is one connection as the nginx backend logged it.
type NginxLogLine struct {
	// Client is the source in the PROXY header ($proxy_protocol_addr:$proxy_protocol_port).
	Client netip.AddrPort
	// Dest is the destination in the header
	// ($proxy_protocol_server_addr:$proxy_protocol_server_port).
	Dest netip.AddrPort
	// Peer is the TCP peer that sent the header ($remote_addr:$remote_port; no realip).
	Peer netip.AddrPort
	// Local is the address the connection reached ($server_addr:$server_port).
	Local netip.AddrPort
	// Status is nginx's session status: 200 when it went well, 400 for a missing or bad
	// header.
	Status int
	Raw    string
}

// nginxStreamModule is where Debian's libnginx-mod-stream puts the stream module.
const nginxStreamModule = "/usr/lib/nginx/modules/ngx_stream_module.so"

// StartNginxBackend starts a private nginx that accepts PROXY protocol v1 and v2 in its stream
// module on 127.0.0.1 (or NginxBackendOptions.Netns's IP), and returns when it accepts
// connections. It is stopped in t.Cleanup.
func StartNginxBackend(t testing.TB, o NginxBackendOptions) *NginxBackend {
	t.Helper()
	bin := Binary(t, "nginx", "/usr/sbin")
	_, err := os.Stat(nginxStreamModule)
	Require(t, "nginx's stream module (libnginx-mod-stream)", err)
	dir := serverDir(t, "nginx", nil)
	n := &NginxBackend{Dir: dir, LogPath: filepath.Join(dir, "access.log"), ErrorLog: filepath.Join(dir, "error.log")}
	answer := `return "` + strings.TrimSuffix(Greeting, "\n") + `\n";`
	if o.Upstream != "" {
		answer = "proxy_pass " + o.Upstream + ";"
	}
	// Readiness is probed on a unix socket (it is not in the namespace), so that probes are
	// neither logged nor mistaken for a client without a header.
	ready := filepath.Join(dir, "ready.sock")
	bind := bindIP(o.Netns)
	n.Port = withPortRetry(t, func(port int) error {
		_ = os.Remove(ready)
		n.addr = net.JoinHostPort(bind, strconv.Itoa(port))
		conf := fmt.Sprintf(`load_module %s;
daemon off;
master_process off;
pid %s;
error_log %s notice;
events { worker_connections 256; }
stream {
	log_format snigate_pp '%sclient=$proxy_protocol_addr client_port=$proxy_protocol_port dest=$proxy_protocol_server_addr dest_port=$proxy_protocol_server_port peer=$remote_addr peer_port=$remote_port local=$server_addr local_port=$server_port status=$status';
	server {
		listen %s proxy_protocol;
		access_log %s snigate_pp;
		%s
	}
	server {
		listen unix:%s;
		access_log off;
		return "ready\n";
	}
}
`, nginxStreamModule, filepath.Join(dir, "nginx.pid"), n.ErrorLog, ppLogMarker, n.addr, n.LogPath, answer, ready)
		confPath := filepath.Join(dir, "nginx.conf")
		if err := writeFile(confPath, []byte(conf), 0o644, nil); err != nil {
			return err
		}
		args := []string{"-p", dir, "-e", n.ErrorLog, "-c", confPath}
		cmd := command(nil, dir, bin, args...)
		if o.Netns != nil {
			cmd = o.Netns.Command(bin, args...)
			cmd.Dir = dir
		}
		proc, err := startProcess(cmd, "nginx "+n.addr, n.ErrorLog, syscall.SIGTERM) // SIGTERM: fast shutdown
		if err != nil {
			return err
		}
		n.proc = proc
		err = proc.waitReady(func() error { return dialClose("unix", ready) }, func(log string) bool {
			return strings.Contains(log, "Address already in use")
		})
		if err != nil {
			proc.stop()
		}
		return err
	})
	t.Cleanup(func() {
		n.proc.stop()
		if t.Failed() {
			t.Logf("nginx %s error log (%s):\n%s", n.addr, n.ErrorLog, n.proc.logTail())
		}
	})
	return n
}

// Addr is the host:port the backend listens on.
func (n *NginxBackend) Addr() string { return n.addr }

// Lines returns the connections logged so far (nginx logs a connection when it ends), oldest
// first.
func (n *NginxBackend) Lines() []NginxLogLine {
	var out []NginxLogLine
	for _, raw := range logLines(n.LogPath) {
		f := logFields(raw)
		status, _ := strconv.Atoi(f["status"])
		out = append(out, NginxLogLine{
			Client: addrPort(f["client"], f["client_port"]),
			Dest:   addrPort(f["dest"], f["dest_port"]),
			Peer:   addrPort(f["peer"], f["peer_port"]),
			Local:  addrPort(f["local"], f["local_port"]),
			Status: status,
			Raw:    raw,
		})
	}
	return out
}

// WaitLine waits up to timeout for a logged connection that match accepts and returns it; it
// fails the test with every line logged when none comes.
func (n *NginxBackend) WaitLine(t testing.TB, match func(NginxLogLine) bool, timeout time.Duration) NginxLogLine {
	t.Helper()
	var line NginxLogLine
	if !waitFor(timeout, func() bool {
		for _, l := range n.Lines() {
			if match(l) {
				line = l
				return true
			}
		}
		return false
	}) {
		b, _ := os.ReadFile(n.LogPath)
		t.Fatalf("nginx %s: no matching connection logged within %v; access log %s:\n%s\nerror log:\n%s", n.addr, timeout, n.LogPath, b, n.proc.logTail())
	}
	return line
}
