package testutil

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The engines Debian 12 does not carry (nats-server, FerretDB) are built from their Go
// modules by scripts/install-engines.sh into EnginesDir; the others (RabbitMQ, ClickHouse)
// come from Debian's packages like PostgreSQL (scripts/install-test-deps.sh).

// EnginesDir is where scripts/install-engines.sh leaves nats-server and ferretdb, unless
// SNIGATE_ENGINES says otherwise.
func EnginesDir() string {
	if d := os.Getenv("SNIGATE_ENGINES"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "snigate", "engines")
}

// engineBinary finds a binary that scripts/install-engines.sh builds: in EnginesDir, then on
// PATH. Missing, it skips the test, or fails it under CI=true (Require).
func engineBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := lookBinary(name, EnginesDir())
	if err != nil {
		err = fmt.Errorf("%w: scripts/install-engines.sh builds it", err)
	}
	Require(t, name, err)
	if err != nil {
		return ""
	}
	return p
}

// tlsReady returns a readiness check that completes a TLS handshake with addr, sending
// serverName, and then runs after (when not nil) on the open connection: a listener that
// accepts but whose TLS is not up yet (or that speaks something else first) is not ready.
func tlsReady(addr, serverName string, after func(*tls.Conn) error) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := dialBounded(ctx, addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		tc := tls.Client(conn, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		if after != nil {
			return after(tc)
		}
		return nil
	}
}

// addrInUse is the portInUse check of the servers whose log says so in these words.
func addrInUse(log string) bool {
	return strings.Contains(strings.ToLower(log), "address already in use") || strings.Contains(log, "eaddrinuse")
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// serverFiles writes the certificate, its key and the CA into dir for a server of the
// current user.
func serverFiles(t testing.TB, dir string, ca *CA, cert *Cert) (certPath, keyPath, caPath string) {
	t.Helper()
	certPath, keyPath, err := cert.writeFilesFor(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath, ca.WriteFile(t, dir)
}

// engineServer is what every engine started here has in common.
type engineServer struct {
	Name string
	Port int
	Addr string // 127.0.0.1:Port
	Dir  string
	CA   *CA
	Cert *Cert
	// CertFile is the certificate file the server was configured with.
	CertFile string
	LogPath  string

	proc *process
}

// newEngineServer fills in the defaults: Name, a new CA, a certificate for Name.
func newEngineServer(t testing.TB, kind, name string, ca *CA, cert *Cert) *engineServer {
	t.Helper()
	if ca == nil {
		ca = NewCA(t)
	}
	if cert == nil {
		cert = ca.Issue(t, name)
	}
	dir := serverDir(t, kind, nil)
	return &engineServer{Name: name, Dir: dir, CA: ca, Cert: cert, LogPath: filepath.Join(dir, kind+".log")}
}

// cleanup stops the server when the test ends and prints its log if the test failed.
func (s *engineServer) cleanup(t testing.TB, kind string) {
	t.Cleanup(func() {
		if s.proc == nil {
			return
		}
		s.proc.stop()
		if t.Failed() {
			t.Logf("%s %s log (%s):\n%s", kind, s.Name, s.LogPath, s.proc.logTail())
		}
	})
}
