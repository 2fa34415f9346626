package probe

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
)

// DefaultTimeout bounds a probe whose context has no deadline: a backend that accepts the
// connection and never answers must not hold a probe forever.
const DefaultTimeout = 10 * time.Second

// Target is what to probe and what its certificate must prove.
type Target struct {
	// Address is host:port of the backend (the Service the exposure's backendRef names):
	// what Probe connects to.
	Address string
	// Endpoints are every ready endpoint of the route's Service, in the order the data
	// plane dials them: the Runner probes each (ProbeEndpoints), and Address alone when
	// there are none.
	Endpoints []string
	// Start is how the engine's clients begin TLS (engine.Lookup(...).Start).
	Start engine.Start
	// SNI is sent in the ClientHello: the first external hostname, as a client of the gateway
	// sends it. An IP literal sends no SNI (RFC 6066). Empty: Hostnames[0].
	SNI string
	// Hostnames are every external hostname the certificate must name. Empty: SNI alone.
	Hostnames []string
	// Roots is the trust anchor clients verify with. Nil: the chain is not checked, and
	// ServerCertificate.ChainsToTrustAnchor stays nil.
	Roots *x509.CertPool
	// Expected is the certificate the backend should serve (its certificateRef's Secret):
	// while it serves another one, the Runner probes it again soon rather than after a
	// whole Interval, so that a reissue shows in the status once the database reloads.
	// Nil: nothing known.
	Expected *x509.Certificate
}

// Result is a probe's verdict.
type Result struct {
	// Reason is one of v1alpha1.ReasonVerified, ReasonMissingDNSNames, ReasonExpired,
	// ReasonNotYetValid, ReasonUnknownAuthority, ReasonNotTLS, ReasonUnreachable.
	Reason string
	// Message says what was found and what to change, for the condition's message.
	Message string
	// Certificate describes the leaf the server presented; nil when none was read.
	Certificate *v1alpha1.ServerCertificate
	// Chain is the chain as served, leaf first (nil when none was read): which CA issued it
	// tells a CA rotation's progress.
	Chain []*x509.Certificate
	// Endpoints are each endpoint's own result, when the route's endpoints were probed
	// (ProbeEndpoints); Certificate and Chain are then the first failing endpoint's, or
	// the first endpoint's when every one verifies.
	Endpoints []EndpointResult
}

// Expiry returns the earliest NotAfter of the leaves the probe read (of every endpoint).
func Expiry(r Result) (time.Time, bool) {
	var first time.Time
	found := false
	for _, c := range r.Chains() {
		if len(c) > 0 && (!found || c[0].NotAfter.Before(first)) {
			first, found = c[0].NotAfter, true
		}
	}
	return first, found
}

// Chains are the chains every endpoint served, leaf first (the result's own when it has no
// endpoints); a nil chain stands for an endpoint that served none (AnchorsInUse: such a
// backend may still serve an old chain).
func (r Result) Chains() [][]*x509.Certificate {
	if len(r.Endpoints) == 0 {
		return [][]*x509.Certificate{r.Chain}
	}
	out := make([][]*x509.Certificate, len(r.Endpoints))
	for i, e := range r.Endpoints {
		out[i] = e.Chain
	}
	return out
}

// Probe connects to t.Address the way clients of t.Start do, reads the certificate chain and
// judges it at now (Judge). It never returns without a verdict: failures to connect are
// Unreachable or NotTLS results whose message names the cause. It returns when ctx is done,
// and after DefaultTimeout when ctx has no deadline.
func Probe(ctx context.Context, t Target, now time.Time) Result {
	if err := t.validate(); err != nil {
		return Result{Reason: v1alpha1.ReasonUnreachable, Message: err.Error()}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	chain, hsErr, fail := fetchChain(ctx, t)
	if fail != nil {
		return *fail
	}
	hostnames := t.Hostnames
	if len(hostnames) == 0 {
		hostnames = []string{t.SNI}
	}
	r := Judge(chain, hostnames, t.Roots, now)
	if hsErr != nil {
		// The certificate came, so its verdict stands; a client fails the same way only if
		// it lacks what the server asked for (typically a client certificate).
		r.Message += fmt.Sprintf("; after sending its certificate the server failed the TLS handshake: %v", hsErr)
	}
	return r
}

func (t Target) validate() error {
	if t.Address == "" {
		return errors.New("probe: the target has no address: the backend Service has no ready endpoint (or no port of that number)")
	}
	switch t.Start {
	case engine.DirectTLS, engine.PostgresSSLRequest, engine.ServerFirst:
	default:
		return fmt.Errorf("probe: cannot start TLS the way %v does", t.Start)
	}
	if t.SNI == "" && len(t.Hostnames) == 0 {
		return errors.New("probe: the target has no hostname to send as SNI and to check")
	}
	return nil
}
