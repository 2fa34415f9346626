package probe

// TLS record content types a server may open with.
const (
	recordAlert     = 0x15
	recordHandshake = 0x16
)

// maxCiphertext is the largest record length crypto/tls accepts before it knows the
// version: 2^14 plus 2048 bytes of expansion (RFC 5246, 6.2.3).
const maxCiphertext = 16384 + 2048

// looksLikeTLS reports whether b, the first bytes a server sent in answer to a ClientHello,
// can begin a TLS record. It applies crypto/tls's own test of a first record (an alert or a
// handshake, a version byte below 0x10, a length it accepts) to as many of the five header
// bytes as b holds, so that a short answer from a plaintext server ("-E" then a close) is
// recognised too: false for b means false for every longer b, and for five bytes or more it
// agrees with crypto/tls's RecordHeaderError (FuzzLooksLikeTLS checks both).
func looksLikeTLS(b []byte) bool {
	if len(b) == 0 {
		return true // nothing seen, nothing refuted
	}
	if b[0] != recordAlert && b[0] != recordHandshake {
		return false
	}
	if len(b) >= 2 && b[1] >= 0x10 {
		return false
	}
	switch {
	case len(b) >= 5:
		return int(b[3])<<8|int(b[4]) <= maxCiphertext
	case len(b) == 4:
		return int(b[3])<<8 <= maxCiphertext
	}
	return true
}
