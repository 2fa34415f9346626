// Package probe is the certificate probe of a DatabaseExposure: it connects to the database's
// backend the way the engine's clients do, reads the certificate chain the server presents,
// and says whether a client that connects through the gateway (which does not terminate TLS,
// so the client sees this very chain) will accept it. Its verdict is the reason and message of
// the CertificateVerified condition, and what it read fills status.serverCertificate.
//
//	e, _ := engine.Lookup(dbx.Spec.Engine)
//	r := probe.Probe(ctx, probe.Target{
//		Address:   "10.96.0.12:5432",            // the backend Service's address and port
//		Start:     e.Start,                      // how the engine's clients begin TLS
//		SNI:       hostnames[0],                 // sent as SNI, as clients of the gateway do
//		Hostnames: hostnames,                    // every name the certificate must carry
//		Roots:     anchorPool,                   // the TrustAnchor; nil without trustAnchorRef
//	}, time.Now())
//	// r.Reason: v1alpha1.ReasonVerified, ReasonMissingDNSNames, ... (condition True only for
//	// Verified); r.Message: what to change; r.Certificate: status.serverCertificate.
//	if notAfter, ok := probe.Expiry(r); ok { ... } // for an expiry metric
//
// # How it connects
//
// Probe makes one TCP connection, bounded by ctx (DefaultTimeout when ctx has no deadline).
// The Runner probes a route: ProbeEndpoints makes one such connection to each ready
// endpoint of the route's Service (Target.Endpoints, at most MaxEndpoints, a few at once)
// and Combine makes the route's verdict, Verified only when every endpoint verifies (a
// client may be sent to any of them). Each connection starts TLS the engine's way:
//
//   - engine.PostgresSSLRequest: the 8-byte SSLRequest, then exactly one byte back. 'S' starts
//     the TLS handshake; 'N' means the server refuses TLS. The probe never writes anything
//     after the SSLRequest before the answer came (protocols.md: PostgreSQL 15 hangs when
//     the ClientHello shares the SSLRequest's write).
//   - engine.DirectTLS: the TLS handshake at once.
//   - engine.ServerFirst (MySQL, MariaDB): read the server's greeting, check that it offers
//     CLIENT_SSL, send the 32-byte SSLRequest packet, then the TLS handshake.
//
// The handshake sends Target.SNI and skips crypto/tls's own verification (InsecureSkipVerify),
// so that a certificate that fails is still read and described; the probe then verifies it
// itself (Judge). After the handshake it closes: no application data is sent, and no login is
// tried. A server logs the connection as aborted before authentication. A MySQL server that
// resolves client host names may count each probe towards max_connect_errors and block the
// controller's address once that many probes came without a successful login from it in
// between (FLUSH HOSTS lifts the block). That is not verified here: the test servers run with
// skip-name-resolve on loopback, where the host cache is not used.
//
// Only the certificate served for the first hostname (the SNI) is read: the other hostnames
// are checked against that certificate. Database servers usually serve one certificate
// whatever the SNI; one that picks by SNI could serve another to a client that uses another
// hostname.
//
// # Verdicts
//
// The first that applies wins:
//
//	Unreachable       no connection, no answer in time, the server refused the probe
//	                  (a MySQL error packet), or a TLS handshake that failed before any
//	                  certificate came (an alert): nothing was learnt about the certificate
//	NotTLS            the server does not start TLS the way the engine's clients do: it
//	                  answered 'N' to SSLRequest, offers no CLIENT_SSL, answered the
//	                  ClientHello in plaintext, or closed the connection without a word
//	                  when TLS was asked for
//	Expired           the leaf (or, with Roots, a certificate of the verified chain) is past
//	NotYetValid       its NotAfter / before its NotBefore, judged at the now passed in
//	UnknownAuthority  Roots given and the served chain does not verify against them for
//	                  server authentication
//	MissingDNSNames   a hostname is not matched by the leaf's names (wildcards count, the
//	                  common name does not: clients ignore it)
//	Verified          everything above holds
//
// A server that greets first where a ClientHello was sent (NATS without handshake_first, a
// MySQL or MariaDB greeting) is NotTLS with the engine table's fix for it
// (engine.Greeting), not "turn TLS on": its TLS may well be on.
//
// A connection closed or reset right after the TLS request is NotTLS, not Unreachable: it is
// what a plaintext server does when it cannot parse a ClientHello, and the connection itself
// was established. Connection refused at dial time is Unreachable.
//
// Silence is Unreachable, with a message that names both causes: the probe cannot tell a hung
// server from a plaintext one that waits for more bytes. A Redis 7 without TLS is one of
// those: it reads the ClientHello as an inline command and waits for a newline, which it
// looks for only up to the ClientHello's first NUL byte (TestRealRedisPlaintext).
//
// A handshake that fails after the certificate arrived (say, the server demands a client
// certificate) still yields the certificate's verdict, with the failure in the message.
package probe
