package trustanchor

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/api/v1alpha1"
)

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// keyDER is leaf-2025's private key, PKCS#8 DER.
func keyDER(t testing.TB) []byte {
	t.Helper()
	b, _ := pem.Decode(readPKI(t, "leaf-2025.key"))
	return b.Bytes
}

func certDER(t testing.TB, name string) []byte {
	t.Helper()
	b, _ := pem.Decode(readPKI(t, name))
	return b.Bytes
}

// caWithExtension is a self-signed CA carrying value in a private extension.
func caWithExtension(t *testing.T, value []byte) []byte {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "odd CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign,
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}, Value: value}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestGuard(t *testing.T) {
	ca25, ca26, inter := readPKI(t, "ca-2025.crt"), readPKI(t, "ca-2026.crt"), readPKI(t, "ca-intermediate.crt")
	leaf, key := readPKI(t, "leaf-2026.crt"), readPKI(t, "leaf-2025.key")
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaDER := x509.MarshalPKCS1PrivateKey(rsaKey)
	crlf := bytes.ReplaceAll(ca25, []byte("\n"), []byte("\r\n"))

	const (
		ok   = ""
		key_ = v1alpha1.ReasonContainsPrivateKey
		notC = v1alpha1.ReasonNotACertificate
		notA = v1alpha1.ReasonNotACA
	)
	for _, c := range []struct {
		name   string
		data   []byte
		reason string
		msg    string // a part of the message
		certs  int
	}{
		{"one CA", ca25, ok, "", 1},
		{"a root and its intermediate, in order", concat(ca26, inter), ok, "", 2},
		{"whitespace and CRLF around and between", concat([]byte("\n\n  \n"), crlf, []byte("\t\n"), inter, []byte("\n\n")), ok, "", 2},
		{"an indented block (pem.Decode and OpenSSL skip it)", concat([]byte("\n  "), ca25), notC, "PEM block 1 (at byte 3) does not begin a line", 0},
		{"a second block indented by a tab", concat(ca25, []byte("\t"), inter), notC, "PEM block 2 (at byte 523) does not begin a line", 0},
		{"a key in an indented CERTIFICATE block", concat([]byte(" "), pemOf("CERTIFICATE", keyDER(t))), key_, "holds a DER private key", 0},

		{"empty", nil, notC, "empty: no PEM", 0},
		{"only whitespace", []byte(" \n\t\r\n"), notC, "empty: no PEM", 0},
		{"garbage", []byte("this is not a certificate\n"), notC, "at byte 0 are not PEM", 0},
		{"text before the block (openssl's Bag Attributes)", concat([]byte("subject=/CN=acme\n"), ca25), notC, "at byte 0 are not PEM", 0},
		{"text after the block", concat(ca25, []byte("trailing\n")), notC, "not PEM", 0},
		{"DER without PEM", certDER(t, "ca-2025.crt"), notC, "not PEM", 0},
		{"a malformed block before a good one (pem.Decode would skip it)",
			concat([]byte("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"), ca25), notC, "at byte 0 are not PEM", 0},
		{"an unterminated block", []byte("-----BEGIN CERTIFICATE-----\nMIIB\n"), notC, "not PEM", 0},
		{"a PUBLIC KEY block", concat(ca25, pemOf("PUBLIC KEY", []byte{0x30, 0})), notC, `PEM block 2 (at byte 522) is a "PUBLIC KEY" block`, 0},
		{"a TRUSTED CERTIFICATE block", pemOf("TRUSTED CERTIFICATE", certDER(t, "ca-2025.crt")), notC, `"TRUSTED CERTIFICATE" block, not a CERTIFICATE`, 0},
		{"PEM headers", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"Comment": "x"}, Bytes: certDER(t, "ca-2025.crt")}), notC, "PEM headers", 0},
		{"a CERTIFICATE block that is not one", pemOf("CERTIFICATE", []byte("nope")), notC, "PEM block 1 (at byte 0) is not a certificate", 0},
		{"a certificate with trailing DER", pemOf("CERTIFICATE", concat(certDER(t, "ca-2025.crt"), []byte{0x05, 0x00})), notC, "is not a certificate", 0},

		{"a leaf", leaf, notA, `"CN=orders.postgres.acme.example.com,O=acme" (PEM block 1) is not a CA`, 0},
		{"a CA and a leaf", concat(ca26, leaf), notA, "(PEM block 2) is not a CA", 0},

		{"a certificate and its key", concat(ca25, key), key_, `PEM block 2 (at byte 522) is a "PRIVATE KEY" block`, 0},
		{"the key first", concat(key, ca25), key_, `PEM block 1 (at byte 0) is a "PRIVATE KEY" block`, 0},
		{"a key and a leaf: the key is said first", concat(leaf, key), key_, "PRIVATE KEY", 0},
		{"garbage and a key: the key is said first", concat([]byte("junk"), key), key_, "PRIVATE KEY", 0},
		{"an EC PRIVATE KEY block", concat(ca25, pemOf("EC PRIVATE KEY", ecDER)), key_, `"EC PRIVATE KEY" block`, 0},
		{"an RSA PRIVATE KEY block", concat(ca25, pemOf("RSA PRIVATE KEY", rsaDER)), key_, `"RSA PRIVATE KEY" block`, 0},
		{"an ENCRYPTED PRIVATE KEY block", pemOf("ENCRYPTED PRIVATE KEY", []byte{0x30, 0x03, 0x02, 0x01, 0x00}), key_, "ENCRYPTED PRIVATE KEY", 0},
		{"an OpenSSH key", []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"), key_, "OPENSSH PRIVATE KEY", 0},
		{"a malformed key block", concat(ca25, []byte("-----BEGIN RSA PRIVATE KEY-----\n%%%%\n-----END RSA PRIVATE KEY-----\n")), key_, "outside a well-formed PEM block", 0},
		{"a key header in lower case", []byte("-----begin private key-----\n"), key_, "PRIVATE KEY", 0},
		{"a PKCS#8 key in a CERTIFICATE block", concat(ca25, pemOf("CERTIFICATE", keyDER(t))), key_, `PEM block 2 (at byte 522), a "CERTIFICATE" block, holds a DER private key`, 0},
		{"an EC key in a CERTIFICATE block", pemOf("CERTIFICATE", ecDER), key_, "holds a DER private key", 0},
		{"a PKCS#1 key in a CERTIFICATE block", pemOf("CERTIFICATE", rsaDER), key_, "holds a DER private key", 0},
		{"a key appended to a certificate's DER", pemOf("CERTIFICATE", concat(certDER(t, "ca-2025.crt"), keyDER(t))), key_, "(ASN.1 value 2)", 0},
		{"a key in a certificate's extension", pemOf("CERTIFICATE", caWithExtension(t, keyDER(t))), key_, "extension 1.3.6.1.4.1.99999.1", 0},
		{"a key header in a block", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"Note": "private key below"}, Bytes: []byte{1}}), key_, "header", 0},
		{"a DER key, no PEM", keyDER(t), key_, "outside PEM, are a DER private key", 0},
		{"base64 of a DER key", []byte(base64.StdEncoding.EncodeToString(keyDER(t))), key_, "base64 of a private key", 0},
		{"base64 of a PEM key (a Secret's data pasted into stringData)", []byte(base64.StdEncoding.EncodeToString(key)), key_, "base64 of a private key", 0},
		{"base64 of a PEM key with a disguised type", []byte(base64.StdEncoding.EncodeToString(pemOf("CERTIFICATE", keyDER(t)))), key_, "base64 of a private key", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			certs, reason, msg := Guard(c.data)
			if reason != c.reason || !strings.Contains(msg, c.msg) || len(certs) != c.certs {
				t.Errorf("Guard = %d certificates, %q, %q; want %d, %q, containing %q", len(certs), reason, msg, c.certs, c.reason, c.msg)
			}
			if reason == "" && msg != "" {
				t.Errorf("a message without a reason: %q", msg)
			}
			// The message never carries the key itself.
			for _, secret := range [][]byte{keyDER(t), ecDER, rsaDER} {
				if b64 := base64.StdEncoding.EncodeToString(secret); strings.Contains(msg, b64[10:30]) {
					t.Errorf("the message holds key material: %q", msg)
				}
			}
		})
	}
}

