// Package clienthello parses a TLS ClientHello from the first bytes of a connection, without
// consuming them and without allocating, so that the proxy can route on the SNI and then hand
// the untouched bytes to the backend.
//
// The proxy reads into a buffer, calls Parse, and reads more while Parse answers ErrIncomplete,
// under a size cap and a deadline (a ClientHello can span TCP segments and TLS records):
//
//	var p clienthello.Parser // zero value is ready; reuse it for the next connection
//	var h clienthello.Hello
//	buf := make([]byte, 0, 2048)
//	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
//	for {
//		if len(buf) == cap(buf) {
//			if len(buf) >= 64<<10 {
//				return errTooLarge
//			}
//			buf = slices.Grow(buf, len(buf))
//		}
//		n, rerr := conn.Read(buf[len(buf):cap(buf)])
//		buf = buf[:len(buf)+n]
//		err := p.Parse(buf, &h)
//		if err == nil {
//			break
//		}
//		if err != clienthello.ErrIncomplete {
//			return err // ErrNotTLS, ErrNotClientHello, ErrMalformed, ErrTooLarge
//		}
//		if rerr != nil {
//			return rerr
//		}
//	}
//	conn.SetReadDeadline(time.Time{})
//	route := routes[string(h.SNI)] // the compiler does not allocate for this lookup
//	backend.Write(buf)             // every byte read, including any past h.Len
//
// The parser does not use crypto/tls. It validates framing strictly: every record carrying the
// message is a handshake record (0x16) of at most 2^14+2048 bytes, the message is a
// client_hello, every length field is consistent, no extension appears twice, and nothing
// follows the ClientHello inside its last record. It does not check what a TLS server checks
// beyond that (cipher suites, key shares, binders): the backend does.
//
// In the common case the whole message sits in one record and Parse reads it in place, with no
// copy. Only when a message is split over several records does Parse reassemble the fragments
// into the Parser's scratch buffer, which grows once and is then reused.
package clienthello

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
)

const (
	// MaxRecordLen is the largest record body accepted: 2^14+2048, the TLSCiphertext limit of
	// RFC 5246 section 6.2.3 (crypto/tls uses the same bound when reading records).
	MaxRecordLen = 1<<14 + 2048

	// DefaultMaxLen is the largest handshake message (4-byte header included) that a Parser
	// with a zero MaxLen accepts.
	DefaultMaxLen = 64 << 10

	recordHeaderLen    = 5
	handshakeHeaderLen = 4

	recordTypeHandshake      = 0x16
	handshakeTypeClientHello = 1

	// minBodyLen is the smallest possible ClientHello body: version (2), random (32),
	// session id length (1), one cipher suite with its length (4), one compression method with
	// its length (2).
	minBodyLen = 2 + 32 + 1 + 4 + 2

	extServerName        = 0
	extALPN              = 16
	extEarlyData         = 42
	extSupportedVersions = 43
	extECH               = 0xfe0d

	versionTLS13 = 0x0304
)

// Sentinel errors. Parse returns them, or an error wrapping one of them with detail; compare
// with errors.Is. Returning any of them does not allocate.
var (
	// ErrIncomplete: the buffer is a valid prefix of a ClientHello; read more and call again.
	// Parse returns this sentinel itself, never wrapped, so == works too.
	ErrIncomplete = errors.New("clienthello: incomplete")
	// ErrNotTLS: the first bytes are not a TLS handshake record (type 0x16, version 3.x).
	ErrNotTLS = errors.New("clienthello: not a tls handshake record")
	// ErrNotClientHello: a TLS handshake record whose message is not a client_hello.
	ErrNotClientHello = errors.New("clienthello: handshake message is not a client hello")
	// ErrMalformed: bad framing or inconsistent lengths.
	ErrMalformed = errors.New("clienthello: malformed")
	// ErrTooLarge: the message announces more than the Parser's MaxLen bytes.
	ErrTooLarge = errors.New("clienthello: too large")
)

// parseError adds detail to a sentinel. Every value is a package-level variable, so returning
// one costs nothing; formatting the message happens only when somebody calls Error.
type parseError struct {
	kind   error
	detail string
}

