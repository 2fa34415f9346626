package probe

// The probe against real database servers (Debian's packages, started by testutil): what
// their TLS start really looks like on the wire, not what a fake assumes. A missing server
// skips these tests locally and fails them under CI=true (testutil.Require).

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
	"github.com/snigate/snigate/internal/testutil"
)

func TestRealPostgres(t *testing.T) {
	testutil.SkipShort(t, "a real PostgreSQL")
	t.Parallel()
	ca := testutil.NewCA(t)
	pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: perEngine}) // a certificate for perEngine only
	target := Target{Address: pg.Addr, Start: engine.PostgresSSLRequest, SNI: perEngine, Roots: ca.Pool()}

	t.Run("verified", func(t *testing.T) {
		tg := target
		tg.Hostnames = []string{perEngine}
		r := probe(t, tg)
		wantReason(t, r, v1alpha1.ReasonVerified)
		if r.Certificate == nil || r.Certificate.Serial != pg.Cert.SerialHex() {
			t.Fatalf("certificate %+v, want serial %s (the server's)", r.Certificate, pg.Cert.SerialHex())
		}
	})
	t.Run("missing the flat name", func(t *testing.T) {
		tg := target
		tg.Hostnames = []string{perEngine, flat}
		r := probe(t, tg)
		wantReason(t, r, v1alpha1.ReasonMissingDNSNames)
		if want := "the certificate names [" + perEngine + "]; add " + flat; r.Message != want {
			t.Fatalf("message %q, want %q", r.Message, want)
		}
		if r.Certificate == nil || r.Certificate.Serial != pg.Cert.SerialHex() || r.Certificate.CoversHostnames {
			t.Fatalf("certificate %+v", r.Certificate)
		}
	})
	t.Run("another trust anchor", func(t *testing.T) {
		tg := target
		tg.Roots = testutil.NewCA(t).Pool()
		r := probe(t, tg)
		wantReason(t, r, v1alpha1.ReasonUnknownAuthority, `issued by "CN=snigate test CA,O=snigate tests"`)
		if c := r.Certificate; c == nil || c.ChainsToTrustAnchor == nil || *c.ChainsToTrustAnchor {
			t.Fatalf("certificate %+v", c)
		}
	})
	t.Run("probed as direct TLS", func(t *testing.T) {
		// PostgreSQL 15 reads a ClientHello as a startup packet of absurd length and closes
		// without a word; PostgreSQL ≥ 17 answers direct TLS but refuses it without ALPN
		// "postgresql". Either way the probe reads no certificate: the engine is wrong.
		tg := target
		tg.Start = engine.DirectTLS
		r := probe(t, tg)
		if pg.Version < 17 {
			wantReason(t, r, v1alpha1.ReasonNotTLS, "closed the connection without answering the TLS ClientHello")
		} else if r.Certificate != nil || (r.Reason != v1alpha1.ReasonUnreachable && r.Reason != v1alpha1.ReasonNotTLS) {
			t.Fatalf("PostgreSQL %d probed as direct TLS: %s %s", pg.Version, r.Reason, r.Message)
		}
	})
}

func TestRealPostgresWithoutTLS(t *testing.T) {
	testutil.SkipShort(t, "a real PostgreSQL")
	t.Parallel()
	pg := testutil.StartPostgres(t, testutil.PGOptions{Name: perEngine, Settings: []string{"ssl = off"}})
	r := probe(t, Target{Address: pg.Addr, Start: engine.PostgresSSLRequest, SNI: perEngine})
	wantReason(t, r, v1alpha1.ReasonNotTLS, "answered 'N' to PostgreSQL's SSLRequest", "ssl = on")
}

