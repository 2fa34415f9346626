// Package pgwire holds the few pieces of the PostgreSQL wire protocol that a gateway needs when
// it routes PostgreSQL connections by SNI without terminating their TLS: recognising the first
// packet of a connection, reading a CancelRequest, and writing an ErrorResponse. It does no
// I/O and keeps no state; every function reads or appends to the slices it is given.
//
// # Why a TLS passthrough gateway has to speak a little PostgreSQL
//
// A classic PostgreSQL client (every libpq up to 16, psql 15 included, and libpq ≥ 17 by
// default) does not open with a TLS ClientHello. It first sends an 8-byte SSLRequest in
// plaintext, waits for one byte ('S' = go ahead with TLS, 'N' = no TLS), and only then starts
// the TLS handshake. A gateway that expects a ClientHello as the first bytes sees no SNI and
// closes the connection. snigate instead negotiates on both sides:
//
//  1. Classify the first bytes. For KindSSLRequest, refuse the connection if any byte came
//     after the 8 bytes of the request: bytes that arrive ahead of the TLS handshake are
//     plaintext smuggled in front of it (the CVE-2021-23214 class) and would be replayed to
//     the backend as if they came from inside TLS.
//  2. Answer 'S' (SSLAccept), read the ClientHello and route on its SNI, as for any TLS
//     connection.
//  3. Dial the backend, write SSLRequest, and read exactly one byte. Never write the
//     ClientHello in the same write as the SSLRequest: PostgreSQL 15 then reads the
//     ClientHello into its plaintext buffer, answers 'S' and hangs until
//     authentication_timeout.
//  4. On 'S', write the ClientHello and splice both directions untouched. On anything else
//     close: the client was already told 'S', so nothing better is possible (backends must
//     run with ssl=on).
//
// Other first packets:
//
//   - KindTLS (first byte 0x16): a PostgreSQL ≥ 17 "direct" client (sslnegotiation=direct,
//     ALPN "postgresql") or any other TLS client. For PostgreSQL routes the gateway still does
//     the SSLRequest exchange of step 3 toward the backend: PostgreSQL ≥ 17 then selects ALPN
//     "postgresql", and servers ≤ 16 work for clients that do not insist on it (pgx). A
//     ClientHello without ALPN must never be written raw to a PostgreSQL ≥ 17 server: it
//     rejects direct connections without ALPN.
//   - KindGSSENCRequest: answer 'N' (GSSENCReject) and classify again on the same connection;
//     the client then sends an SSLRequest. Never forward it: a Debian PostgreSQL 15 answered
//     'G' even without Kerberos configured.
//   - KindStartup: a plaintext StartupMessage (libpq sslmode=disable, or prefer/allow falling
//     back). Answer ErrorResponse(SQLStateInvalidAuthorization, ...) and close, so the user
//     reads why instead of seeing a bare disconnect. With sslmode=allow libpq retries with an
//     SSLRequest only after such an ErrorResponse; a silently closed socket breaks it.
//   - KindCancelRequest: a cancel on a new plaintext connection carries no SNI and cannot be
//     routed by name (psql ≤ 16 on Ctrl-C). ParseCancel reads it; the gateway forwards it only
//     to backends that the same client address holds connections to through the same
//     listener, never to every backend (that would hand one tenant's cancel key to every
//     other tenant's server). Cancels from libpq ≥ 17 and pgx come after SSLRequest + TLS
//     and are routed by SNI like any connection.
//
// The BackendKeyData that a cancel refers to travels inside TLS, so a passthrough gateway
// never learns which backend owns a given pid.
package pgwire

import (
	"encoding/binary"
	"errors"
)

// Request codes that stand where a StartupMessage has its protocol version
// (major 1234, minor 5678..5680).
const (
	CancelRequestCode = 1234<<16 | 5678 // 80877102
	SSLRequestCode    = 1234<<16 | 5679 // 80877103
	GSSENCRequestCode = 1234<<16 | 5680 // 80877104
)

// Protocol versions of a StartupMessage.
const (
	ProtocolVersion30 = 3<<16 | 0
	ProtocolVersion32 = 3<<16 | 2 // PostgreSQL 18: variable-length cancel keys
)

// Wire sizes and limits, as the PostgreSQL server enforces them.
const (
	// MaxStartupPacketLength is the largest StartupMessage payload (after the length word)
	// that the server accepts (MAX_STARTUP_PACKET_LENGTH).
	MaxStartupPacketLength = 10000
	// MaxCancelKeyLength is the largest cancel key protocol 3.2 allows; protocol 3.0 keys are
	// always 4 bytes.
	MaxCancelKeyLength = 256
	// ClassifyBytes is the most bytes Classify ever needs to decide.
	ClassifyBytes = 8
)

// The fixed 8-byte requests, as strings so that nobody can modify them. Write them with
// io.WriteString or []byte(SSLRequest).
const (
	SSLRequest    = "\x00\x00\x00\x08\x04\xd2\x16\x2f"
	GSSENCRequest = "\x00\x00\x00\x08\x04\xd2\x16\x30"
)