func (e *parseError) Error() string { return e.kind.Error() + ": " + e.detail }
func (e *parseError) Unwrap() error { return e.kind }

func malformed(detail string) error { return &parseError{ErrMalformed, detail} }

var (
	errNotHandshake  = &parseError{ErrNotTLS, "first record is not a handshake record"}
	errNotVersion3   = &parseError{ErrNotTLS, "record version major is not 3"}
	errHandshakeType = &parseError{ErrNotClientHello, "handshake type is not client_hello (1)"}
	errMessageLen    = &parseError{ErrTooLarge, "handshake message longer than the parser's MaxLen"}

	errInterleaved    = malformed("non-handshake record inside the client hello")
	errRecordVersion  = malformed("record version major is not 3")
	errEmptyRecord    = malformed("zero-length handshake record")
	errRecordLen      = malformed("record longer than 2^14+2048 bytes")
	errTrailing       = malformed("data after the client hello in its last record")
	errShort          = malformed("client hello shorter than its fixed fields")
	errVersion        = malformed("client hello version major is not 3")
	errSessionID      = malformed("session id longer than 32 bytes")
	errCipherSuites   = malformed("bad cipher suites length")
	errCompression    = malformed("bad compression methods length")
	errExtensions     = malformed("extensions length does not match the message")
	errExtension      = malformed("extension longer than the extension block")
	errDuplicateExt   = malformed("duplicate extension")
	errServerName     = malformed("bad server_name extension")
	errDuplicateHost  = malformed("more than one host_name in server_name")
	errALPN           = malformed("bad application_layer_protocol_negotiation extension")
	errVersions       = malformed("bad supported_versions extension")
	errEarlyDataBytes = malformed("early_data extension is not empty")
)

// Hello is what Parse found. Its slices alias the buffer passed to Parse or the Parser's
// scratch: they are valid until the next Parse with the same Parser and must not be modified.
type Hello struct {
	// SNI is the first host_name of the server_name extension, as sent (not lowercased,
	// not checked for a trailing dot or invalid characters); nil if there is none.
	SNI []byte
	// ALPN is the raw protocol_name_list of the ALPN extension, without its 2-byte length:
	// one length byte then the name, repeated. nil if absent. See HasALPN.
	ALPN []byte
	// SupportedVersions is the raw list of the supported_versions extension, without its
	// 1-byte length: 2 bytes per version. nil if absent (a client older than TLS 1.3).
	SupportedVersions []byte
	// Len is the number of bytes of the buffer taken by the records carrying the ClientHello.
	Len int
	// Records is the number of TLS records the ClientHello spans (1 in the common case).
	Records int
	// Version is the legacy_version field of the ClientHello (0x0303 for TLS 1.2 and 1.3).
	Version uint16
	// ECH reports an encrypted_client_hello extension: SNI is then the outer, public name.
	ECH bool
	// EarlyData reports an early_data extension: 0-RTT application data may follow.
	EarlyData bool
}

// HasALPN reports whether the client offers the ALPN protocol proto. It does not allocate.
func (h *Hello) HasALPN(proto string) bool {
	for l := h.ALPN; len(l) > 0; {
		n := int(l[0])
		if len(l) < 1+n {
			return false
		}
		if string(l[1:1+n]) == proto {
			return true
		}
		l = l[1+n:]
	}
	return false
}

// SupportsVersion reports whether the client offers protocol version v (0x0304 for TLS 1.3).
// Without a supported_versions extension the client offers legacy_version and, by RFC 5246
// negotiation, anything below it down to SSL 3.0.
func (h *Hello) SupportsVersion(v uint16) bool {
	if h.SupportedVersions == nil {
		return v >= 0x0300 && v <= h.Version
	}
	for l := h.SupportedVersions; len(l) >= 2; l = l[2:] {
		if be16(l) == v {
			return true
		}
	}
	return false
}

// MaxVersion returns the highest protocol version the client offers, ignoring GREASE values
// (RFC 8701): the largest supported_versions entry, or legacy_version without that extension.
func (h *Hello) MaxVersion() uint16 {
	if h.SupportedVersions == nil {
		return h.Version
	}
	var max uint16
	for l := h.SupportedVersions; len(l) >= 2; l = l[2:] {
		if v := be16(l); v > max && !isGREASE(v) {
			max = v
		}
	}
	return max
}