// TestBundle: the published bytes are the certificates encoded anew: none of the source's
// whitespace, CRLFs or line lengths, and Guard accepts them again.
func TestBundle(t *testing.T) {
	src := concat([]byte("\n"), bytes.ReplaceAll(readPKI(t, "ca-2026.crt"), []byte("\n"), []byte("\r\n")), []byte("\n\n"), readPKI(t, "ca-intermediate.crt"))
	certs, reason, _ := Guard(src)
	if reason != "" {
		t.Fatal(reason)
	}
	got := Bundle(certs)
	if want := concat(readPKI(t, "ca-2026.crt"), readPKI(t, "ca-intermediate.crt")); !bytes.Equal(got, want) {
		t.Errorf("Bundle:\n%s\nwant\n%s", got, want)
	}
	if again, reason, _ := Guard(got); reason != "" || len(again) != 2 {
		t.Errorf("Guard(Bundle) = %d, %q", len(again), reason)
	}
}

// FuzzGuard: Guard reads bytes a tenant's Secret holds. It never panics, and whatever it
// accepts holds no private key: no "PRIVATE KEY" text, no PEM block of a key type, no block
// whose bytes parse as a key, only CA certificates, one per PEM block; the bundle published
// from them is accepted again and is the same certificates.
func FuzzGuard(f *testing.F) {
	ca25, ca26, inter := readPKI(f, "ca-2025.crt"), readPKI(f, "ca-2026.crt"), readPKI(f, "ca-intermediate.crt")
	leaf, key := readPKI(f, "leaf-2026.crt"), readPKI(f, "leaf-2025.key")
	for _, seed := range [][]byte{
		nil, []byte("\n"), ca25, concat(ca26, inter), concat(ca25, key), leaf, concat(ca25, leaf),
		pemOf("CERTIFICATE", keyDER(f)), keyDER(f), []byte(base64.StdEncoding.EncodeToString(key)),
		concat([]byte("-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n"), ca25),
		[]byte("-----BEGIN PRIVATE KEY-----\n"), certDER(f, "ca-2025.crt"),
		concat([]byte(" "), ca25), // pem.Decode skips an indented block (CI, 2026-12-07)
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, reason, msg := Guard(data)
		if reason != "" {
			switch reason {
			case v1alpha1.ReasonContainsPrivateKey, v1alpha1.ReasonNotACertificate, v1alpha1.ReasonNotACA:
			default:
				t.Fatalf("reason %q", reason)
			}
			if certs != nil || msg == "" {
				t.Fatalf("refused with %d certificates and message %q", len(certs), msg)
			}
			return
		}
		if len(certs) == 0 || msg != "" {
			t.Fatalf("accepted %d certificates, message %q", len(certs), msg)
		}
		if bytes.Contains(bytes.ToUpper(data), []byte("PRIVATE KEY")) {
			t.Fatal("accepted data with PRIVATE KEY in it")
		}
		var blocks int
		for rest := data; ; {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			blocks++
			if strings.Contains(strings.ToUpper(b.Type), "PRIVATE KEY") {
				t.Fatalf("accepted a %q block", b.Type)
			}
			if _, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
				t.Fatal("accepted a PKCS#8 key")
			}
			if _, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
				t.Fatal("accepted a PKCS#1 key")
			}
			if _, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
				t.Fatal("accepted an EC key")
			}
		}
		if blocks != len(certs) {
			t.Fatalf("%d PEM blocks, %d certificates", blocks, len(certs))
		}
		for _, c := range certs {
			if !c.BasicConstraintsValid || !c.IsCA {
				t.Fatalf("accepted a certificate that is not a CA: %s", c.Subject)
			}
		}
		out := Bundle(certs)
		again, reason, _ := Guard(out)
		if reason != "" || len(again) != len(certs) {
			t.Fatalf("the published bundle is refused: %q, %d of %d", reason, len(again), len(certs))
		}
		for i := range again {
			if !again[i].Equal(certs[i]) {
				t.Fatalf("certificate %d changed in the bundle", i+1)
			}
		}
	})
}

