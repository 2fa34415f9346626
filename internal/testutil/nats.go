package testutil

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// NATSOptions configures StartNATS. Every field is optional.
type NATSOptions struct {
	// Name is the DNS name of the certificate made when Cert is nil. Default "nats.test".
	Name string
	CA   *CA   // default: a new CA
	Cert *Cert // default: CA.Issue(Name)
}

// NATS is a running private nats-server (built by scripts/install-engines.sh) on
// 127.0.0.1:Port with TLS and handshake_first: clients start TLS at once instead of waiting
// for the server's INFO, the only way SNI can route NATS (docs/protocols.md).
type NATS struct{ *engineServer }

// StartNATS starts a private nats-server and returns when a TLS-first handshake gets its
// INFO. It is stopped in t.Cleanup.
func StartNATS(t testing.TB, o NATSOptions) *NATS {
	t.Helper()
	bin := engineBinary(t, "nats-server")
	if o.Name == "" {
		o.Name = "nats.test"
	}
	n := &NATS{newEngineServer(t, "nats", o.Name, o.CA, o.Cert)}
	certPath, keyPath, _ := serverFiles(t, n.Dir, n.CA, n.Cert)
	n.CertFile = certPath
	n.cleanup(t, "nats-server")
	withPortRetry(t, func(port int) error {
		n.Port, n.Addr = port, loopback(port)
		conf := fmt.Sprintf(`listen: %q
server_name: %q
tls {
  cert_file: %q
  key_file: %q
  handshake_first: true
}
`, n.Addr, strings.ReplaceAll(o.Name, ".", "-"), certPath, keyPath)
		confPath := filepath.Join(n.Dir, "nats.conf")
		if err := writeFile(confPath, []byte(conf), 0o644, nil); err != nil {
			return err
		}
		proc, err := startProcess(command(nil, n.Dir, bin, "-c", confPath), "nats-server "+o.Name, n.LogPath, syscall.SIGTERM)
		if err != nil {
			return err
		}
		n.proc = proc
		// The server's first line inside TLS is its INFO: the protocol is up, not only the
		// socket.
		err = proc.waitReady(tlsReady(n.Addr, o.Name, func(c *tls.Conn) error {
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return err
			}
			if !strings.HasPrefix(line, "INFO ") {
				return fmt.Errorf("first line %q, want INFO", line)
			}
			return nil
		}), addrInUse)
		if err != nil {
			proc.stop()
		}
		return err
	})
	return n
}