// Parser parses ClientHellos. The zero value is ready to use. A Parser is not safe for
// concurrent use; give each connection goroutine its own, or take them from a sync.Pool.
type Parser struct {
	// MaxLen caps the handshake message length (its 4-byte header included); a longer
	// announced length fails with ErrTooLarge as soon as the header is read. Zero means
	// DefaultMaxLen. Record headers (5 bytes each) come on top: cap the bytes read as well.
	MaxLen int

	// scratch holds the reassembled message when it spans several records.
	scratch []byte
	// seen is a copy of the complete records walked while the message was incomplete, and
	// walk the progress through them (see message).
	seen []byte
	walk walk
	// types collects extension types for the duplicate check of very long extension lists.
	types []uint16
}

// Parse examines buf, the bytes read so far from a connection.
//
// It returns ErrIncomplete when buf holds a valid prefix of a ClientHello that needs more
// bytes: the caller reads more and calls again with the longer buffer. It returns an error
// matching ErrNotTLS when the first bytes are not a TLS handshake record (content type 0x16,
// version major 3), ErrNotClientHello when the handshake message is another type, ErrTooLarge
// when it announces more than MaxLen bytes, and ErrMalformed for bad framing or lengths.
// Invalid input is rejected as early as the bytes at hand allow.
//
// On success it fills *h and returns nil. h.Len is the number of bytes of buf that the
// ClientHello's records span; bytes after it (a ChangeCipherSpec record, early data) are left
// alone. On error *h is zeroed.
//
// Successive calls may pass unrelated buffers: the only thing a Parser carries from one call
// to the next is the progress through a multi-record message, and it resumes from there only
// when the new buffer starts with the very bytes it walked.
func (p *Parser) Parse(buf []byte, h *Hello) error {
	*h = Hello{}
	msg, n, records, err := p.message(buf)
	if err == nil {
		err = p.parseBody(msg, h)
	}
	if err != nil {
		*h = Hello{}
		return err
	}
	h.Len = n
	h.Records = records
	return nil
}

// message returns the ClientHello body (without its 4-byte handshake header), the bytes of
// buf its records span, and how many records.
//
// Parse keeps no state between calls except this: when a message spans several records and is
// still incomplete, the Parser remembers the complete records it has walked (a copy of their
// bytes, and their fragments in scratch). If the next buffer starts with exactly those bytes
// (the same connection's buffer, grown), the walk resumes after them. Without that, a client
// sending 1-byte records one TCP segment at a time would make every read re-walk thousands of
// records. The comparison makes the resumed walk give what a fresh walk would.
func (p *Parser) message(buf []byte) (body []byte, n, records int, err error) {
	maxLen := p.MaxLen
	if maxLen <= 0 {
		maxLen = DefaultMaxLen
	}
	w := walk{need: -1, maxLen: maxLen}
	resumed := len(p.seen) > 0 && p.walk.maxLen == maxLen &&
		len(buf) >= len(p.seen) && bytes.Equal(buf[:len(p.seen)], p.seen)
	if resumed {
		w = p.walk
	} else {
		p.seen = p.seen[:0]
		p.scratch = p.scratch[:0]
	}
	start := w.n
	err = w.run(buf)
	if err == ErrIncomplete {
		if w.n > start {
			p.seen = append(p.seen, buf[start:w.n]...)
			p.scratch = appendFragments(p.scratch, buf[start:w.n])
			p.walk = w
		}
		return nil, 0, 0, ErrIncomplete
	}
	p.seen = p.seen[:0]
	if err != nil {
		return nil, 0, 0, err
	}
	if w.records == 1 {
		// The common case: one record, read in place.
		return buf[recordHeaderLen+handshakeHeaderLen : w.n], w.n, 1, nil
	}
	p.scratch = appendFragments(p.scratch, buf[start:w.n])
	return p.scratch[handshakeHeaderLen:], w.n, w.records, nil
}

// walk is the progress of message through the records at the start of a buffer.
type walk struct {
	n       int // bytes of the complete records walked
	records int // complete records walked
	got     int // handshake bytes in them
	need    int // handshake header + body length; -1 until the header is known
	maxLen  int
	hdr     [handshakeHeaderLen]byte
}

