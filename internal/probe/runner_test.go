package probe

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
	snitest "github.com/snigate/snigate/internal/testutil"
)

// The runner probes a new target at once and says so (OnChange), probes it again each
// Interval without saying anything when nothing changed, probes a changed target at once,
// and drops a removed target's result and metric.
func TestRunner(t *testing.T) {
	ca := snitest.NewCA(t)
	good := ca.Issue(t, "db.example.test")
	bad := ca.Issue(t, "other.example.test")
	goodBackend := startBackend(t, directTLS(tlsConfig(good.TLS)))
	badBackend := startBackend(t, directTLS(tlsConfig(bad.TLS)))

	expiry := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "expiry"}, []string{"namespace", "name"})
	var changes atomic.Int64
	changed := make(chan struct{}, 16)
	r := NewRunner(RunnerOptions{Interval: 200 * time.Millisecond, Timeout: 5 * time.Second, Expiry: expiry,
		OnChange: func() { changes.Add(1); changed <- struct{}{} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	wait := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no OnChange", what)
		}
	}
	key := Key{"acme", "orders"}
	target := func(addr string) map[Key]Target {
		return map[Key]Target{key: {Address: addr, Start: engine.DirectTLS, SNI: "db.example.test", Hostnames: []string{"db.example.test"}, Roots: ca.Pool()}}
	}

	if v := r.Version(); v != 0 {
		t.Fatalf("version %d before any result", v)
	}
	r.Set(target(goodBackend.addr))
	wait("a new target")
	v1 := r.Version()
	if v1 == 0 {
		t.Error("a first verdict left the version as it was")
	}
	if got := r.Results()[key]; got.Reason != v1alpha1.ReasonVerified || got.Certificate.Serial != good.SerialHex() {
		t.Fatalf("first probe: %+v", got)
	}
	if v := testutil.ToFloat64(expiry.WithLabelValues("acme", "orders")); int64(v) != good.Leaf.NotAfter.Unix() {
		t.Errorf("expiry metric %v, want %d", v, good.Leaf.NotAfter.Unix())
	}

	// Re-probed each Interval: the backend sees more connections, the verdict does not move.
	goodBackend.next(t)
	goodBackend.next(t)
	if n := changes.Load(); n != 1 {
		t.Errorf("%d changes for an unchanged verdict, want 1", n)
	}
	if v := r.Version(); v != v1 {
		t.Errorf("version %d after probes that found the same, want %d", v, v1)
	}

	// A changed target (the backend moved) is probed at once: MissingDNSNames.
	r.Set(target(badBackend.addr))
	wait("a changed target")
	if got := r.Results()[key]; got.Reason != v1alpha1.ReasonMissingDNSNames {
		t.Fatalf("after the move: %+v", got)
	}
	v2 := r.Version()
	if v2 == v1 {
		t.Error("a changed verdict left the version as it was")
	}

	r.Set(nil)
	if r.Version() == v2 {
		t.Error("a dropped result left the version as it was")
	}
	if _, ok := r.Results()[key]; ok || testutil.CollectAndCount(expiry) != 0 {
		t.Errorf("a removed target keeps its result or metric (%d series)", testutil.CollectAndCount(expiry))
	}
}

