package testutil

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil/fixture"
)

// fakeTB records what Require does instead of stopping the test.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }
func (f *fakeTB) Skipf(format string, args ...any)  { f.skip = fmt.Sprintf(format, args...) }

func TestRequire(t *testing.T) {
	missing := errors.New("not installed")

	t.Setenv("CI", "true")
	f := &fakeTB{TB: t}
	Require(f, "redis-server", missing)
	if f.skip != "" || !strings.Contains(f.fatal, "MISSING TEST DEPENDENCY redis-server") || !strings.Contains(f.fatal, "not installed") {
		t.Errorf("CI=true: fatal %q skip %q", f.fatal, f.skip)
	}

	t.Setenv("CI", "")
	f = &fakeTB{TB: t}
	Require(f, "redis-server", missing)
	if f.fatal != "" || !strings.Contains(f.skip, "redis-server") {
		t.Errorf("no CI: fatal %q skip %q", f.fatal, f.skip)
	}

	f = &fakeTB{TB: t}
	Require(f, "redis-server", nil)
	if f.fatal != "" || f.skip != "" {
		t.Errorf("nil error: fatal %q skip %q", f.fatal, f.skip)
	}
}

func TestIssue(t *testing.T) {
	ca := NewCA(t)
	c := ca.Issue(t, "alpha.db.test", "127.0.0.2")
	chains, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "alpha.db.test", Roots: ca.Pool()})
	if err != nil || len(chains) != 1 {
		t.Fatalf("verify: %v", err)
	}
	if err := c.Leaf.VerifyHostname("127.0.0.2"); err != nil {
		t.Errorf("IP SAN: %v", err)
	}
	if err := c.Leaf.VerifyHostname("beta.db.test"); err == nil {
		t.Error("certificate valid for a name it was not issued for")
	}
	if c.Serial.Sign() <= 0 || c.Serial.Cmp(c.Leaf.SerialNumber) != 0 {
		t.Errorf("serial %v", c.Serial)
	}
	if other := ca.Issue(t, "alpha.db.test"); other.Serial.Cmp(c.Serial) == 0 {
		t.Error("two certificates with one serial")
	}
	if !bytes.Contains(c.KeyPEM, []byte("BEGIN PRIVATE KEY")) || !bytes.Contains(c.CertPEM, []byte("BEGIN CERTIFICATE")) {
		t.Error("PEM blocks")
	}
	if c.TLS.Leaf != c.Leaf || len(c.TLS.Certificate) != 1 {
		t.Error("tls.Certificate")
	}
	certPath, keyPath := c.WriteFiles(t, t.TempDir())
	out, err := exec.Command("openssl", "x509", "-in", certPath, "-noout", "-serial").CombinedOutput()
	if err == nil && strings.TrimSpace(string(out)) != "serial="+c.SerialHex() {
		t.Errorf("openssl says %q, SerialHex %q", out, c.SerialHex())
	}
	if keyPath == "" {
		t.Error("no key path")
	}
}

func TestSerialHex(t *testing.T) {
	ca := NewCA(t)
	for range 20 {
		c := ca.Issue(t, "x.test")
		h := c.SerialHex()
		if len(h)%2 != 0 || strings.ToUpper(h) != h || strings.TrimLeft(h, "0") != strings.ToUpper(c.Serial.Text(16)) {
			t.Fatalf("SerialHex %q for %s", h, c.Serial.Text(16))
		}
	}
}

// opensslSerial runs `openssl s_client` (with extra args such as -starttls postgres) against
// addr with SNI serverName and returns the serial of the certificate it was served.
func opensslSerial(t *testing.T, addr, serverName string, extra ...string) string {
	t.Helper()
	bin := Binary(t, "openssl")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	args := append([]string{"s_client", "-connect", addr, "-servername", serverName}, extra...)
	sc := exec.CommandContext(ctx, bin, args...)
	sc.Stdin = strings.NewReader("")
	pemOut, err := sc.Output()
	if err != nil {
		t.Fatalf("openssl s_client %v: %v", extra, err)
	}
	x := exec.CommandContext(ctx, bin, "x509", "-noout", "-serial")
	x.Stdin = bytes.NewReader(pemOut)
	out, err := x.CombinedOutput()
	if err != nil {
		t.Fatalf("openssl x509: %v: %s", err, out)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "serial=")
}

// run runs a client command with a bounded time and returns its stdout and stderr.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(CleanEnv(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return strings.TrimSpace(o.String()), strings.TrimSpace(e.String()), err
}

var serialRE = regexp.MustCompile(`^[0-9A-F]+$`)

func checkSerial(t *testing.T, what string, got *x509.Certificate, err error, want *Cert) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got.SerialNumber.Cmp(want.Serial) != 0 {
		t.Fatalf("%s: served serial %s, want %s", what, fixture.SerialHex(got.SerialNumber), want.SerialHex())
	}
}
