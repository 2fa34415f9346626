package trustanchor

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"slices"

	"github.com/snigate/snigate/api/v1alpha1"
)

// Guard decides whether the bytes of a source Secret's key may be published to tenants. It
// returns the certificates in the order they appear and reason "" when the bytes are
// nothing but well-formed PEM CERTIFICATE blocks (and whitespace between them), at least
// one, each a CA (basicConstraints CA:TRUE). Otherwise it returns no certificates, and the
// first failing policy's reason and message:
//
//  1. ReasonContainsPrivateKey: private key material anywhere in the bytes: the text
//     "PRIVATE KEY" in any case (every PEM key type has it: "RSA PRIVATE KEY", "ENCRYPTED
//     PRIVATE KEY", "OPENSSH PRIVATE KEY", even in a malformed block), a PKCS#8, PKCS#1 or
//     SEC 1 DER key inside a PEM block of any type (a CERTIFICATE block included) or in a
//     certificate's extension, and raw DER or base64 keys outside PEM. This runs first, over
//     every byte, so a key is reported as a key whatever else is wrong;
//  2. ReasonNotACertificate: empty, anything but whitespace outside PEM blocks, a block
//     whose "-----BEGIN" does not start a line (indented), a block that is not CERTIFICATE
//     or carries PEM headers, a block that does not parse as one certificate;
//  3. ReasonNotACA: a certificate that is not a CA, named by its subject.
//
// The messages name positions and PEM types, never the bytes themselves. Whatever the
// first policy misses (a key in a format it does not know), the second refuses: only bytes
// that parse as certificates are ever published, and the published bundle is encoded anew
// from them (Bundle), so no byte of the source outside a certificate reaches a tenant.
func Guard(data []byte) (certs []*x509.Certificate, reason, msg string) {
	segs := split(data)
	if msg := privateKey(segs, data, 0); msg != "" {
		return nil, v1alpha1.ReasonContainsPrivateKey, msg
	}
	certs, msg = certificates(segs)
	if msg != "" {
		return nil, v1alpha1.ReasonNotACertificate, msg
	}
	for i, c := range certs {
		if !c.BasicConstraintsValid || !c.IsCA {
			return nil, v1alpha1.ReasonNotACA, fmt.Sprintf("the certificate %q (PEM block %d) is not a CA (no basicConstraints CA:TRUE): publish the CA that issued the server's certificate, not a server's certificate",
				c.Subject.String(), i+1)
		}
	}
	return certs, "", ""
}

// Bundle is the PEM of certs, one CERTIFICATE block each, encoded from their DER: what the
// published Secret's ca.crt holds.
func Bundle(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// segment is a well-formed PEM block of data, or the bytes between blocks (text).
type segment struct {
	offset int
	block  *pem.Block // nil for text
	text   []byte
	// indented: the block's "-----BEGIN " does not start a line. Go's pem.Decode and
	// OpenSSL's PEM reader both skip such a block, so a bundle holding one is not what its
	// owner's tools read; it is refused as a certificate, but still searched for a key.
	indented bool
}

const pemBegin = "-----BEGIN "

// split cuts data into PEM blocks and the text around them. A block pem.Decode cannot read
// is text, up to the next "-----BEGIN ": pem.Decode itself would skip it silently and
// return the next block.
func split(data []byte) []segment {
	var segs []segment
	text := func(from, to int) {
		if to > from {
			segs = append(segs, segment{offset: from, text: data[from:to]})
		}
	}
	pos := 0
	for pos < len(data) {
		i := bytes.Index(data[pos:], []byte(pemBegin))
		if i < 0 {
			break
		}
		start := pos + i
		block, rest := pem.Decode(data[start:])
		consumed := len(data) - start - len(rest)
		next := bytes.Index(data[start+1:], []byte(pemBegin)) // the next BEGIN after this one
		if block == nil || (next >= 0 && start+1+next < start+consumed) {
			// Malformed: text up to the next BEGIN (or the end).
			end := len(data)
			if next >= 0 {
				end = start + 1 + next
			}
			text(pos, end)
			pos = end
			continue
		}
		text(pos, start)
		segs = append(segs, segment{offset: start, block: block, indented: start > 0 && data[start-1] != '\n'})
		pos = start + consumed
	}
	text(pos, len(data))
	return segs
}

var privateKeyText = []byte("PRIVATE KEY")

// privateKey names the first private key material found in segs (of data), or "". depth
// counts the base64 layers decoded so far.
func privateKey(segs []segment, data []byte, depth int) string {
	for n, s := range blocks(segs) {
		b := s.block
		if bytes.Contains(bytes.ToUpper([]byte(b.Type)), privateKeyText) {
			return fmt.Sprintf("PEM block %d (at byte %d) is a %s", n, s.offset, pemType(b.Type))
		}
		for k, v := range b.Headers {
			if bytes.Contains(bytes.ToUpper([]byte(k+v)), privateKeyText) {
				return fmt.Sprintf("PEM block %d (at byte %d) has a header naming a private key", n, s.offset)
			}
		}
		if found, where := derKey(b.Bytes); found {
			return fmt.Sprintf("PEM block %d (at byte %d), a %s, holds a DER private key%s", n, s.offset, pemType(b.Type), where)
		}
	}
	for _, s := range segs {
		if s.block != nil {
			continue
		}
		t := bytes.TrimSpace(s.text)
		if len(t) == 0 {
			continue
		}
		if bytes.Contains(bytes.ToUpper(t), privateKeyText) {
			return fmt.Sprintf("the text \"PRIVATE KEY\" appears outside a well-formed PEM block (at byte %d): a malformed or encrypted PEM key", s.offset)
		}
		if found, where := derKey(t); found {
			return fmt.Sprintf("the bytes at byte %d, outside PEM, are a DER private key%s", s.offset, where)
		}
		if depth == 0 {
			if dec, ok := decodeBase64(t); ok {
				if found, _ := derKey(dec); found || privateKey(split(dec), dec, depth+1) != "" {
					return fmt.Sprintf("the text at byte %d, outside PEM, is base64 of a private key", s.offset)
				}
			}
		}
	}
	// Belt and braces: the text outside blocks and the blocks' types and headers were
	// searched; a block's body is base64, which has no space. Nothing else can hold it.
	if bytes.Contains(bytes.ToUpper(data), privateKeyText) {
		return "the text \"PRIVATE KEY\" appears in the data"
	}
	return ""
}

// blocks yields the PEM blocks of segs numbered from 1.
func blocks(segs []segment) func(yield func(int, segment) bool) {
	return func(yield func(int, segment) bool) {
		n := 0
		for _, s := range segs {
			if s.block == nil {
				continue
			}
			n++
			if !yield(n, s) {
				return
			}
		}
	}
}

// maxDERValues bounds the ASN.1 values derKey walks, so hostile input cannot make it slow.
const maxDERValues = 16

// derKey reports whether der holds a private key, and where, as a phrase for a message
// ("", " (ASN.1 value 2)"). It tries the whole, each of the first top-level ASN.1 values
// of it (a key appended to a certificate), and the extension values of a certificate among
// them.
func derKey(der []byte) (found bool, where string) {
	if isKey(der) {
		return true, ""
	}
	rest := der
	for i := 0; i < maxDERValues && len(rest) > 0; i++ {
		var v asn1.RawValue
		r, err := asn1.Unmarshal(rest, &v)
		if err != nil {
			break
		}
		if i > 0 && isKey(v.FullBytes) {
			return true, fmt.Sprintf(" (ASN.1 value %d)", i+1)
		}
		if c, err := x509.ParseCertificate(v.FullBytes); err == nil {
			for _, e := range c.Extensions {
				if isKey(e.Value) {
					return true, fmt.Sprintf(" in the certificate's extension %s", e.Id)
				}
			}
		}
		rest = r
	}
	return false, ""
}

// isKey reports whether der parses as a PKCS#8, PKCS#1 or SEC 1 (EC) private key.
func isKey(der []byte) bool {
	if len(der) == 0 {
		return false
	}
	if _, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		return true
	}
	if _, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return true
	}
	if _, err := x509.ParseECPrivateKey(der); err == nil {
		return true
	}
	return false
}

