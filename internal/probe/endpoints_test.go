package probe

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
	snitest "github.com/snigate/snigate/internal/testutil"
)

// The verdict of a route over several endpoints, as a pure combination: Verified only when
// every endpoint verifies; one bad endpoint of three makes it that endpoint's reason, with
// a message naming it and its serial (and the verified ones with theirs); one endpoint alone
// is that endpoint's verdict unchanged.
func TestCombine(t *testing.T) {
	ok := func(addr, serial string) EndpointResult {
		return EndpointResult{Address: addr, Result: Result{Reason: v1alpha1.ReasonVerified, Message: "the certificate verifies",
			Certificate: &v1alpha1.ServerCertificate{Serial: serial}}}
	}
	bad := EndpointResult{Address: "10.0.0.2:9093", Result: Result{Reason: v1alpha1.ReasonMissingDNSNames,
		Message: "the certificate lacks events.kafka.example.com", Certificate: &v1alpha1.ServerCertificate{Serial: "0BAD"}}}

	all := Combine([]EndpointResult{ok("10.0.0.1:9093", "01"), ok("10.0.0.2:9093", "02"), ok("10.0.0.3:9093", "03")}, 3)
	if all.Reason != v1alpha1.ReasonVerified || all.Certificate.Serial != "01" || len(all.Endpoints) != 3 ||
		!strings.Contains(all.Message, "all 3 endpoints verify") || !strings.Contains(all.Message, "10.0.0.3:9093 (serial 03)") {
		t.Errorf("every endpoint verifies: %+v", all)
	}

	one := Combine([]EndpointResult{ok("10.0.0.1:9093", "01"), bad, ok("10.0.0.3:9093", "03")}, 3)
	if one.Reason != v1alpha1.ReasonMissingDNSNames || one.Certificate.Serial != "0BAD" {
		t.Errorf("one bad endpoint: reason %s, certificate %+v; want MissingDNSNames and its certificate", one.Reason, one.Certificate)
	}
	for _, want := range []string{"1 of 3 endpoints do not verify", "10.0.0.2:9093 (serial 0BAD): MissingDNSNames: the certificate lacks events.kafka.example.com",
		"verified: 10.0.0.1:9093 (serial 01), 10.0.0.3:9093 (serial 03)"} {
		if !strings.Contains(one.Message, want) {
			t.Errorf("message %q lacks %q", one.Message, want)
		}
	}

	unreachable := EndpointResult{Address: "10.0.0.9:9093", Result: Result{Reason: v1alpha1.ReasonUnreachable, Message: "connection refused"}}
	if r := Combine([]EndpointResult{ok("10.0.0.1:9093", "01"), unreachable}, 2); r.Reason != v1alpha1.ReasonUnreachable ||
		!strings.Contains(r.Message, "10.0.0.9:9093 (no certificate): Unreachable") {
		t.Errorf("an unreachable endpoint: %+v", r)
	}

	if single := Combine([]EndpointResult{bad}, 1); single.Reason != bad.Reason || single.Message != bad.Message {
		t.Errorf("one endpoint: %+v, want its own verdict", single)
	}
	if r := Combine([]EndpointResult{ok("10.0.0.1:9093", "01")}, 70); !strings.Contains(r.Message, "69 more ready endpoints not probed") {
		t.Errorf("beyond MaxEndpoints: %q", r.Message)
	}
}

// Three real TLS endpoints behind one route, the second serving a certificate without the
// route's name: the route is MissingDNSNames naming that endpoint and its serial, every
// endpoint is listed with the serial it served, and the connections were rate-limited.
func TestProbeEndpoints(t *testing.T) {
	ca := snitest.NewCA(t)
	const name = "events.kafka.example.com"
	good1, good3 := ca.Issue(t, name), ca.Issue(t, name)
	wrong := ca.Issue(t, "broker-1.events.kafka.example.com")
	b1 := startBackend(t, directTLS(tlsConfig(good1.TLS)))
	b2 := startBackend(t, directTLS(tlsConfig(wrong.TLS)))
	b3 := startBackend(t, directTLS(tlsConfig(good3.TLS)))
	target := Target{Endpoints: []string{b1.addr, b2.addr, b3.addr}, Start: engine.DirectTLS, SNI: name, Hostnames: []string{name}, Roots: ca.Pool()}
	slots := 0
	slot := func(context.Context) error { slots++; return nil }
	r := ProbeEndpoints(context.Background(), target, time.Now(), 5*time.Second, slot)
	if r.Reason != v1alpha1.ReasonMissingDNSNames || !strings.Contains(r.Message, b2.addr+" (serial "+wrong.SerialHex()+")") {
		t.Fatalf("one bad endpoint of three: %s: %s", r.Reason, r.Message)
	}
	if slots != 3 {
		t.Errorf("%d rate slots taken for 3 connections", slots)
	}
	want := map[string]string{b1.addr: good1.SerialHex(), b2.addr: wrong.SerialHex(), b3.addr: good3.SerialHex()}
	if len(r.Endpoints) != 3 {
		t.Fatalf("%d endpoints in the result", len(r.Endpoints))
	}
	for _, e := range r.Endpoints {
		if e.Certificate == nil || e.Certificate.Serial != want[e.Address] {
			t.Errorf("endpoint %s: certificate %+v, want serial %s", e.Address, e.Certificate, want[e.Address])
		}
	}
	if got, _ := Expiry(r); got.IsZero() {
		t.Error("no expiry from three certificates")
	}
}