func TestRealRedis(t *testing.T) {
	testutil.SkipShort(t, "a real Redis")
	t.Parallel()
	const name = "orders.redis.acme.example.com"
	ca := testutil.NewCA(t)
	rd := testutil.StartRedis(t, testutil.RedisOptions{CA: ca, Name: name})
	target := Target{Address: rd.Addr, Start: engine.DirectTLS, SNI: name, Hostnames: []string{name}, Roots: ca.Pool()}

	t.Run("verified", func(t *testing.T) {
		r := probe(t, target)
		wantReason(t, r, v1alpha1.ReasonVerified)
		if r.Certificate == nil || r.Certificate.Serial != rd.Cert.SerialHex() {
			t.Fatalf("certificate %+v, want serial %s (the server's)", r.Certificate, rd.Cert.SerialHex())
		}
	})
	t.Run("probed as postgres", func(t *testing.T) {
		// OpenSSL reads the SSLRequest as a broken record; what it answers is the test.
		tg := target
		tg.Start = engine.PostgresSSLRequest
		r := probe(t, tg)
		wantReason(t, r, v1alpha1.ReasonNotTLS, "check the exposure's engine")
	})
}

// A Redis without TLS does not answer a ClientHello at all: it parses it as an inline command
// up to a newline that its NUL bytes hide, and waits for more. The probe then ends at its
// deadline, with a message that names this case.
func TestRealRedisPlaintext(t *testing.T) {
	testutil.SkipShort(t, "a real Redis")
	t.Parallel()
	addr := startPlainRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	r := Probe(ctx, Target{Address: addr, Start: engine.DirectTLS, SNI: "cache.acme.example.com"}, time.Now())
	t.Logf("%s: %s", r.Reason, r.Message)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %v with a 1s deadline", took)
	}
	wantReason(t, r, v1alpha1.ReasonUnreachable, "did not answer the TLS ClientHello within", "a Redis without TLS waits like this")
	// The server is still fine, and saw nothing it took for a command.
	if got := redisPing(addr); got != "+PONG" {
		t.Fatalf("PING after the probe: %q", got)
	}
}

func TestRealMariaDB(t *testing.T) {
	testutil.SkipShort(t, "a real MariaDB")
	t.Parallel()
	const name = "orders.mariadb.acme.example.com"
	ca := testutil.NewCA(t)
	m := testutil.StartMariaDB(t, testutil.MariaDBOptions{CA: ca, Name: name})
	r := probe(t, Target{Address: m.Addr, Start: engine.ServerFirst, SNI: name, Hostnames: []string{name, "orders.acme.example.com"}, Roots: ca.Pool()})
	wantReason(t, r, v1alpha1.ReasonMissingDNSNames, "the certificate names ["+name+"]; add orders.acme.example.com")
	if r.Certificate == nil || r.Certificate.Serial != m.Cert.SerialHex() {
		t.Fatalf("certificate %+v, want serial %s (the server's)", r.Certificate, m.Cert.SerialHex())
	}
	r = probe(t, Target{Address: m.Addr, Start: engine.ServerFirst, SNI: name, Roots: ca.Pool()})
	wantReason(t, r, v1alpha1.ReasonVerified)
}

// startPlainRedis starts a redis-server without TLS on a free loopback port, stopped in
// t.Cleanup, and returns its address once it answers PING. testutil.StartRedis only starts
// TLS servers.
func startPlainRedis(t *testing.T) string {
	t.Helper()
	bin := testutil.Binary(t, "redis-server", "/usr/bin")
	dir := t.TempDir()
	for range 3 {
		port := testutil.FreePort(t)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--protected-mode", "no", "--dir", dir, "--logfile", "")
		cmd.Env = testutil.CleanEnv()
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		testutil.DieWithParent(cmd.SysProcAttr)
		var out testutil.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-done
		}
		exited := func() bool {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		for deadline := time.Now().Add(testutil.StartTimeout); !exited(); time.Sleep(50 * time.Millisecond) {
			if redisPing(addr) == "+PONG" {
				t.Cleanup(stop)
				return addr
			}
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("redis-server not ready after %v:\n%s", testutil.StartTimeout, out.String())
			}
		}
		if !strings.Contains(out.String(), "Address already in use") {
			t.Fatalf("redis-server exited:\n%s", out.String())
		}
	}
	t.Fatal("redis-server: no free port in 3 tries")
	return ""
}

// redisPing sends PING in plaintext and returns the answer's first line.
func redisPing(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprint(c, "PING\r\n"); err != nil {
		return err.Error()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(line)
}