// run walks the records of buf from w.n on until the message is complete (nil), more bytes
// are needed (ErrIncomplete, w counting only complete records) or something is wrong.
func (w *walk) run(buf []byte) error {
	for {
		rest := buf[w.n:]
		// Check each header byte as soon as it is there, so that a non-TLS client is
		// turned away without waiting for more bytes.
		if len(rest) < 1 {
			return ErrIncomplete
		}
		if rest[0] != recordTypeHandshake {
			if w.n == 0 {
				return errNotHandshake
			}
			return errInterleaved
		}
		if len(rest) < 2 {
			return ErrIncomplete
		}
		if rest[1] != 3 {
			if w.n == 0 {
				return errNotVersion3
			}
			return errRecordVersion
		}
		if len(rest) < recordHeaderLen {
			return ErrIncomplete
		}
		rlen := int(rest[3])<<8 | int(rest[4])
		if rlen == 0 {
			return errEmptyRecord
		}
		if rlen > MaxRecordLen {
			return errRecordLen
		}
		frag := rest[recordHeaderLen:]
		complete := len(frag) >= rlen
		if complete {
			frag = frag[:rlen]
		}
		need := w.need
		if w.got < handshakeHeaderLen && len(frag) > 0 {
			hdr := w.hdr // a copy: a partial record must leave w alone
			c := copy(hdr[w.got:], frag)
			if w.got == 0 && hdr[0] != handshakeTypeClientHello {
				return errHandshakeType
			}
			if w.got+c == handshakeHeaderLen {
				body := int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])
				need = handshakeHeaderLen + body
				if need > w.maxLen {
					return errMessageLen
				}
				if body < minBodyLen {
					return errShort
				}
			}
			if complete {
				w.hdr = hdr
			}
		}
		if need >= 0 && w.got+rlen > need {
			return errTrailing // known from the record header alone
		}
		if !complete {
			return ErrIncomplete
		}
		// Every record holds at least one byte, so the loop ends within len(buf)/6 turns.
		w.need = need
		w.got += rlen
		w.n += recordHeaderLen + rlen
		w.records++
		if w.got == w.need {
			return nil
		}
	}
}

// appendFragments appends the bodies of the complete records in recs to dst.
func appendFragments(dst, recs []byte) []byte {
	for len(recs) > 0 {
		rlen := int(recs[3])<<8 | int(recs[4])
		dst = append(dst, recs[recordHeaderLen:recordHeaderLen+rlen]...)
		recs = recs[recordHeaderLen+rlen:]
	}
	return dst
}

// parseBody reads the ClientHello body (RFC 8446 section 4.1.2, RFC 5246 section 7.4.1.2).
func (p *Parser) parseBody(m []byte, h *Hello) error {
	if len(m) < minBodyLen {
		return errShort
	}
	if m[0] != 3 {
		return errVersion
	}
	h.Version = be16(m)
	s := m[2+32:] // legacy_version, random

	sid := int(s[0])
	if sid > 32 {
		return errSessionID
	}
	s = s[1:]
	if len(s) < sid {
		return errShort
	}
	s = s[sid:]

	if len(s) < 2 {
		return errShort
	}
	cs := int(be16(s))
	s = s[2:]
	if cs < 2 || cs&1 != 0 || len(s) < cs {
		return errCipherSuites
	}
	s = s[cs:]

	if len(s) < 1 {
		return errShort
	}
	cm := int(s[0])
	s = s[1:]
	if cm < 1 || len(s) < cm {
		return errCompression
	}
	s = s[cm:]

	if len(s) == 0 {
		return nil // a ClientHello without extensions (RFC 5246 allows it)
	}
	if len(s) < 2 || int(be16(s)) != len(s)-2 {
		return errExtensions
	}
	exts := s[2:]

	// Duplicates: types below 64 (most of the IANA registry in use) go to an exact bit set,
	// the others (GREASE, 0xff01, 0xfe0d, ...) to a 1024-bit filter; only when two of those
	// collide do we pay for an exact check.
	var small uint64
	var seen [16]uint64
	maybeDup := false
	count := 0
	// Offsets rather than re-slicing: this loop is most of the time Parse takes.
	for i := 0; i < len(exts); count++ {
		if len(exts)-i < 4 {
			return errExtension
		}
		hdr := binary.BigEndian.Uint32(exts[i:]) // type, length
		typ := uint16(hdr >> 16)
		start := i + 4
		end := start + int(hdr&0xffff)
		if end > len(exts) {
			return errExtension
		}
		i = end

		if typ < 64 {
			if small&(1<<typ) != 0 {
				return errDuplicateExt
			}
			small |= 1 << typ
		} else {
			b := uint32(typ) * 0x9e3779b1 >> 22
			if seen[b>>6]&(1<<(b&63)) != 0 {
				maybeDup = true
			}
			seen[b>>6] |= 1 << (b & 63)
		}

		var err error
		switch typ {
		case extServerName:
			h.SNI, err = parseServerName(exts[start:end:end])
		case extALPN:
			h.ALPN, err = parseALPN(exts[start:end:end])
		case extSupportedVersions:
			h.SupportedVersions, err = parseSupportedVersions(exts[start:end:end])
		case extEarlyData:
			if end != start {
				err = errEarlyDataBytes
			}
			h.EarlyData = true
		case extECH:
			h.ECH = true
		}
		if err != nil {
			return err
		}
	}
	if maybeDup && p.hasDuplicate(exts, count) {
		return errDuplicateExt
	}
	return nil
}

