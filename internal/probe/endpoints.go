package probe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/snigate/snigate/api/v1alpha1"
)

// MaxEndpoints is how many endpoints of one route are probed (and listed in the status,
// whose list holds at most as many): a pooled Service of more is rare for a database, and
// the message says how many were left out.
const MaxEndpoints = 64

// perRoute bounds the connections one route's probe has open at once: a route over a
// pooled Service (a Kafka bootstrap, a PostgreSQL -ro service) is probed endpoint by
// endpoint without opening a connection to every replica at the same moment, and one
// silent endpoint costs its own timeout, not the others'.
const perRoute = 4

// EndpointResult is one endpoint's verdict.
type EndpointResult struct {
	// Address is the endpoint probed, host:port.
	Address string
	Result
}

// endpoints are the addresses to probe for t: t.Endpoints, or t.Address alone.
func (t Target) endpoints() []string {
	if len(t.Endpoints) > 0 {
		return t.Endpoints
	}
	if t.Address != "" {
		return []string{t.Address}
	}
	return nil
}

// ProbeEndpoints probes every endpoint of t (at most MaxEndpoints, at most perRoute at
// once) and combines their verdicts (Combine). Before each connection it calls slot, which
// returns when the connection may start (the Runner's rate limit) or ctx's error; each
// connection is bounded by timeout from its start.
func ProbeEndpoints(ctx context.Context, t Target, now time.Time, timeout time.Duration, slot func(context.Context) error) Result {
	addrs := t.endpoints()
	if len(addrs) == 0 {
		return Probe(ctx, t, now) // no address: Unreachable, saying so
	}
	total := len(addrs)
	if len(addrs) > MaxEndpoints {
		addrs = addrs[:MaxEndpoints]
	}
	results := make([]EndpointResult, len(addrs))
	sem := make(chan struct{}, perRoute)
	var wg sync.WaitGroup
	for i, a := range addrs {
		results[i].Address = a
		if slot != nil {
			if err := slot(ctx); err != nil {
				results[i].Result = Result{Reason: v1alpha1.ReasonUnreachable, Message: "not probed: " + err.Error()}
				continue
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			one := t
			one.Address, one.Endpoints = a, nil
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			results[i].Result = Probe(pctx, one, now)
		}()
	}
	wg.Wait()
	return Combine(results, total)
}

// Combine is a route's verdict from its endpoints' (in the order the data plane dials
// them), of total ready endpoints: Verified only when every endpoint verifies; otherwise
// the first failing endpoint's reason, certificate and chain, and a message naming every
// failing endpoint with the serial it served (a client is sent to any of them: one bad
// certificate behind a pooled Service fails some of its connections, not all, and a probe
// of one endpoint would miss it). With a single endpoint the verdict is that endpoint's,
// message and all.
func Combine(eps []EndpointResult, total int) Result {
	if len(eps) == 0 {
		return Result{Reason: v1alpha1.ReasonUnreachable, Message: "no endpoint was probed"}
	}
	var failing, verified []string
	first := -1
	for i, e := range eps {
		if e.Reason == v1alpha1.ReasonVerified {
			verified = append(verified, endpointName(e))
			continue
		}
		if first < 0 {
			first = i
		}
		failing = append(failing, fmt.Sprintf("%s: %s: %s", endpointName(e), e.Reason, e.Message))
	}
	pick := first
	if pick < 0 {
		pick = 0
	}
	r := eps[pick].Result
	r.Endpoints = eps
	left := ""
	if total > len(eps) {
		left = fmt.Sprintf(" (%d more ready endpoints not probed: at most %d are)", total-len(eps), MaxEndpoints)
	}
	if len(eps) == 1 {
		r.Message += left
		return r
	}
	if first < 0 {
		r.Message = fmt.Sprintf("all %d endpoints verify (%s)%s: %s", len(eps), strings.Join(verified, ", "), left, r.Message)
		return r
	}
	r.Message = fmt.Sprintf("%d of %d endpoints do not verify, so some connections fail: %s", len(failing), len(eps), strings.Join(failing, "; "))
	if len(verified) > 0 {
		r.Message += "; verified: " + strings.Join(verified, ", ")
	}
	r.Message += left
	return r
}

// endpointName is an endpoint and the serial it served.
func endpointName(e EndpointResult) string {
	if e.Certificate == nil {
		return e.Address + " (no certificate)"
	}
	return fmt.Sprintf("%s (serial %s)", e.Address, e.Certificate.Serial)
}