// One-byte answers to SSLRequest and GSSENCRequest.
const (
	SSLAccept    byte = 'S'
	SSLReject    byte = 'N'
	GSSENCReject byte = 'N'
)

// tlsHandshake is the TLS record content type of a handshake record: the first byte of every
// ClientHello. No PostgreSQL first packet can start with it, since a valid packet length is
// at most 10004 and so its first byte is 0.
const tlsHandshake = 0x16

// Errors returned by Classify and ParseCancel. They are fixed values so that a rejected
// connection costs no allocation; callers wrap them with context if they log.
var (
	// ErrIncomplete means more bytes are needed; the accompanying count says how many in
	// total (from the start of the packet).
	ErrIncomplete = errors.New("pgwire: incomplete packet")
	// ErrNotPostgres means the bytes are neither a PostgreSQL first packet nor a TLS record.
	ErrNotPostgres = errors.New("pgwire: not a postgresql startup packet")
	// ErrBadLength means a known request code came with an impossible length.
	ErrBadLength = errors.New("pgwire: invalid packet length")
	// ErrNotCancel means ParseCancel was given something other than a CancelRequest.
	ErrNotCancel = errors.New("pgwire: not a cancel request")
	// ErrTrailingBytes means more bytes were given than the packet's length word says.
	ErrTrailingBytes = errors.New("pgwire: bytes after the packet")
)

// Kind is what the first packet of a connection is.
type Kind int

const (
	KindUnknown       Kind = iota // neither PostgreSQL nor TLS, or malformed
	KindSSLRequest                // 8-byte SSLRequest: classic TLS negotiation
	KindGSSENCRequest             // 8-byte GSSENCRequest: answer 'N' and read on
	KindCancelRequest             // plaintext CancelRequest (16 bytes in 3.0, 13..268 in 3.2)
	KindStartup                   // plaintext StartupMessage, protocol 3.x
	KindTLS                       // a TLS record (0x16): direct TLS, or not PostgreSQL at all
)

var kindNames = [...]string{
	KindUnknown:       "unknown",
	KindSSLRequest:    "ssl_request",
	KindGSSENCRequest: "gssenc_request",
	KindCancelRequest: "cancel_request",
	KindStartup:       "startup",
	KindTLS:           "tls",
}

// String returns a short lower-case name, suitable as a metric label or log value.
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

// Classify says what the first bytes of a connection are. b holds whatever has been read so
// far (a peek); Classify never needs more than ClassifyBytes (8) bytes to decide.
//
// It returns:
//   - (kind, n, nil) when decided. For KindSSLRequest and KindGSSENCRequest n is 8; for
//     KindCancelRequest and KindStartup n is the packet length from its length word, which
//     may be more than len(b) (the caller reads the rest); for KindTLS n is 0, framing belongs
//     to the TLS parser.
//   - (KindUnknown, n, ErrIncomplete) when b is a prefix of something acceptable: read until
//     at least n bytes are there, then call again.
//   - (KindUnknown, 0, ErrNotPostgres or ErrBadLength) when the bytes cannot become a
//     packet that this package recognises. Rejection is as early as possible: a first byte
//     that is neither 0x00 nor 0x16 is rejected at once, without waiting for 8 bytes.
//
// The decision depends only on the first 8 bytes: calling it again with more bytes gives the
// same kind (a rejection may then name ErrBadLength where a shorter prefix said
// ErrNotPostgres). Bytes beyond n are not looked at: whether they may be there at all
// (they may not after an SSLRequest) is the caller's decision.
func Classify(b []byte) (Kind, int, error) {
	if len(b) == 0 {
		return KindUnknown, 1, ErrIncomplete
	}
	if b[0] == tlsHandshake {
		return KindTLS, 0, nil
	}
	// Every packet we know is at most 10004 bytes long, so the length word starts 00 00.
	if b[0] != 0 || len(b) > 1 && b[1] != 0 {
		return KindUnknown, 0, ErrNotPostgres
	}
	if len(b) < ClassifyBytes {
		// The code's first two bytes are telling already: 04 d2 (1234) for the requests,
		// 00 03 for a protocol 3.x StartupMessage.
		if len(b) > 4 && b[4] != 0x04 && b[4] != 0x00 ||
			len(b) > 5 && (b[4] == 0x04) != (b[5] == 0xd2) ||
			len(b) > 5 && (b[4] == 0x00) != (b[5] == 0x03) {
			return KindUnknown, 0, ErrNotPostgres
		}
		return KindUnknown, ClassifyBytes, ErrIncomplete
	}
	n := binary.BigEndian.Uint32(b[0:4])
	code := binary.BigEndian.Uint32(b[4:8])
	switch {
	case code == SSLRequestCode:
		if n != 8 {
			return KindUnknown, 0, ErrBadLength
		}
		return KindSSLRequest, 8, nil
	case code == GSSENCRequestCode:
		if n != 8 {
			return KindUnknown, 0, ErrBadLength
		}
		return KindGSSENCRequest, 8, nil
	case code == CancelRequestCode:
		if !validCancelLength(n) {
			return KindUnknown, 0, ErrBadLength
		}
		return KindCancelRequest, int(n), nil
	case code>>16 == 3:
		if n < 8 || n > 4+MaxStartupPacketLength {
			return KindUnknown, 0, ErrBadLength
		}
		return KindStartup, int(n), nil
	}
	return KindUnknown, 0, ErrNotPostgres
}

