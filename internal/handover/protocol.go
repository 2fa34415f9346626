// Package handover is the protocol of a live upgrade: the running snigate (the old
// process) passes its listening sockets and its relayed connections to the binary that
// replaces it (the new process) over a unix socket, with the file descriptors in SCM_RIGHTS
// control messages.
//
// The conversation, on a SOCK_SEQPACKET socketpair whose child end the old process gives
// the new one as fd 3 (EnvFD names it):
//
//	new → old  Hello{Version, PID}          the new binary loaded and validated the config
//	old → new  Listeners{Names} + fds       every listening socket, duplicated
//	new → old  Serving | Failed{Reason}     it accepts on them now, or why it will not
//	old → new  Pair{state} + 2 fds          each relayed pair the old took off its loops
//	old → new  End{Pairs}                   nothing more follows
//	new → old  Taken{Pairs} | Failed        how many it serves as its own
//
// The old process keeps accepting until Serving (both accept on the same sockets in
// between, so no connection is refused), and a Failed, a close or a deadline before
// Serving leaves it serving everything. A pair's two sockets belong to the new process once
// its Pair message is written: the old one closes its copies and never reads them again.
//
// Every message is one datagram: a 12-byte header (magic, version, type, number of fds,
// payload length) and a payload. Versions differ when the encoding changes; a new process
// refuses a version it does not know, and the old one then keeps serving.
package handover

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Version is the protocol's version, in every header.
const Version = 1

// EnvFD names the environment variable that tells a new process which fd holds its end of
// the hand-over socket (the old process sets it).
const EnvFD = "SNIGATE_HANDOVER_FD"

// magic opens every header, so that a peer that is not snigate is told apart at once.
var magic = [4]byte{'S', 'N', 'G', 'H'}

const headerLen = 12

// MaxMessage is the largest message, header included. The kernel's limit for one datagram
// is the socket's send buffer (wmem_max, 208 KiB by default): a pair whose bytes in flight
// do not fit stays in the old process, which finishes it.
const MaxMessage = 192 << 10

// MaxPending is how many bytes in flight a pair may carry in its message (both directions).
const MaxPending = MaxMessage - 16<<10

// maxFDs caps the fds of one message: SCM_RIGHTS takes 253 at most (SCM_MAX_FD).
const maxFDs = 253

// Type is a message's type.
type Type uint8

const (
	TypeHello Type = iota + 1
	TypeListeners
	TypeServing
	TypeFailed
	TypePair
	TypeEnd
	TypeTaken
)

