package e2e

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// tryTLSFrom is tryTLS from the loopback address src.
func tryTLSFrom(src string, port int, cfg *tls.Config) (*session, error) {
	c, err := from(src).Dial("tcp", addr(port))
	if err != nil {
		return nil, err
	}
	return sessionOn(c, cfg)
}

// dialTLSFrom is dialTLS from the loopback address src.
func dialTLSFrom(t *testing.T, src string, port int, cfg *tls.Config) *session {
	t.Helper()
	s, err := tryTLSFrom(src, port, cfg)
	if err != nil {
		t.Fatalf("TLS from %s to :%d with SNI %q: %v", src, port, cfg.ServerName, err)
	}
	s.t = t
	t.Cleanup(func() { s.raw.Close() })
	return s
}

// refusedFrom expects a TLS connection from src with cfg closed without a byte.
func refusedFrom(t *testing.T, src string, port int, cfg *tls.Config) {
	t.Helper()
	c, err := from(src).Dial("tcp", addr(port))
	if err != nil {
		t.Fatalf("connect from %s: %v", src, err)
	}
	defer c.Close()
	dbTLSNoBytes(t, c, cfg)
}

// Limits through the real binary: a route's cap (the N+1st connection at once refused, one
// admitted again when another ends), a per-client cap (one client refused, another not),
// and a per-client rate (a burst admitted, the next refused, admitted again after refill).
func TestAccessLimits(t *testing.T) {
	t.Parallel()
	needBinary(t)
	ca := testutil.NewCA(t)
	port := testutil.FreePort(t)
	names := []string{"capped.acl.test", "perclient.acl.test", "rate.acl.test"}
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("capped", "tls", names[:1], to("svc")),
		routeYAML("perclient", "tls", names[1:2], to("svc")),
		routeYAML("rate", "tls", names[2:], to("svc")),
		serviceYAML("svc", startEcho(t, "echo", ca.Issue(t, names...))),
		accessPolicyYAML("capped", "TLSRoute", "capped", "", "  maxConnections: 3"),
		accessPolicyYAML("perclient", "TLSRoute", "perclient", "", "  perClient: {maxConnections: 2}"),
		// One a second, three at once.
		accessPolicyYAML("rate", "TLSRoute", "rate", "", "  perClient: {connectionsPerMinute: 60, burst: 3}"),
	))
	g := startGateway(t, dir)
	cfg := func(i int) *tls.Config { return ca.ClientConfig(names[i]) }

	t.Run("route cap: the 4th at once refused, admitted once one ends", func(t *testing.T) {
		var held []*session
		for i := range 3 {
			held = append(held, dialTLSFrom(t, fmt.Sprintf("127.0.1.%d", i+1), port, cfg(0)))
		}
		before := g.rejectedOn(t, "route_connection_limit", "TLSRoute/default/capped")
		refusedFrom(t, "127.0.1.9", port, cfg(0))
		g.waitRejectedOn(t, "route_connection_limit", "TLSRoute/default/capped", before+1)
		g.waitRefusalLogged(t, "127.0.1.9", "route_connection_limit", "default/capped", "TLSRoute/default/capped")
		for _, s := range held[1:] {
			s.roundTrip("still here")
		}
		held[0].finish()
		held[0].raw.Close()
		// The gateway counts the end once its relay saw both directions close.
		deadline := time.Now().Add(waitTimeout)
		for {
			s, err := tryTLSFrom("127.0.1.9", port, cfg(0))
			if err == nil {
				s.raw.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still refused %v after a connection ended: %v", waitTimeout, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("per-client cap: 127.0.2.1's 3rd refused, 127.0.2.2 admitted", func(t *testing.T) {
		dialTLSFrom(t, "127.0.2.1", port, cfg(1))
		dialTLSFrom(t, "127.0.2.1", port, cfg(1))
		before := g.rejectedOn(t, "client_connection_limit", "TLSRoute/default/perclient")
		refusedFrom(t, "127.0.2.1", port, cfg(1))
		g.waitRejectedOn(t, "client_connection_limit", "TLSRoute/default/perclient", before+1)
		dialTLSFrom(t, "127.0.2.2", port, cfg(1)).roundTrip("another client")
	})
	t.Run("per-client rate: a burst of 3, the 4th refused, one more a second later", func(t *testing.T) {
		for range 3 {
			s := dialTLSFrom(t, "127.0.3.1", port, cfg(2))
			s.raw.Close()
		}
		before := g.rejectedOn(t, "client_rate_limited", "TLSRoute/default/rate")
		refusedFrom(t, "127.0.3.1", port, cfg(2))
		g.waitRejectedOn(t, "client_rate_limited", "TLSRoute/default/rate", before+1)
		dialTLSFrom(t, "127.0.3.2", port, cfg(2)).raw.Close() // another client has its own bucket
		time.Sleep(1100 * time.Millisecond)
		dialTLSFrom(t, "127.0.3.1", port, cfg(2)).roundTrip("refilled")
		refusedFrom(t, "127.0.3.1", port, cfg(2))
	})
}

// A policy change never cuts a held connection; new ones follow the new policy from the
// reload on, their counts including the held ones. An invalid policy is rejected naming
// the file, the object and the field, and the last good configuration keeps serving.
func TestAccessPolicyReload(t *testing.T) {
	t.Parallel()
	needBinary(t)
	ca := testutil.NewCA(t)
	port := testutil.FreePort(t)
	const name = "db.acl.test"
	dir := configDir(t)
	base := docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("db", "tls", []string{name}, to("svc")),
		serviceYAML("svc", startEcho(t, "echo", ca.Issue(t, name))),
	)
	writeFile(t, dir, "gateway.yaml", base)
	writeFile(t, dir, "access.yaml", accessPolicyYAML("db", "TLSRoute", "db", "", "  sourceRanges: [127.0.0.0/8]\n  maxConnections: 5"))
	g := startGateway(t, dir)
	cfg := ca.ClientConfig(name)
	held := dialTLSFrom(t, "127.0.4.5", port, cfg)
	held.roundTrip("before")

	gen := g.generation(t)
	writeFile(t, dir, "access.yaml", accessPolicyYAML("db", "TLSRoute", "db", "", "  sourceRanges: [127.0.0.1/32]\n  maxConnections: 1"))
	g.waitGeneration(t, gen)
	held.roundTrip("after the reload, from an address the policy no longer allows")
	refusedFrom(t, "127.0.4.5", port, cfg)
	g.waitRefusalLogged(t, "127.0.4.5", "client_not_allowed", "default/db", "TLSRoute/default/db")
	// 127.0.0.1 is allowed, but the held connection fills the new cap of 1.
	refusedFrom(t, "127.0.0.1", port, cfg)
	g.waitRefusalLogged(t, "127.0.0.1", "route_connection_limit", "default/db", "TLSRoute/default/db")
	held.finish()
	held.raw.Close()
	deadline := time.Now().Add(waitTimeout)
	for {
		s, err := tryTLSFrom("127.0.0.1", port, cfg)
		if err == nil {
			s.raw.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("127.0.0.1 still refused after the held connection ended: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	t.Run("an invalid policy keeps the last good one serving", func(t *testing.T) {
		gen := g.generation(t)
		writeFile(t, dir, "access.yaml", accessPolicyYAML("db", "TLSRoute", "db", "", "  sourceRanges: [127.0.0.1]"))
		rec := g.waitLog(t, "the rejected reload", 1, func(rec map[string]any, raw string) bool {
			return rec["msg"] == "configuration rejected; still serving the previous one" && strings.Contains(raw, "spec.sourceRanges")
		})
		msg, _ := rec["error"].(string)
		for _, want := range []string{"access.yaml", "AccessPolicy default/db", "spec.sourceRanges", "must be CIDRs"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not name %q", msg, want)
			}
		}
		if g.generation(t) != gen {
			t.Fatal("the generation moved on an invalid policy")
		}
		s := dialTLSFrom(t, "127.0.0.1", port, cfg)
		s.roundTrip("the last good configuration")
		refusedFrom(t, "127.0.4.5", port, cfg)
	})
}
