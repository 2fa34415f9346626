package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority: ECDSA P-256, valid for a day, trusted by nobody but the
// test that made it.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	// File is the CA certificate as PEM in a test temp dir (sslrootcert=, --cacert, tls-ca-cert-file).
	File string
	pool *x509.CertPool
}

// Cert is a leaf certificate the CA issued, with its key.
type Cert struct {
	CertPEM []byte
	KeyPEM  []byte // PKCS#8
	Serial  *big.Int
	Leaf    *x509.Certificate
	TLS     tls.Certificate
}

// NewCA makes a fresh CA for one test.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(t),
		Subject:               pkix.Name{CommonName: "snigate test CA", Organization: []string{"snigate tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	ca.File = ca.WriteFile(t, t.TempDir())
	return ca
}

// Pool returns a pool that holds only this CA.
func (ca *CA) Pool() *x509.CertPool { return ca.pool }

// WriteFile writes the CA certificate as ca.pem into dir (readable by everyone: servers that
// run as another user read it) and returns its path.
func (ca *CA) WriteFile(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// ClientConfig returns a client TLS config that trusts only this CA and verifies serverName
// (which is also the SNI it sends).
func (ca *CA) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{RootCAs: ca.pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
}

// Issue makes a server-and-client certificate for names: DNS names, or IP literals which go
// into the IP SANs. The first name is also the subject's common name.
func (ca *CA) Issue(t testing.TB, names ...string) *Cert {
	t.Helper()
	if len(names) == 0 {
		t.Fatal("Issue: no names")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(t),
		Subject:      pkix.Name{CommonName: names[0], Organization: []string{"snigate tests"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Serial:  leaf.SerialNumber,
		Leaf:    leaf,
	}
	c.TLS = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return c
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
	certPath, keyPath = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := writeFile(certPath, c.CertPEM, 0o644, owner); err != nil {
		return "", "", err
	}
	if err := writeFile(keyPath, c.KeyPEM, 0o600, owner); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// SerialHex is the serial as openssl prints it (upper-case hex, even length).
func (c *Cert) SerialHex() string { return serialHex(c.Serial) }

func serialHex(s *big.Int) string {
	h := []byte(s.Text(16))
	if len(h)%2 == 1 {
		h = append([]byte{'0'}, h...)
	}
	for i, b := range h {
		if b >= 'a' && b <= 'f' {
			h[i] = b - 'a' + 'A'
		}
	}
	return string(h)
}

func randomSerial(t testing.TB) *big.Int {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return s.Add(s, big.NewInt(1)) // never zero
}
