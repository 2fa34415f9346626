// Package e2e holds end-to-end tests that run the real snigate binary: TestMain builds
// ./cmd/snigate once, each test writes Gateway API YAML into its own folder, starts
// `snigate serve -f DIR` on loopback ports, runs echo backends in-process (internal/echo) and
// talks to the gateway with real TLS clients, crypto/tls and openssl s_client.
//
// Run them with `go test ./e2e/ -count=1`; `-short` skips them. Everything listens and dials on
// 127.0.0.1 only.
//
// What each test relies on from the binary, beyond the Gateway API semantics (docs/conformance.md):
//   - flags: serve -f DIR, --admin ADDR, --log-format json, --hello-timeout, --hello-max-bytes,
//     --drain-timeout;
//   - admin endpoints: GET /readyz (200 once serving), GET /status (JSON with "generation",
//     bumped by every applied configuration, including one reloaded by SIGHUP), GET /metrics with
//     snigate_rejected_connections_total{reason=no_sni|unknown_sni|not_tls|hello_timeout|hello_too_large};
//   - SIGTERM: stop accepting, drain open connections up to --drain-timeout, exit 0.
package e2e