// validCancelLength: length word + code + pid + a key of 1..256 bytes, as the server checks
// it (ProcessCancelRequestPacket).
func validCancelLength(n uint32) bool {
	return n >= 12+1 && n <= 12+MaxCancelKeyLength
}

// CancelKey is the secret of a CancelRequest. Whoever holds it with the pid can cancel that
// backend's queries, so it prints as [redacted] through fmt, log/slog and encoding/json.
type CancelKey []byte

// String implements fmt.Stringer.
func (CancelKey) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer (the %#v verb).
func (CancelKey) GoString() string { return "pgwire.CancelKey([redacted])" }

// MarshalText implements encoding.TextMarshaler, which log/slog and encoding/json prefer over
// printing the bytes.
func (CancelKey) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// ParseCancel reads a complete CancelRequest: length word, CancelRequestCode, backend pid,
// and the key. Protocol 3.0 keys are 4 bytes (a 16-byte packet); protocol 3.2 (PostgreSQL 18)
// keys have 1 to 256 bytes (a packet of 12 + key length). key aliases b.
//
// b must hold exactly one packet: fewer bytes than the length word says give ErrIncomplete,
// more give ErrTrailingBytes (a cancel connection carries nothing else).
func ParseCancel(b []byte) (pid uint32, key CancelKey, err error) {
	if len(b) < ClassifyBytes {
		return 0, nil, ErrIncomplete
	}
	if binary.BigEndian.Uint32(b[4:8]) != CancelRequestCode {
		return 0, nil, ErrNotCancel
	}
	n := binary.BigEndian.Uint32(b[0:4])
	if !validCancelLength(n) {
		return 0, nil, ErrBadLength
	}
	switch {
	case uint64(len(b)) < uint64(n):
		return 0, nil, ErrIncomplete
	case uint64(len(b)) > uint64(n):
		return 0, nil, ErrTrailingBytes
	}
	return binary.BigEndian.Uint32(b[8:12]), CancelKey(b[12:n:n]), nil
}

// AppendCancelRequest appends a CancelRequest for pid and key to dst. It panics if the key
// length is outside 1..MaxCancelKeyLength.
func AppendCancelRequest(dst []byte, pid uint32, key []byte) []byte {
	if len(key) == 0 || len(key) > MaxCancelKeyLength {
		panic("pgwire: cancel key length out of range")
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(12+len(key)))
	dst = binary.BigEndian.AppendUint32(dst, CancelRequestCode)
	dst = binary.BigEndian.AppendUint32(dst, pid)
	return append(dst, key...)
}

// SQLSTATE codes the gateway answers with.
const (
	// SQLStateInvalidAuthorization (28000, invalid_authorization_specification) is what
	// PostgreSQL itself sends when pg_hba.conf rejects a connection, e.g. for lacking TLS.
	SQLStateInvalidAuthorization = "28000"
	// SQLStateConnectionFailure (08006) suits a backend that cannot be reached.
	SQLStateConnectionFailure = "08006"
	// SQLStateProtocolViolation (08P01) suits a malformed first packet.
	SQLStateProtocolViolation = "08P01"
)

// ErrorResponse returns a FATAL ErrorResponse message: what a PostgreSQL server sends before
// it closes a connection it refuses. See AppendErrorResponse.
func ErrorResponse(sqlstate, message, hint string) []byte {
	return AppendErrorResponse(nil, sqlstate, message, hint)
}

// AppendErrorResponse appends a FATAL ErrorResponse ('E') to dst with the fields S and V
// (severity, localized and not), C (sqlstate), M (message) and, when hint is not empty, H.
// Clients of protocol 3.0 and later print it as
//
//	FATAL:  <message>
//	HINT:  <hint>
//
// NUL bytes in message and hint are dropped (they would end the field early). It panics if
// sqlstate is not five characters of 0-9 and A-Z: that is a programming error.
func AppendErrorResponse(dst []byte, sqlstate, message, hint string) []byte {
	if !validSQLState(sqlstate) {
		panic("pgwire: invalid SQLSTATE " + sqlstate)
	}
	start := len(dst)
	dst = append(dst, 'E', 0, 0, 0, 0)
	dst = appendField(dst, 'S', "FATAL")
	dst = appendField(dst, 'V', "FATAL")
	dst = appendField(dst, 'C', sqlstate)
	dst = appendField(dst, 'M', message)
	if hint != "" {
		dst = appendField(dst, 'H', hint)
	}
	dst = append(dst, 0)
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-1))
	return dst
}

func appendField(dst []byte, code byte, v string) []byte {
	dst = append(dst, code)
	for i := 0; i < len(v); i++ {
		if v[i] != 0 {
			dst = append(dst, v[i])
		}
	}
	return append(dst, 0)
}

func validSQLState(s string) bool {
	if len(s) != 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}
