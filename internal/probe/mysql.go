package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The little of the MySQL client/server protocol that a TLS upgrade needs: the server's
// initial handshake packet (protocol version 10, sent by every MySQL since 3.21 and every
// MariaDB) and the client's SSLRequest packet. MariaDB speaks the same protocol here.

// Capability flags (MySQL's CLIENT_*). MariaDB reads CLIENT_LONG_PASSWORD as CLIENT_MYSQL:
// set, it keeps the MySQL layout of the packet, which is what sslRequest writes.
const (
	clientLongPassword     = 1 << 0
	clientProtocol41       = 1 << 9
	clientSSL              = 1 << 11
	clientSecureConnection = 1 << 15
	clientPluginAuth       = 1 << 19
)

// maxGreeting caps the greeting packet the probe reads. Real greetings are about 80 to 130
// bytes; a "length" far above that is the first bytes of some other protocol.
const maxGreeting = 1024

// charsetUTF8MB4 is utf8mb4_general_ci, which every MySQL since 5.5 and every MariaDB know.
const charsetUTF8MB4 = 45

// errNotMySQL means the bytes are no MySQL greeting.
var errNotMySQL = errors.New("not a MySQL greeting")

// greeting is what the probe needs of the server's initial handshake packet.
type greeting struct {
	seq     byte   // the packet's sequence id: the SSLRequest carries the next one
	version string // the server's version string, for messages
	caps    uint32 // capability flags, both halves when the server sent the upper one
}

// mysqlError is an ERR packet sent instead of a greeting (too many connections, a host that
// is not allowed or is blocked).
type mysqlError struct {
	code    uint16
	message string
}

func (e *mysqlError) Error() string { return fmt.Sprintf("MySQL error %d: %s", e.code, e.message) }

// readGreeting reads one packet and parses it as a greeting.
func readGreeting(r io.Reader) (greeting, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return greeting{}, err
	}
	n, err := greetingLength(hdr)
	if err != nil {
		return greeting{}, err
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return greeting{}, err
	}
	return parseGreeting(hdr[3], payload)
}

// greetingLength checks a packet header: three bytes of length (little endian) and the
// sequence id, which is 0 for the first packet of a connection.
func greetingLength(hdr [4]byte) (int, error) {
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	switch {
	case hdr[3] != 0:
		return 0, fmt.Errorf("%w: first packet has sequence id %d", errNotMySQL, hdr[3])
	case n == 0 || n > maxGreeting:
		return 0, fmt.Errorf("%w: packet length %d", errNotMySQL, n)
	}
	return n, nil
}

// parseGreeting parses the payload of the server's first packet:
//
//	1   protocol version, 10 (or 0xff: an ERR packet)
//	n   server version, NUL-terminated
//	4   connection id
//	8   first part of the auth scramble
//	1   filler, 0
//	2   capability flags, lower half
//	    and, when the packet goes on: 1 charset, 2 status flags, 2 capability flags, upper half
func parseGreeting(seq byte, p []byte) (greeting, error) {
	if len(p) == 0 {
		return greeting{}, fmt.Errorf("%w: empty packet", errNotMySQL)
	}
	switch p[0] {
	case 10:
	case 0xff:
		return greeting{}, parseError(p)
	default:
		return greeting{}, fmt.Errorf("%w: protocol version %d", errNotMySQL, p[0])
	}
	end := -1
	for i := 1; i < len(p); i++ {
		if p[i] == 0 {
			end = i
			break
		}
		if p[i] < 0x20 || p[i] > 0x7e {
			return greeting{}, fmt.Errorf("%w: unprintable server version", errNotMySQL)
		}
	}
	if end < 0 {
		return greeting{}, fmt.Errorf("%w: unterminated server version", errNotMySQL)
	}
	g := greeting{seq: seq, version: string(p[1:end])}
	i := end + 1 + 4 + 8 // NUL, connection id, scramble
	if i+3 > len(p) {
		return greeting{}, fmt.Errorf("%w: %d bytes end before the capability flags", errNotMySQL, len(p))
	}
	if p[i] != 0 {
		return greeting{}, fmt.Errorf("%w: filler byte %#x", errNotMySQL, p[i])
	}
	g.caps = uint32(binary.LittleEndian.Uint16(p[i+1:]))
	if i += 3; i+5 <= len(p) {
		g.caps |= uint32(binary.LittleEndian.Uint16(p[i+3:])) << 16
	}
	return g, nil
}

// parseError reads an ERR packet: 0xff, a 2-byte code, "#" and a 5-character SQL state when
// the server already speaks protocol 4.1 (before the handshake it usually does not), then
// the message.
func parseError(p []byte) error {
	if len(p) < 3 {
		return fmt.Errorf("%w: short error packet", errNotMySQL)
	}
	e := &mysqlError{code: binary.LittleEndian.Uint16(p[1:])}
	msg := p[3:]
	if len(msg) >= 6 && msg[0] == '#' {
		msg = msg[6:]
	}
	e.message = printable(msg, 200)
	return e
}

// printable is b as text for a message: bytes outside printable ASCII become '?', and it is
// cut at limit bytes.
func printable(b []byte, limit int) string {
	var sb strings.Builder
	for i, c := range b {
		if i == limit {
			sb.WriteString("...")
			break
		}
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

// sslRequest is the client's answer to g that asks for TLS: the first 32 bytes of a
// HandshakeResponse41 (capabilities, max packet size, charset, 23 zero bytes), sequence id
// g.seq+1. The server starts its TLS handshake after it.
func sslRequest(g greeting) []byte {
	const payload = 32
	caps := uint32(clientLongPassword|clientProtocol41|clientSSL|clientSecureConnection|clientPluginAuth) & (g.caps | clientProtocol41 | clientSSL)
	b := make([]byte, 4+payload)
	b[0], b[3] = payload, g.seq+1
	binary.LittleEndian.PutUint32(b[4:], caps)
	binary.LittleEndian.PutUint32(b[8:], 1<<24) // max packet size: 16 MiB
	b[12] = charsetUTF8MB4
	return b
}
