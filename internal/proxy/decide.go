package proxy

import (
	"errors"
	"net/netip"
	"time"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/clienthello"
	"github.com/snigate/snigate/internal/pgwire"
	"github.com/snigate/snigate/internal/proxyproto"
	"github.com/snigate/snigate/internal/snapshot"
)

// decisionKind is what decide made of a connection.
type decisionKind uint8

const (
	// kindUndecided is the zero value: no decision (decide asked for more bytes). Nothing
	// acts on it, so a decision forgotten on some path cannot route a connection.
	kindUndecided decisionKind = iota
	// kindReject: close the connection, writing nothing but decision.reply, and count
	// decision.reason.
	kindReject
	// kindPassthrough: relay the untouched TLS stream to a backend of decision.route (after
	// PostgreSQL's SSLRequest exchange toward it when decision.pgBridge).
	kindPassthrough
	// kindTCP: relay the whole connection to a backend of the TCP listener's route.
	kindTCP
	// kindTerminate: complete the TLS handshake with the listener's certificate, relay the
	// plaintext to a backend of decision.route.
	kindTerminate
	// kindHTTPS: complete the TLS handshake and serve HTTP (routing is per request).
	kindHTTPS
	// kindHTTP: serve plain HTTP.
	kindHTTP
	// kindPGNegotiate: a PostgreSQL SSLRequest or GSSENCRequest. The caller writes
	// decision.reply ('S' or 'N'), drops the first decision.consumed bytes, and decides
	// again on what follows in phase decision.next.
	kindPGNegotiate
	// kindPGCancel: a plaintext PostgreSQL CancelRequest, the first decision.consumed bytes:
	// forward it to the endpoints the client address holds PostgreSQL connections to.
	kindPGCancel
)

var kindNames = [...]string{
	kindUndecided:   "undecided",
	kindReject:      "reject",
	kindPassthrough: "passthrough",
	kindTCP:         "tcp",
	kindTerminate:   "terminate",
	kindHTTPS:       "https",
	kindHTTP:        "http",
	kindPGNegotiate: "pg_negotiate",
	kindPGCancel:    "pg_cancel",
}

