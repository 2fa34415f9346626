package trustanchor

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The certificates of testdata/pki, which the goldens' inputs hold verbatim. Ed25519 keys
// come from a seed (sha256 of the name) and Ed25519 signatures are deterministic, so the
// same code always writes the same bytes: TestPKI checks the committed files against it and
// -update rewrites them. They are valid from 2025 for a hundred years, so the goldens do not
// age.
type pkiCert struct {
	name    string
	subject string
	ca      bool
	issuer  string   // name of the issuing pkiCert; "" for self-signed
	dns     []string // leaf names
}

var pki = []pkiCert{
	{name: "ca-2025", subject: "acme databases CA 2025", ca: true},
	{name: "ca-2026", subject: "acme databases CA 2026", ca: true},
	{name: "ca-intermediate", subject: "acme databases intermediate CA", ca: true, issuer: "ca-2026"},
	{name: "leaf-2025", subject: "orders.postgres.acme.example.com", issuer: "ca-2025", dns: []string{"orders.postgres.acme.example.com", "orders.acme.example.com"}},
	{name: "leaf-2026", subject: "orders.postgres.acme.example.com", issuer: "ca-2026", dns: []string{"orders.postgres.acme.example.com", "orders.acme.example.com"}},
}

func pkiKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("snigate trustanchor testdata " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// generatePKI returns each certificate's PEM, and the PEM of leaf-2025's private key.
func generatePKI(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	certs := map[string]*x509.Certificate{}
	for i, c := range pki {
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(int64(1000 + i)),
			Subject:               pkix.Name{CommonName: c.subject, Organization: []string{"acme"}},
			NotBefore:             time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC),
			NotAfter:              time.Date(2125, time.January, 1, 0, 0, 0, 0, time.UTC),
			BasicConstraintsValid: true,
			IsCA:                  c.ca,
			DNSNames:              c.dns,
		}
		if c.ca {
			tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
		} else {
			tmpl.KeyUsage = x509.KeyUsageDigitalSignature
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		key := pkiKey(c.name)
		parent, signer := tmpl, key
		if c.issuer != "" {
			parent, signer = certs[c.issuer], pkiKey(c.issuer)
		}
		der, err := x509.CreateCertificate(nil, tmpl, parent, key.Public(), signer)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		certs[c.name] = cert
		out[c.name+".crt"] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	k, err := x509.MarshalPKCS8PrivateKey(pkiKey("leaf-2025"))
	if err != nil {
		t.Fatal(err)
	}
	out["leaf-2025.key"] = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k})
	return out
}

// TestPKI: testdata/pki holds what generatePKI writes; go test -run TestPKI -update
// rewrites it (the same bytes, unless pki changed: then update the goldens' inputs too).
func TestPKI(t *testing.T) {
	for name, want := range generatePKI(t) {
		path := filepath.Join("testdata", "pki", name)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/trustanchor -run TestPKI -update)", err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is not what generatePKI writes", path)
		}
	}
}

// readPKI returns testdata/pki/<name>.
func readPKI(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "pki", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