// A route whose endpoint accepts and never answers holds one worker for its Timeout, not the
// runner: another route's verdict comes meanwhile.
func TestRunnerSilentEndpointBlocksNothing(t *testing.T) {
	ca := snitest.NewCA(t)
	const name = "db.example.test"
	silent := startBackend(t, func(c net.Conn) seen { _, _ = io.Copy(io.Discard, c); return seen{} })
	good := startBackend(t, directTLS(tlsConfig(ca.Issue(t, name).TLS)))
	changed := make(chan struct{}, 16)
	r := NewRunner(RunnerOptions{Interval: time.Hour, Retry: time.Hour, Timeout: 3 * time.Second, OnChange: func() { changed <- struct{}{} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	silentKey, goodKey := Key{"acme", "stuck"}, Key{"acme", "orders"}
	start := time.Now()
	r.Set(map[Key]Target{
		silentKey: {Endpoints: []string{silent.addr}, Start: engine.DirectTLS, SNI: name, Roots: ca.Pool()},
		goodKey:   {Endpoints: []string{good.addr}, Start: engine.DirectTLS, SNI: name, Roots: ca.Pool()},
	})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no verdict")
	}
	if got, ok := r.Results()[goodKey]; !ok || got.Reason != v1alpha1.ReasonVerified {
		t.Fatalf("first verdict after %v: the good route's is %+v (present %v); want Verified before the silent one times out", time.Since(start), got, ok)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("the good route's verdict took %v: it waited for the silent endpoint", elapsed)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no verdict for the silent route")
	}
	if got := r.Results()[silentKey]; got.Reason != v1alpha1.ReasonUnreachable {
		t.Errorf("silent endpoint: %+v", got)
	}
}

// A server that speaks first where the engine's clients start TLS gets the fix the engine
// table gives, not "turn TLS on": a NATS server without handshake_first (TLS on, its INFO
// line first) is told handshake_first; a MySQL greeting on a direct-TLS exposure is told
// to use a TCP listener. A plaintext server that answers is still told to turn TLS on.
func TestSpeaksFirstHints(t *testing.T) {
	speakFirst := func(greeting []byte) func(net.Conn) seen {
		return func(conn net.Conn) seen {
			_, err := conn.Write(greeting)
			_, _ = io.Copy(io.Discard, conn)
			return seen{err: err}
		}
	}
	for _, tc := range []struct {
		name     string
		greeting []byte
		want     []string
	}{
		{"nats", []byte("INFO {\"server_id\":\"NDX\",\"version\":\"2.12.1\",\"tls_required\":true,\"max_payload\":1048576}\r\n"), []string{"nats greeting", "handshake_first: true"}},
		{"mariadb", appendGreeting(nil, "10.11.6-MariaDB-0+deb12u1", mysqlCaps), []string{"MySQL or MariaDB greeting", "spec.port (a TCP listener"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBackend(t, speakFirst(tc.greeting))
			r := probe(t, Target{Address: b.addr, Start: engine.DirectTLS, SNI: "db.example.test"})
			if r.Reason != v1alpha1.ReasonNotTLS {
				t.Errorf("reason %s", r.Reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Message, w) {
					t.Errorf("message %q lacks %q", r.Message, w)
				}
			}
			if strings.Contains(r.Message, "turn TLS on") {
				t.Errorf("message %q names the wrong fix", r.Message)
			}
		})
	}
	b := startBackend(t, writeAndClose("-ERR unknown command\r\n"))
	if r := probe(t, Target{Address: b.addr, Start: engine.DirectTLS, SNI: "db.example.test"}); !strings.Contains(r.Message, "turn TLS on") {
		t.Errorf("a plaintext answer: %q", r.Message)
	}
}

// The rate is one for every connection of every worker: 21 slots at 100 a second take at
// least 200 ms however many goroutines ask at once (10 000 exposures set at once are spread
// over 10 000/MaxRate seconds, not opened in a burst).
func TestSlotSpreadsConnections(t *testing.T) {
	r := NewRunner(RunnerOptions{MaxRate: 100})
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for range 7 {
				if err := r.slot(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond {
		t.Errorf("21 connections at 100 a second started within %v", elapsed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 {
		_ = r.slot(context.Background()) // reserve ahead: the next caller must wait
	}
	if err := r.slot(ctx); err == nil {
		t.Error("a cancelled wait for a slot returned no error")
	}
}