func (k decisionKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// pgPhase is where a connection stands in PostgreSQL's negotiation: it changes what the
// next bytes may be.
type pgPhase uint8

const (
	// pgFirst: nothing answered yet; a PostgreSQL request or a ClientHello may come.
	pgFirst pgPhase = iota
	// pgAfterSSLRequest: the SSLRequest was answered 'S'; only a ClientHello may follow,
	// and its backend must get the SSLRequest exchange too.
	pgAfterSSLRequest
)

// The replies decide asks the caller to write. Package variables: a decision carries no
// allocation.
var (
	replySSLAccept    = []byte{pgwire.SSLAccept}
	replyGSSENCReject = []byte{pgwire.GSSENCReject}
)

// preambleState is what decide needs besides the port and the bytes: the size cap, the
// PostgreSQL phase, and a parser whose progress through a ClientHello spread over several
// records saves re-walking them when more bytes come (the result does not depend on it:
// see clienthello.Parser.Parse). The caller owns it and moves phase on as the decisions
// say (kindPGNegotiate).
type preambleState struct {
	// maxBytes caps the preamble: Options.HelloMaxBytes.
	maxBytes int
	phase    pgPhase
	// parser keeps its default MaxLen: a ClientHello that announces more than that is
	// malformed_hello, one that only does not fit maxBytes is hello_too_large (decide), as
	// they have always been counted.
	parser clienthello.Parser
	// peer is the address the connection came from (TCP), which a port's ListenerPolicy
	// must trust for a PROXY header to be read.
	peer netip.Addr
	// proxyDone: the PROXY header phase is over (the header was consumed and the caller
	// dropped its bytes), so pre starts with the client's own bytes.
	proxyDone bool
	// client is the address the AccessPolicies check: the TCP peer's, or the one a trusted
	// PROXY header gave (decideProxy sets it for the bytes after the header).
	client netip.Addr
	// at is when the connection was accepted: the time its per-client rate is taken at.
	at time.Time
	// access holds the data plane's counters of the AccessPolicies; nil checks ranges only
	// (and refuses a connection a limit would count: nothing could count it).
	access *access.Limiter
}

// decision is what decide made of a connection's first bytes: every connection's fate,
// whoever acts on it (the relay's loop for passthrough and TCP, a goroutine for the rest).
// It is a plain value: it holds no pointer into the bytes it was decided from or into the
// preambleState, so keeping it costs no allocation and cannot alias a buffer that is reused.
type decision struct {
	kind decisionKind
	// reason, with kindReject.
	reason outcome
	// negotiation is the connection's negotiation label as far as the bytes tell: set on
	// every decision, the undecided ones too (a timeout in the middle of a CancelRequest
	// counts as postgres-cancel).
	negotiation negotiation
	// listener and route the connection goes to: kindPassthrough, kindTerminate, kindTCP
	// (route is the TCP listener's one), kindHTTPS (listener only).
	listener *snapshot.Listener
	route    *snapshot.Route
	// pgBridge, with kindPassthrough: the client negotiated TLS the PostgreSQL way
	// (SSLRequest, or direct TLS with ALPN "postgresql"), so the backend side must do
	// PostgreSQL's SSLRequest exchange before the ClientHello is written (package pgwire).
	pgBridge bool
	// reply is what the caller writes to the client before acting: 'S' or 'N' for
	// kindPGNegotiate, the ErrorResponse of postgres_plaintext_refused; nil otherwise. The
	// other rejects write nothing at all.
	reply []byte
	// consumed is the bytes the PostgreSQL packet took, with kindPGNegotiate and
	// kindPGCancel.
	consumed int
	// next is the phase to decide the bytes after the packet in, with kindPGNegotiate.
	next pgPhase
	// skip is the length of the PROXY protocol header pre began with (a ListenerPolicy's
	// trusted load balancer), source the client's address it carried (invalid for a LOCAL
	// header): the caller drops those bytes and takes that address as the client's. The
	// rest of the decision is about the bytes after it (consumed counts the header too).
	skip   int
	source netip.AddrPort
	// hold is what an admitted connection counts against its AccessPolicies' limits: the
	// caller takes it (conn.takeHold) as soon as the decision is final, and gives it back
	// when the connection ends. policy, with an access reject, is the policy that refused.
	hold   access.Hold
	policy *access.Policy
	// The normalized SNI (lower case, no trailing dot), once the ClientHello had a valid
	// one: see sni.
	sniLen uint8
	sniBuf [snapshot.MaxHostnameLen]byte
}

// sni is the normalized SNI of the ClientHello, nil when there was none (or no ClientHello).
// It aliases d.
func (d *decision) sni() []byte {
	if d.sniLen == 0 {
		return nil
	}
	return d.sniBuf[:d.sniLen]
}

// decide is the routing decision of every connection: given the port it came to, the bytes
// it sent so far (after any PostgreSQL requests already answered) and st, it says what the
// connection is, or more=true when it cannot tell yet (read more and call again with every
// byte so far). It does no I/O and depends on nothing else, so the relay's loops and the
// goroutine path cannot disagree, and it does not allocate for a passthrough ClientHello.
//
// It fails closed: a TLS port's connection without an SNI, with an SNI no listener and route
// serves, with bytes that are neither TLS nor a PostgreSQL request, with a malformed
// ClientHello, or that needs more than st.maxBytes bytes to be decided is rejected, and no
// reject but postgres_plaintext_refused writes a byte.
//
// Once the listener and route are known, and before anything is dialed, the connection's
// client (st.client) must pass every AccessPolicy on its path (admit): the listener's, then
// the route's. A refused client is rejected like an unknown SNI, without a byte, so it
// learns nothing of the hostname; an admitted one holds its counts in the decision.
//
// port must not be nil: a connection to a port that left the snapshot is the caller's to
// drop.
func decide(port *snapshot.Port, pre []byte, st *preambleState) (d decision, more bool) {
	if in := port.ProxyIn; in != nil && !st.proxyDone {
		return decideProxy(port, in, pre, st)
	}
	return decideClient(port, pre, st)
}

// decideProxy is decide on a port with a ListenerPolicy: a PROXY header first, from a
// trusted address only, then the client's bytes as ever. The header needs no answer, so
// the bytes after it are decided in the same call. A TCP port's untrusted peers go on at
// once, unread: their protocol may have the server speak first, and a header they send is
// only payload to the backend, which reads snigate's own header (if any) first.
func decideProxy(port *snapshot.Port, in *snapshot.InboundProxy, pre []byte, st *preambleState) (d decision, more bool) {
	d.negotiation = negTLS
	if port.Protocol == snapshot.ProtocolTCP {
		d.negotiation = negTCP
	}
	trusted := in.Trusts(st.peer)
	if !trusted && port.Protocol == snapshot.ProtocolTCP {
		return decideClient(port, pre, st)
	}
	header, sure := proxyproto.Detect(pre)
	switch {
	case !sure:
		return d, true
	case header && !trusted:
		// A client must not choose the address it is logged, limited and authorized as.
		return d, d.reject(reasonProxyUntrusted)
	case !header && trusted && in.Required:
		return d, d.reject(reasonProxyRequired)
	case !header:
		return decideClient(port, pre, st)
	}
	n, src, err := proxyproto.Parse(pre)
	switch {
	case err != nil:
		return d, d.reject(reasonProxyMalformed)
	case n == 0:
		return d, true
	}
	sub := *st
	sub.proxyDone = true
	if src.IsValid() {
		sub.client = src.Addr() // a LOCAL header (the balancer's own) keeps the balancer's
	}
	d, more = decideClient(port, pre[n:], &sub)
	st.parser = sub.parser
	if more {
		return d, true // nothing is decided yet, the header's length neither
	}
	d.skip, d.source = n, src
	if d.kind == kindPGNegotiate || d.kind == kindPGCancel {
		d.consumed += n
	}
	return d, more
}

// decideClient is decide on the client's own bytes (after any PROXY header).
func decideClient(port *snapshot.Port, pre []byte, st *preambleState) (d decision, more bool) {
	switch port.Protocol {
	case snapshot.ProtocolTCP:
		d = decision{kind: kindTCP, negotiation: negTCP, listener: port.TCP, route: port.TCP.Route}
		return d, d.admit(st, port.TCP.Access, port.TCP.Route)
	case snapshot.ProtocolHTTP:
		return decision{kind: kindHTTP, negotiation: negHTTP}, false
	}
	d.negotiation = negTLS
	if st.phase == pgAfterSSLRequest {
		d.negotiation = negPostgres
	}
	held := len(pre)
	if len(pre) > st.maxBytes {
		// The decision must come within the cap; what follows a complete ClientHello (early
		// data, a ChangeCipherSpec) goes along without counting. The relay reads up to its
		// buffer, past a smaller cap.
		pre = pre[:st.maxBytes]
	}
	if len(pre) == 0 {
		return d, true
	}
	// The helpers fill d in place: a decision is a few hundred bytes (the SNI), not worth
	// copying on every call.
	if st.phase == pgFirst && pre[0] != 0x16 {
		more = decidePG(pre, held, &d)
	} else {
		more = decideHello(port, pre, st, &d)
	}
	if more && len(pre) >= st.maxBytes {
		return d, d.reject(reasonTooLarge)
	}
	return d, more
}

// decideHello decides on a TLS ClientHello.
func decideHello(port *snapshot.Port, pre []byte, st *preambleState, d *decision) (more bool) {
	var hello clienthello.Hello
	err := st.parser.Parse(pre, &hello)
	switch {
	case err == nil:
	case err == clienthello.ErrIncomplete:
		return true
	case errors.Is(err, clienthello.ErrNotTLS):
		return d.reject(reasonNotTLS)
	default: // ErrMalformed, ErrNotClientHello, ErrTooLarge
		return d.reject(reasonMalformed)
	}
	pgBridge := st.phase == pgAfterSSLRequest
	if !pgBridge && hello.HasALPN("postgresql") {
		// Direct TLS PostgreSQL (sslnegotiation=direct): the backend may need the
		// SSLRequest bridge, whatever the listener turns out to be.
		d.negotiation, pgBridge = negPostgresDirect, true
	}
	sni, ok := snapshot.NormalizeSNI(d.sniBuf[:], hello.SNI)
	if !ok {
		return d.reject(reasonNoSNI)
	}
	d.sniLen = uint8(len(sni))
	l, r := port.Lookup(sni)
	switch {
	case l != nil && l.HTTP != nil:
		// An HTTPS listener: HTTP routing happens per request, by the Host header.
		d.kind, d.negotiation, d.listener = kindHTTPS, negHTTPS, l
	case l == nil || r == nil:
		return d.reject(reasonUnknownSNI)
	case l.Mode == snapshot.ModeTerminate:
		d.kind, d.listener, d.route = kindTerminate, l, r
	default:
		d.kind, d.listener, d.route, d.pgBridge = kindPassthrough, l, r, pgBridge
	}
	return d.admit(st, l.Access, r)
}

// admit checks st.client against the AccessPolicies of the path the decision chose (the
// listener's, then route's): a reject naming the policy that refused, or the counts the
// connection holds in d.hold. It returns false (decided), for the helpers' returns.
func (d *decision) admit(st *preambleState, listener []*access.Policy, r *snapshot.Route) bool {
	var route []*access.Policy
	if r != nil {
		route = r.Access
	}
	if len(listener) == 0 && len(route) == 0 {
		return false
	}
	v := access.Admitted
	if st.access != nil {
		v, d.policy = st.access.Admit(st.client, st.at, listener, route, &d.hold)
	} else {
		v, d.policy = rangesOnly(st.client, listener, route)
	}
	switch v {
	case access.Admitted:
		return false
	case access.RouteLimit:
		return d.reject(reasonRouteLimit)
	case access.ClientLimit:
		return d.reject(reasonClientLimit)
	case access.RateLimited:
		return d.reject(reasonRateLimited)
	default:
		return d.reject(reasonNotAllowed)
	}
}

// rangesOnly is the check without a Limiter: ranges as Admit checks them, and a limit
// refused, since nothing could count it.
func rangesOnly(client netip.Addr, listener, route []*access.Policy) (access.Verdict, *access.Policy) {
	for _, path := range [2][]*access.Policy{listener, route} {
		for _, p := range path {
			if !p.Allows(client) {
				return access.NotAllowed, p
			}
		}
	}
	for _, path := range [2][]*access.Policy{listener, route} {
		for _, p := range path {
			if p.Limited() {
				return access.RouteLimit, p
			}
		}
	}
	return access.Admitted, nil
}

// decidePG decides on the first bytes of a TLS port's connection that are not a TLS record:
// one of PostgreSQL's first packets, or garbage. held is how many bytes there are in all,
// pre being cut at the cap: a byte after a request is refused wherever it is.
func decidePG(pre []byte, held int, d *decision) (more bool) {
	kind, size, err := pgwire.Classify(pre)
	switch {
	case err == pgwire.ErrIncomplete:
		return true
	case err != nil:
		if pre[0] != 0 {
			return d.reject(reasonNotTLS)
		}
		return d.reject(reasonPGBadPacket)
	}
	switch kind {
	case pgwire.KindSSLRequest:
		d.negotiation = negPostgres
		if held > size {
			// Bytes sent ahead of the TLS handshake would reach the backend as if they came
			// from inside TLS (CVE-2021-23214 class).
			return d.reject(reasonPGSmuggled)
		}
		d.kind, d.reply, d.consumed, d.next = kindPGNegotiate, replySSLAccept, size, pgAfterSSLRequest
	case pgwire.KindGSSENCRequest:
		// Refuse GSS encryption ourselves: the client goes on with an SSLRequest on the same
		// connection, and may already have sent it.
		d.kind, d.reply, d.consumed, d.next = kindPGNegotiate, replyGSSENCReject, size, pgFirst
	case pgwire.KindStartup:
		d.negotiation = negPostgresPlaintext
		d.reject(reasonPGPlaintext)
		d.reply = pgPlaintextError
	case pgwire.KindCancelRequest:
		d.negotiation = negPostgresCancel
		if len(pre) < size {
			return true
		}
		if held > size {
			return d.reject(reasonPGBadPacket)
		}
		d.kind, d.consumed = kindPGCancel, size
	default: // KindTLS starts with 0x16, which decide parses as a ClientHello
		return d.reject(reasonNotTLS)
	}
	return false
}

// reject turns d into a rejection for reason, keeping its negotiation and SNI (they are
// logged with it). It returns false (decided), for the helpers' returns.
func (d *decision) reject(reason outcome) bool {
	d.kind, d.reason = kindReject, reason
	return false
}