// A target whose backend does not serve the Expected certificate yet (its certificateRef
// was reissued, the database has not reloaded) is probed again after Retry, then twice that,
// and so on; once it serves it, the next probe waits a whole Interval again.
func TestRunnerRetriesUntilExpected(t *testing.T) {
	ca := snitest.NewCA(t)
	old := ca.Issue(t, "db.example.test")
	reissued := ca.Issue(t, "db.example.test")
	var serving atomic.Pointer[tls.Certificate]
	serving.Store(&old.TLS)
	backend := startBackend(t, directTLS(&tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return serving.Load(), nil
	}}))
	changed := make(chan struct{}, 16)
	r := NewRunner(RunnerOptions{Interval: time.Hour, Retry: 100 * time.Millisecond, Timeout: 5 * time.Second,
		OnChange: func() { changed <- struct{}{} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	key := Key{"acme", "orders"}
	r.Set(map[Key]Target{key: {Address: backend.addr, Start: engine.DirectTLS, SNI: "db.example.test",
		Hostnames: []string{"db.example.test"}, Roots: ca.Pool(), Expected: reissued.Leaf}})

	// The first probe and at least two retries, 100 ms then 200 ms apart: the old certificate.
	start := time.Now()
	for range 3 {
		backend.next(t)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("three probes of a target not serving its Expected certificate took %v", d)
	}
	if got := r.Results()[key]; got.Certificate == nil || got.Certificate.Serial != old.SerialHex() {
		t.Fatalf("result %+v, want the old certificate", got)
	}
	// The database reloads: a retry sees the reissued certificate and the status changes.
	serving.Store(&reissued.TLS)
	deadline := time.After(10 * time.Second)
	for {
		if got := r.Results()[key]; got.Certificate != nil && got.Certificate.Serial == reissued.SerialHex() {
			break
		}
		select {
		case <-changed:
		case <-backend.seen:
		case <-deadline:
			t.Fatalf("the reissued certificate was never seen: %+v", r.Results()[key])
		}
	}
	// From now on an Interval (an hour) between probes: no connection for a while.
	select {
	case <-backend.seen:
		// the probe that saw the reissue may still be counted here; one more is too many
		select {
		case <-backend.seen:
			t.Fatal("probed again right after it served its Expected certificate")
		case <-time.After(time.Second):
		}
	case <-time.After(time.Second):
	}
}

// A backend that is not listening yet (a database that starts after the gateway) is probed
// again after Retry, not after a whole Interval: its verdict follows within seconds.
func TestRunnerRetriesUnreachable(t *testing.T) {
	ca := snitest.NewCA(t)
	good := ca.Issue(t, "db.example.test")
	l := snitest.Listen(t)
	addr := l.Addr().String()
	l.Close() // nothing listens there until the backend starts
	r := NewRunner(RunnerOptions{Interval: time.Hour, Retry: 100 * time.Millisecond, Timeout: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	key := Key{"acme", "orders"}
	r.Set(map[Key]Target{key: {Address: addr, Start: engine.DirectTLS, SNI: "db.example.test",
		Hostnames: []string{"db.example.test"}, Roots: ca.Pool()}})
	deadline := time.Now().Add(10 * time.Second)
	for r.Results()[key].Reason != v1alpha1.ReasonUnreachable {
		if time.Now().After(deadline) {
			t.Fatalf("no Unreachable verdict: %+v", r.Results()[key])
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The backend starts on that address.
	// The port was the test's a moment ago (fixture.Listen never hands it out again in this
	// process); another process taking it in between fails the test rather than skipping.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("restarting the backend on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serveTLS(c, tlsConfig(good.TLS)) }()
		}
	}()
	for r.Results()[key].Reason != v1alpha1.ReasonVerified {
		if time.Now().After(deadline) {
			t.Fatalf("the started backend was not probed again within 10 s: %+v", r.Results()[key])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A probe cut short by the end of Run (the replica lost its leader Lease) leaves its target
// due at once: when Run starts again it is probed then, not after Interval nor never.
func TestRunnerRestartsInterruptedProbe(t *testing.T) {
	ca := snitest.NewCA(t)
	cert := ca.Issue(t, "db.example.test")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if i == 0 { // the first probe hangs: no handshake, until the probe gives up
				close(held)
				// Read until the prober closes: closing after its ClientHello (as this
				// once did) failed the handshake, and a probe that ended so before the
				// cancel recorded a result (1 run in ~30).
				go func() { io.Copy(io.Discard, c); c.Close() }()
				continue
			}
			go func() {
				s := tls.Server(c, tlsConfig(cert.TLS))
				s.Handshake()
				s.Close()
			}()
		}
	}()
	changed := make(chan struct{}, 4)
	r := NewRunner(RunnerOptions{Interval: time.Hour, Timeout: time.Minute, OnChange: func() { changed <- struct{}{} }})
	key := Key{"acme", "orders"}
	r.Set(map[Key]Target{key: {Address: ln.Addr().String(), Start: engine.DirectTLS, SNI: "db.example.test",
		Hostnames: []string{"db.example.test"}, Roots: ca.Pool()}})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first probe never connected")
	}
	cancel()
	<-done
	if _, ok := r.Results()[key]; ok {
		t.Fatal("an interrupted probe recorded a result")
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { r.Run(ctx2); close(done2) }()
	defer func() { cancel2(); <-done2 }()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the interrupted target was not probed when Run started again")
	}
	if got := r.Results()[key]; got.Reason != v1alpha1.ReasonVerified {
		t.Fatalf("after the restart: %+v", got)
	}
}

// A verdict is the same only with the same reason, message, certificate and its chain to
// the TrustAnchor, and the same endpoints: what render shows of it (render.VerdictCache).
func TestSameVerdict(t *testing.T) {
	yes, no := true, false
	cert := func(chains *bool) *v1alpha1.ServerCertificate {
		return &v1alpha1.ServerCertificate{SHA256: "ab", Serial: "01", CoversHostnames: true, ChainsToTrustAnchor: chains}
	}
	base := Result{Reason: v1alpha1.ReasonVerified, Message: "verified", Certificate: cert(&yes),
		Endpoints: []EndpointResult{{Address: "10.0.0.1:5432", Result: Result{Reason: v1alpha1.ReasonVerified, Certificate: cert(&yes)}}}}
	if !SameVerdict(base, base) {
		t.Fatal("a result differs from itself")
	}
	same := base
	same.Certificate, same.Endpoints = cert(&yes), []EndpointResult{{Address: "10.0.0.1:5432", Result: Result{Reason: v1alpha1.ReasonVerified, Certificate: cert(&yes)}}}
	if !SameVerdict(base, same) {
		t.Error("an equal result read again differs")
	}
	for name, change := range map[string]func(*Result){
		"reason":                   func(r *Result) { r.Reason = v1alpha1.ReasonUnknownAuthority },
		"message":                  func(r *Result) { r.Message = "other" },
		"certificate":              func(r *Result) { r.Certificate = &v1alpha1.ServerCertificate{SHA256: "cd", CoversHostnames: true} },
		"chain to the TrustAnchor": func(r *Result) { r.Certificate = cert(&no) },
		"no chain checked":         func(r *Result) { r.Certificate = cert(nil) },
		"an endpoint's address": func(r *Result) {
			r.Endpoints = []EndpointResult{{Address: "10.0.0.2:5432", Result: base.Endpoints[0].Result}}
		},
		"an endpoint's chain": func(r *Result) {
			r.Endpoints = []EndpointResult{{Address: "10.0.0.1:5432", Result: Result{Reason: v1alpha1.ReasonVerified, Certificate: cert(&no)}}}
		},
	} {
		changed := base
		change(&changed)
		if SameVerdict(base, changed) {
			t.Errorf("%s changed: the same verdict", name)
		}
	}
}