// hasDuplicate reports whether an extension type occurs twice in the (already validated)
// extension block exts holding count extensions. RFC 8446 section 4.2 forbids it, and a
// second server_name could otherwise route by one name while the backend serves another.
func (p *Parser) hasDuplicate(exts []byte, count int) bool {
	if count <= 64 {
		for s := exts; len(s) > 0; {
			typ := be16(s)
			s = s[4+int(be16(s[2:])):]
			for r := s; len(r) > 0; r = r[4+int(be16(r[2:])):] {
				if be16(r) == typ {
					return true
				}
			}
		}
		return false
	}
	// Quadratic would be a denial-of-service vector at ~16k extensions: sort instead.
	t := p.types[:0]
	for s := exts; len(s) > 0; s = s[4+int(be16(s[2:])):] {
		t = append(t, be16(s))
	}
	p.types = t
	slices.Sort(t)
	for i := 1; i < len(t); i++ {
		if t[i] == t[i-1] {
			return true
		}
	}
	return false
}

// parseServerName returns the first host_name of a server_name extension (RFC 6066
// section 3), or nil if the list has none.
func parseServerName(d []byte) ([]byte, error) {
	if len(d) < 2 || int(be16(d)) != len(d)-2 || len(d) == 2 {
		return nil, errServerName
	}
	var name []byte
	for d = d[2:]; len(d) > 0; {
		if len(d) < 3 {
			return nil, errServerName
		}
		typ := d[0]
		l := int(be16(d[1:]))
		d = d[3:]
		if l == 0 || len(d) < l {
			return nil, errServerName
		}
		if typ == 0 {
			if name != nil {
				return nil, errDuplicateHost
			}
			name = d[:l:l]
		}
		d = d[l:]
	}
	return name, nil
}

// parseALPN validates a protocol_name_list (RFC 7301 section 3.1) and returns it without its
// length prefix.
func parseALPN(d []byte) ([]byte, error) {
	if len(d) < 2 || int(be16(d)) != len(d)-2 || len(d) == 2 {
		return nil, errALPN
	}
	list := d[2:]
	for l := list; len(l) > 0; {
		n := int(l[0])
		if n == 0 || len(l) < 1+n {
			return nil, errALPN
		}
		l = l[1+n:]
	}
	return list, nil
}

// parseSupportedVersions validates the ClientHello form of supported_versions (RFC 8446
// section 4.2.1) and returns the list without its length prefix.
func parseSupportedVersions(d []byte) ([]byte, error) {
	if len(d) < 3 || int(d[0]) != len(d)-1 || (len(d)-1)&1 != 0 {
		return nil, errVersions
	}
	return d[1:], nil
}

func be16(b []byte) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }

// isGREASE reports a GREASE value of RFC 8701: 0x0a0a, 0x1a1a, ..., 0xfafa.
func isGREASE(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }
