package proxy

import "github.com/snigate/snigate/internal/relay"

// outcome is how a connection ended: the outcome label of snigate_connections_total and the
// access log, and for the connections closed without a byte (the reject reasons) also the
// reason label of snigate_rejected_connections_total. This is the one list of those values:
// dashboards and alerts match them, so a value, once shipped, never changes.
type outcome string

// Reject reasons: the connection was closed without a byte written to the client (the one
// exception, postgres_plaintext_refused, writes a PostgreSQL ErrorResponse so that the user
// reads why). decide returns the ones that follow from the bytes the client sent; the others
// are results of I/O, named where they happen.
const (
	// Decided from the client's bytes (decide).
	reasonNoSNI       outcome = "no_sni"
	reasonUnknownSNI  outcome = "unknown_sni"
	reasonNotTLS      outcome = "not_tls"
	reasonMalformed   outcome = "malformed_hello"
	reasonTooLarge    outcome = "hello_too_large"
	reasonPGPlaintext outcome = "postgres_plaintext_refused"
	reasonPGSmuggled  outcome = "postgres_bytes_after_sslrequest"
	reasonPGBadPacket outcome = "postgres_bad_packet"
	// A ListenerPolicy's PROXY header: sent from outside its trusted ranges, missing from
	// a trusted range that must send one, or not a valid header.
	reasonProxyUntrusted outcome = "proxy_header_untrusted"
	reasonProxyRequired  outcome = "proxy_header_missing"
	reasonProxyMalformed outcome = "proxy_header_malformed"
	// An AccessPolicy on the connection's path refused it (decide.admit): the client's
	// address is denied or not allowed; the target has its maxConnections open; the client
	// has its perClient.maxConnections open; the client spent its perClient rate.
	reasonNotAllowed  outcome = "client_not_allowed"
	reasonRouteLimit  outcome = "route_connection_limit"
	reasonClientLimit outcome = "client_connection_limit"
	reasonRateLimited outcome = "client_rate_limited"

	// Results of reading from and writing to the client while the preamble is read
	// (readPreamble; on the relay's loops the socket comes back to it on these).
	reasonTimeout    outcome = "hello_timeout"
	reasonClientGone outcome = "client_closed"

	// Results of picking and dialing a backend (conn.connectBackend, router.Done).
	reasonNoBackend  outcome = "no_backend"
	reasonDialFailed outcome = relay.OutcomeDialFailed

	// The port's MaxConnections (Proxy.serve), the accepted socket unusable for Go's net
	// package (conn.serveFD), the relay's loops unavailable (conn.forward).
	reasonLimit        outcome = "limit"
	reasonAcceptFailed outcome = "accept_failed"
	reasonRelayFailed  outcome = "relay_failed"

	// A plaintext CancelRequest with no PostgreSQL connection of the same client address to
	// send it to (conn.forwardCancel).
	reasonPGCancelDrop outcome = "postgres_cancel_dropped"
)

// Outcomes of connections that got further than a reject: a TLS handshake, a backend, or a
// relay.
const (
	outcomeOK outcome = "ok"
	// The terminate or HTTPS handshake failed (crypto/tls answered with an alert).
	reasonHandshake outcome = "tls_handshake_failed"
	// A PostgreSQL backend answered the SSLRequest with something other than 'S'.
	reasonBackendNoTLS outcome = "backend_refused_tls"
	// A passthrough backend's first bytes were not a TLS record (relay.Options.ExpectTLS).
	outcomeBackendNotTLS outcome = relay.OutcomeNotTLS
	// Writing the ClientHello to a PostgreSQL backend after its 'S' failed.
	outcomeBackendWriteFailed outcome = "backend_write_failed"
	// The HTTP server of the port was closed (the port left the snapshot) before it took
	// the connection.
	outcomePortClosed outcome = "port_closed"
	// The relay ended the pair: nothing moved for Options.IdleTimeout, or a drain cut it.
	outcomeIdle     outcome = relay.OutcomeIdle
	outcomeShutdown outcome = relay.OutcomeShutdown
	// A plaintext CancelRequest was sent to the endpoints its client address holds
	// PostgreSQL connections to.
	outcomePGCancelForwarded outcome = "postgres_cancel_forwarded"
)

// negotiation is how the client opened the connection: the negotiation label of
// snigate_connections_total and the access log. Like outcome, its values never change.
type negotiation string

const (
	// negNone: the connection was refused before anything was read (the port's limit).
	negNone negotiation = ""
	// negTLS: a TLS ClientHello first, or nothing decided yet on a TLS port.
	negTLS negotiation = "tls"
	// negTCP: a TCP listener's connection, relayed whatever it carries.
	negTCP negotiation = "tcp"
	// negHTTP, negHTTPS: served by the port's HTTP server, after the TLS handshake for HTTPS.
	negHTTP  negotiation = "http"
	negHTTPS negotiation = "https"
	// negPostgres: an SSLRequest, answered 'S', then the ClientHello.
	negPostgres negotiation = "postgres"
	// negPostgresDirect: a ClientHello with ALPN "postgresql" first (sslnegotiation=direct).
	negPostgresDirect negotiation = "postgres-direct"
	// negPostgresPlaintext: a plaintext StartupMessage (refused).
	negPostgresPlaintext negotiation = "postgres-plaintext"
	// negPostgresCancel: a plaintext CancelRequest.
	negPostgresCancel negotiation = "postgres-cancel"
)