func (t Type) String() string {
	switch t {
	case TypeHello:
		return "hello"
	case TypeListeners:
		return "listeners"
	case TypeServing:
		return "serving"
	case TypeFailed:
		return "failed"
	case TypePair:
		return "pair"
	case TypeEnd:
		return "end"
	case TypeTaken:
		return "taken"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Header is a message's header.
type Header struct {
	Version uint16
	Type    Type
	FDs     uint8 // file descriptors the message carries
	Len     uint32
}

var (
	errShort   = errors.New("handover: message shorter than its header says")
	errMagic   = errors.New("handover: not a snigate hand-over message")
	errLong    = errors.New("handover: message too long")
	errTrailer = errors.New("handover: bytes after the payload's fields")
)

// ErrVersion is the error of a message of another protocol version.
var ErrVersion = errors.New("handover: protocol version not supported")

// appendHeader appends h to b.
func appendHeader(b []byte, h Header) []byte {
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint16(b, h.Version)
	b = append(b, byte(h.Type), h.FDs)
	return binary.BigEndian.AppendUint32(b, h.Len)
}

// ParseHeader reads the header at the start of msg and returns the payload after it.
func ParseHeader(msg []byte) (Header, []byte, error) {
	if len(msg) < headerLen {
		return Header{}, nil, errShort
	}
	if [4]byte(msg[:4]) != magic {
		return Header{}, nil, errMagic
	}
	h := Header{
		Version: binary.BigEndian.Uint16(msg[4:]),
		Type:    Type(msg[6]),
		FDs:     msg[7],
		Len:     binary.BigEndian.Uint32(msg[8:]),
	}
	if h.Version != Version {
		return h, nil, fmt.Errorf("%w: %d (this binary speaks %d)", ErrVersion, h.Version, Version)
	}
	if h.Len > MaxMessage-headerLen {
		return h, nil, errLong
	}
	if int(h.Len) != len(msg)-headerLen {
		return h, nil, errShort
	}
	if h.FDs > maxFDs {
		return h, nil, errLong
	}
	return h, msg[headerLen:], nil
}

// Hello is the new process's first message: it has loaded and validated its configuration.
type Hello struct {
	PID int
}

// Listeners names the listening sockets whose fds come with the message, in their order.
// A name is the proxy's address of a port ("0.0.0.0:443"), or "admin:" and the flag of an
// admin listener.
type Listeners struct {
	Names []string
}

// Failed says why a process gave up; the other then goes on as if nothing was tried.
type Failed struct {
	Reason string
}

// End follows the last Pair; Pairs counts them.
type End struct {
	Pairs int
}

// Taken is how many pairs the new process serves.
type Taken struct {
	Pairs int
}

// Pair is one relayed connection's state; its two fds (client, backend) come with it.
type Pair struct {
	// Address is the port the client connected to (the proxy's key of its listener).
	Address string
	// Client is the client's address (a trusted balancer's PROXY header's, with Via the
	// balancer's); Endpoint the backend's.
	Client, Via, Endpoint netip.AddrPort
	// Start is when the connection was accepted (unix nanoseconds).
	Start int64
	// What the access log line and the metrics name.
	Listener, Route, Backend, SNI, Negotiation string
	// In and Out are the bytes moved so far: client to backend, backend to client.
	In, Out int64
	// PGCancel: the pair counts for plaintext PostgreSQL cancel routing (a bridge).
	PGCancel bool
	// ExpectTLS: the backend's first byte is still to be checked (relay.Options).
	ExpectTLS bool
	// Flow is each direction's state, [0] client to backend, [1] backend to client.
	Flow [2]Flow
}

// Flow is one direction of a pair.
type Flow struct {
	// Pending holds bytes read from the source and not yet written to the destination.
	Pending []byte
	// EOF: the source has ended; Shut: the end was passed on to the destination.
	EOF, Shut bool
}

// Message is a decoded message: one of the types above, as a pointer.
type Message any

// Encode encodes m, which carries fds file descriptors, as one datagram.
func Encode(m Message, fds int) ([]byte, error) {
	var t Type
	var p []byte
	switch m := m.(type) {
	case *Hello:
		t, p = TypeHello, appendUint(nil, uint64(m.PID))
	case *Listeners:
		t, p = TypeListeners, appendUint(nil, uint64(len(m.Names)))
		for _, n := range m.Names {
			p = appendString(p, n)
		}
	case *Serving:
		t = TypeServing
	case *Failed:
		t, p = TypeFailed, appendString(nil, m.Reason)
	case *Pair:
		t, p = TypePair, m.append(nil)
	case *End:
		t, p = TypeEnd, appendUint(nil, uint64(m.Pairs))
	case *Taken:
		t, p = TypeTaken, appendUint(nil, uint64(m.Pairs))
	default:
		return nil, fmt.Errorf("handover: cannot encode %T", m)
	}
	if len(p) > MaxMessage-headerLen || fds > maxFDs {
		return nil, errLong
	}
	b := appendHeader(make([]byte, 0, headerLen+len(p)), Header{Version: Version, Type: t, FDs: uint8(fds), Len: uint32(len(p))})
	return append(b, p...), nil
}

// Serving says the new process accepts on the listeners it was given.
type Serving struct{}

// Decode decodes one datagram. It checks that the message declares as many fds as its type
// takes (Listeners: one per name; Pair: two; others: none); the caller checks that as many
// came.
func Decode(msg []byte) (Header, Message, error) {
	h, p, err := ParseHeader(msg)
	if err != nil {
		return h, nil, err
	}
	d := decoder{b: p}
	var m Message
	wantFDs := 0
	switch h.Type {
	case TypeHello:
		m = &Hello{PID: d.int()}
	case TypeListeners:
		n := d.count(1)
		l := &Listeners{Names: make([]string, 0, n)}
		for range n {
			l.Names = append(l.Names, d.string())
		}
		m, wantFDs = l, n
	case TypeServing:
		m = &Serving{}
	case TypeFailed:
		m = &Failed{Reason: d.string()}
	case TypePair:
		pr := &Pair{}
		pr.decode(&d)
		m, wantFDs = pr, 2
	case TypeEnd:
		m = &End{Pairs: d.int()}
	case TypeTaken:
		m = &Taken{Pairs: d.int()}
	default:
		return h, nil, fmt.Errorf("handover: unknown message type %d", uint8(h.Type))
	}
	if d.err != nil {
		return h, nil, fmt.Errorf("handover: %s: %w", h.Type, d.err)
	}
	if len(d.b) > 0 {
		return h, nil, fmt.Errorf("%s: %w", h.Type, errTrailer)
	}
	if int(h.FDs) != wantFDs {
		return h, nil, fmt.Errorf("handover: %s declares %d fds, takes %d", h.Type, h.FDs, wantFDs)
	}
	return h, m, nil
}

// flags of a Pair, one bit each.
const (
	flagPGCancel = 1 << iota
	flagExpectTLS
	flagEOF0
	flagShut0
	flagEOF1
	flagShut1
	flagsKnown = 1<<iota - 1
)

func (p *Pair) append(b []byte) []byte {
	b = appendString(b, p.Address)
	for _, a := range [3]netip.AddrPort{p.Client, p.Via, p.Endpoint} {
		b = appendAddrPort(b, a)
	}
	b = appendUint(b, uint64(p.Start))
	for _, s := range [5]string{p.Listener, p.Route, p.Backend, p.SNI, p.Negotiation} {
		b = appendString(b, s)
	}
	b = appendUint(b, uint64(p.In))
	b = appendUint(b, uint64(p.Out))
	var f uint64
	set := func(bit uint64, on bool) {
		if on {
			f |= bit
		}
	}
	set(flagPGCancel, p.PGCancel)
	set(flagExpectTLS, p.ExpectTLS)
	set(flagEOF0, p.Flow[0].EOF)
	set(flagShut0, p.Flow[0].Shut)
	set(flagEOF1, p.Flow[1].EOF)
	set(flagShut1, p.Flow[1].Shut)
	b = appendUint(b, f)
	b = appendBytes(b, p.Flow[0].Pending)
	return appendBytes(b, p.Flow[1].Pending)
}

func (p *Pair) decode(d *decoder) {
	p.Address = d.string()
	p.Client, p.Via, p.Endpoint = d.addrPort(), d.addrPort(), d.addrPort()
	p.Start = d.int64()
	p.Listener, p.Route, p.Backend, p.SNI, p.Negotiation = d.string(), d.string(), d.string(), d.string(), d.string()
	p.In, p.Out = d.int64(), d.int64()
	f := d.uint()
	if f&^flagsKnown != 0 && d.err == nil {
		d.err = fmt.Errorf("unknown pair flags %#x", f&^flagsKnown)
	}
	p.PGCancel, p.ExpectTLS = f&flagPGCancel != 0, f&flagExpectTLS != 0
	p.Flow[0].EOF, p.Flow[0].Shut = f&flagEOF0 != 0, f&flagShut0 != 0
	p.Flow[1].EOF, p.Flow[1].Shut = f&flagEOF1 != 0, f&flagShut1 != 0
	for i := range p.Flow {
		if p.Flow[i].Shut && !p.Flow[i].EOF && d.err == nil {
			d.err = errors.New("a direction shut before its source ended")
		}
	}
	p.Flow[0].Pending, p.Flow[1].Pending = d.bytes(), d.bytes()
}

func appendUint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendBytes(b, s []byte) []byte { return append(appendUint(b, uint64(len(s))), s...) }

func appendString(b []byte, s string) []byte { return append(appendUint(b, uint64(len(s))), s...) }

// appendAddrPort appends a: a length (0 for none, 4 or 16), the address, the port.
func appendAddrPort(b []byte, a netip.AddrPort) []byte {
	if !a.IsValid() {
		return append(b, 0)
	}
	ip := a.Addr().AsSlice()
	b = append(b, byte(len(ip)))
	b = append(b, ip...)
	return binary.BigEndian.AppendUint16(b, a.Port())
}

// decoder reads a payload; its first error sticks and every later read returns zero.
type decoder struct {
	b   []byte
	err error
}

var errTruncated = errors.New("payload truncated")

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errTruncated
		return 0
	}
	if n > 1 && d.b[n-1] == 0 {
		// A varint padded with a zero group: one number, one encoding.
		d.err = errors.New("number not minimally encoded")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int64() int64 {
	v := d.uint()
	if v > 1<<63-1 && d.err == nil {
		d.err = errors.New("counter out of range")
	}
	return int64(v)
}

func (d *decoder) int() int {
	v := d.uint()
	if v > 1<<31-1 {
		if d.err == nil {
			d.err = errors.New("number out of range")
		}
		return 0
	}
	return int(v)
}

// count reads a number of items of at least each bytes, which the rest must hold.
func (d *decoder) count(each int) int {
	n := d.int()
	if d.err != nil {
		return 0 // never a size from a message that failed to decode (FuzzDecode found one)
	}
	if n > len(d.b)/each {
		d.err = errTruncated
		return 0
	}
	return n
}

func (d *decoder) bytes() []byte {
	n := d.count(1)
	if d.err != nil {
		return nil
	}
	if n == 0 {
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) addrPort() netip.AddrPort {
	if d.err != nil {
		return netip.AddrPort{}
	}
	if len(d.b) < 1 {
		d.err = errTruncated
		return netip.AddrPort{}
	}
	n := int(d.b[0])
	if n == 0 {
		d.b = d.b[1:]
		return netip.AddrPort{}
	}
	if n != 4 && n != 16 {
		d.err = fmt.Errorf("address of %d bytes", n)
		return netip.AddrPort{}
	}
	if len(d.b) < 1+n+2 {
		d.err = errTruncated
		return netip.AddrPort{}
	}
	ip, _ := netip.AddrFromSlice(d.b[1 : 1+n])
	port := binary.BigEndian.Uint16(d.b[1+n:])
	d.b = d.b[1+n+2:]
	return netip.AddrPortFrom(ip, port)
}