// GuardMemo answers as Guard does, shares nothing an append could change, and forgets what a
// Render did not use.
func TestGuardMemo(t *testing.T) {
	ca25, key := readPKI(t, "ca-2025.crt"), readPKI(t, "leaf-2025.key")
	m := &GuardMemo{}
	for range 2 {
		for _, data := range [][]byte{ca25, key} {
			wantCerts, wantReason, wantMsg := Guard(data)
			certs, reason, msg := m.guard(data)
			if len(certs) != len(wantCerts) || reason != wantReason || msg != wantMsg {
				t.Fatalf("memo: %d certs %q %q; Guard: %d certs %q %q", len(certs), reason, msg, len(wantCerts), wantReason, wantMsg)
			}
		}
	}
	certs, _, _ := m.guard(ca25)
	_ = append(certs, nil)
	if again, _, _ := m.guard(ca25); len(again) != len(certs) || cap(again) != len(again) {
		t.Errorf("an append reached the memo: %d certs, capacity %d", len(again), cap(again))
	}
	m.rotate()
	m.guard(ca25) // used by the next Render: kept
	m.rotate()
	if _, ok := m.last[string(key)]; ok {
		t.Error("an entry no Render used is kept")
	}
	if _, ok := m.last[string(ca25)]; !ok {
		t.Error("an entry the last Render used is forgotten")
	}
}
