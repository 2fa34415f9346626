// Package pki makes the benchmark's throwaway certificates: one ECDSA P-256 CA and leaf
// certificates it issues, written as PEM files every server can read.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that lives for one benchmark run.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate as PEM.
	File string
	PEM  []byte
}

// Leaf is an issued certificate and its key as PEM, and the files they were written to.
type Leaf struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
	BundleFile        string // certificate then key, the form HAProxy's crt takes
}

// NewCA makes a CA and writes it to dir/ca.pem.
func NewCA(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "snigate bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{cert: cert, key: key, File: filepath.Join(dir, "ca.pem"),
		PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	return ca, os.WriteFile(ca.File, ca.PEM, 0o644)
}

// Issue makes an ECDSA P-256 server certificate for names and writes dir/NAME.pem,
// dir/NAME-key.pem and dir/NAME-bundle.pem (readable by everyone: peers drop privileges).
func (ca *CA) Issue(dir, name string, names ...string) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	l := &Leaf{
		CertPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		CertFile:   filepath.Join(dir, name+".pem"),
		KeyFile:    filepath.Join(dir, name+"-key.pem"),
		BundleFile: filepath.Join(dir, name+"-bundle.pem"),
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{l.CertFile, l.CertPEM}, {l.KeyFile, l.KeyPEM}, {l.BundleFile, append(append([]byte{}, l.CertPEM...), l.KeyPEM...)}} {
		if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
			return nil, err
		}
	}
	return l, nil
}