// decodeBase64 decodes t as standard or URL base64, ignoring whitespace.
func decodeBase64(t []byte) ([]byte, bool) {
	s := bytes.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
			return -1
		}
		return r
	}, t)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if dec, err := enc.DecodeString(string(s)); err == nil {
			return dec, true
		}
	}
	return nil, false
}

// certificates parses segs, which must be CERTIFICATE blocks and whitespace only.
func certificates(segs []segment) ([]*x509.Certificate, string) {
	for _, s := range segs {
		if s.block == nil && len(bytes.TrimSpace(s.text)) > 0 {
			return nil, fmt.Sprintf("%d bytes at byte %d are not PEM: only PEM CERTIFICATE blocks may be published", len(s.text), s.offset)
		}
	}
	var certs []*x509.Certificate
	for n, s := range blocks(segs) {
		b := s.block
		if s.indented {
			return nil, fmt.Sprintf("PEM block %d (at byte %d) does not begin a line: \"-----BEGIN\" must be the first thing on its line, or PEM readers skip the block", n, s.offset)
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Sprintf("PEM block %d (at byte %d) is a %s, not a CERTIFICATE", n, s.offset, pemType(b.Type))
		}
		if len(b.Headers) > 0 {
			return nil, fmt.Sprintf("PEM block %d (at byte %d) has PEM headers: a CERTIFICATE block has none", n, s.offset)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Sprintf("PEM block %d (at byte %d) is not a certificate: %v", n, s.offset, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, "empty: no PEM CERTIFICATE block to publish"
	}
	return certs, ""
}

// pemType quotes a PEM type for a message: at most 40 bytes of it.
func pemType(t string) string {
	if len(t) > 40 {
		t = t[:40] + "…"
	}
	return fmt.Sprintf("%q block", t)
}

// GuardMemo remembers Guard's verdicts across Render calls, by the bytes they were for. A
// Render parses every TrustAnchor's source and previous bundle; with a thousand of them
// (one per tenant) that was the largest single cost of every change a controller made at
// 1 000 tenants (11 % of its CPU, bench/cpscale), for bundles that had not changed. An
// entry not used by a Render is forgotten by it. Not safe for concurrent Renders.
type GuardMemo struct{ last, next map[string]guarded }

type guarded struct {
	certs       []*x509.Certificate
	reason, msg string
}

// guard is Guard through the memo (m may be nil).
func (m *GuardMemo) guard(data []byte) ([]*x509.Certificate, string, string) {
	if m == nil {
		return Guard(data)
	}
	if m.next == nil {
		m.next = map[string]guarded{}
	}
	g, ok := m.next[string(data)]
	if !ok {
		if g, ok = m.last[string(data)]; !ok {
			g.certs, g.reason, g.msg = Guard(data)
			g.certs = slices.Clip(g.certs) // shared: an append must copy
		}
		m.next[string(data)] = g
	}
	return g.certs, g.reason, g.msg
}

// rotate forgets what the last Render did not use.
func (m *GuardMemo) rotate() {
	if m != nil {
		m.last, m.next = m.next, nil
	}
}
