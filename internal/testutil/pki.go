package testutil

import (
	"crypto/tls"
	"os"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil/fixture"
)

// CA is a test certificate authority (fixture.CA), with its certificate written to a test
// temp dir.
type CA struct {
	*fixture.CA
	// File is the CA certificate as PEM in a test temp dir (sslrootcert=, --cacert, tls-ca-cert-file).
	File string
}

// Cert is a leaf certificate the CA issued, with its key (fixture.Cert).
type Cert struct {
	*fixture.Cert
}

// NewCA makes a fresh CA for one test.
func NewCA(t testing.TB) *CA {
	t.Helper()
	fca, err := fixture.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{CA: fca}
	ca.File = ca.WriteFile(t, t.TempDir())
	return ca
}

// WriteFile writes the CA certificate as ca.pem into dir (readable by everyone: servers that
// run as another user read it) and returns its path.
func (ca *CA) WriteFile(t testing.TB, dir string) string {
	t.Helper()
	p, err := ca.CA.WriteFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Issue makes a server-and-client certificate for names: DNS names, or IP literals which go
// into the IP SANs. The first name is also the subject's common name.
// IssueValid is Issue with the validity period given (fixture.CA.IssueValid).
func (ca *CA) IssueValid(t testing.TB, notBefore, notAfter time.Time, names ...string) *Cert {
	t.Helper()
	c, err := ca.CA.IssueValid(notBefore, notAfter, names...)
	if err != nil {
		t.Fatal(err)
	}
	return &Cert{c}
}

func (ca *CA) Issue(t testing.TB, names ...string) *Cert {
	t.Helper()
	c, err := ca.CA.Issue(names...)
	if err != nil {
		t.Fatal(err)
	}
	return &Cert{c}
}

// SelfSigned makes a certificate for names that is its own CA (fixture.SelfSigned), for an
// in-process TLS server: a client trusts it with its Leaf in RootCAs.
func SelfSigned(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	c, err := fixture.SelfSigned(names...)
	if err != nil {
		t.Fatal(err)
	}
	return c.TLS
}

// WriteFiles writes the certificate (server.crt, 0644) and key (server.key, 0600) into dir.
func (c *Cert) WriteFiles(t testing.TB, dir string) (certPath, keyPath string) {
	t.Helper()
	certPath, keyPath, err := c.writeFilesFor(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// writeFilesFor writes the files owned by owner, as a server running as owner needs them
// (PostgreSQL refuses a key file that others can read or that another user owns).
func (c *Cert) writeFilesFor(dir string, owner *runAs) (certPath, keyPath string, err error) {
	certPath, keyPath, err = c.Cert.WriteFiles(dir, "server", 0o600)
	if err != nil || owner == nil {
		return certPath, keyPath, err
	}
	for _, p := range []string{certPath, keyPath} {
		if err := os.Chown(p, int(owner.uid), int(owner.gid)); err != nil {
			return "", "", err
		}
	}
	return certPath, keyPath, nil
}

// ParseCert is fixture.ParseCert for a test: a Cert of a Secret's tls.crt and tls.key.
func ParseCert(t testing.TB, certPEM, keyPEM []byte) *Cert {
	t.Helper()
	c, err := fixture.ParseCert(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &Cert{c}
}
