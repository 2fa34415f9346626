package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/proxy"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/translate"
)

const twoGateways = `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: apps}
spec:
  gatewayClassName: snigate
  listeners:
  - {name: tls, protocol: TLS, port: 8443, hostname: "*.example.test", tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: other, namespace: apps}
spec:
  gatewayClassName: snigate
  listeners:
  - {name: tls, protocol: TLS, port: 9443, hostname: "*.other.test", tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: a, namespace: apps}
spec:
  parentRefs: [{name: edge}, {name: other}]
  hostnames: [a.example.test, a.other.test]
  rules: [{backendRefs: [{name: a, port: 443}]}]
`

const invalid = `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: apps}
spec:
  gatewayClassName: snigate
  listeners:
  - {name: tls, protocol: TLS, port: 0, tls: {mode: Passthrough}}
`

func decode(t *testing.T, yaml string) *resources.Resources {
	t.Helper()
	res, err := file.Decode("in.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// recorder is the data plane and the status writer of a test.
type recorder struct {
	applied   []*snapshot.Snapshot
	published []*translate.Status
	order     []string
	fail      error
}

func (r *recorder) apply(s *snapshot.Snapshot) error {
	r.order = append(r.order, "apply")
	if r.fail != nil {
		return r.fail
	}
	r.applied = append(r.applied, s)
	return nil
}

func (r *recorder) publish(st *translate.Status) {
	r.order = append(r.order, "publish")
	r.published = append(r.published, st)
}

func newRunner(t *testing.T, rec *recorder, gateway string) (*Runner, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	r, err := New(Config{Apply: rec.apply, Publish: rec.publish, Metrics: m, Gateway: gateway,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r, m
}

func TestRunAppliesAndCounts(t *testing.T) {
	rec := &recorder{}
	r, m := newRunner(t, rec, "")
	if st := r.State(); st.Ready || st.Generation != 0 {
		t.Fatalf("state before the first run: %+v", st)
	}
	if err := r.Run(decode(t, twoGateways)); err != nil {
		t.Fatal(err)
	}
	if strings.Join(rec.order, ",") != "publish,apply" {
		t.Errorf("order %v, want the status published before the snapshot is applied", rec.order)
	}
	if got := len(rec.applied[0].Ports); got != 2 {
		t.Errorf("snapshot has %d ports, want both Gateways' 2", got)
	}
	if r.table != nil {
		t.Error("the table was described before anyone asked")
	}
	st := r.State()
	if !st.Ready || st.Generation != 1 || st.Status == nil || st.Table == nil || st.LastError != "" ||
		time.Since(st.LastApplied) > time.Minute {
		t.Errorf("state after the first run: %+v", st)
	}
	if err := r.Run(decode(t, twoGateways)); err != nil {
		t.Fatal(err)
	}
	if g := testutil.ToFloat64(m.Generation); g != 2 {
		t.Errorf("snigate_config_generation %v, want 2", g)
	}
	if n := testutil.ToFloat64(m.Routes); n != 2 {
		t.Errorf("snigate_route_hostnames %v, want 2", n)
	}
	if n := testutil.ToFloat64(m.Reloads.WithLabelValues("applied")); n != 2 {
		t.Errorf(`snigate_config_loads_total{result="applied"} %v, want 2`, n)
	}
}

// A rejected input changes nothing but the error shown and the rejected count.
func TestRunKeepsTheLastGoodConfiguration(t *testing.T) {
	rec := &recorder{}
	r, m := newRunner(t, rec, "")
	if err := r.Run(decode(t, twoGateways)); err != nil {
		t.Fatal(err)
	}
	err := r.Run(decode(t, invalid))
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "spec.listeners[0].port") {
		t.Fatalf("error %v, want an *InputError naming the field", err)
	}
	if len(rec.applied) != 1 || len(rec.published) != 1 {
		t.Errorf("a rejected input was applied (%d) or published (%d)", len(rec.applied), len(rec.published))
	}
	st := r.State()
	if !st.Ready || st.Generation != 1 || !strings.Contains(st.LastError, "port 0") || st.LastRejected.Before(st.LastApplied) {
		t.Errorf("state after a rejected run: generation %d, error %q at %v (applied %v)", st.Generation, st.LastError, st.LastRejected, st.LastApplied)
	}
	if n := testutil.ToFloat64(m.Reloads.WithLabelValues("rejected")); n != 1 {
		t.Errorf(`snigate_config_loads_total{result="rejected"} %v, want 1`, n)
	}
	if g := testutil.ToFloat64(m.Generation); g != 1 {
		t.Errorf("snigate_config_generation moved to %v on a rejected input", g)
	}

	// A failed Apply names the Gateway's file, the listener and the address.
	rec.fail = &proxy.BindError{Address: "127.0.0.1:8443", Listener: "apps/edge/tls", Err: syscall.EADDRINUSE}
	err = r.Run(decode(t, twoGateways))
	if err == nil || errors.As(err, &ie) ||
		!strings.Contains(err.Error(), "in.yaml: document 1 (Gateway apps/edge): spec.listeners[name=tls].port: cannot bind 127.0.0.1:8443") {
		t.Fatalf("error %v, want one naming file, Gateway, listener and address", err)
	}
	if r.State().Generation != 1 {
		t.Error("a failed Apply moved the generation")
	}

	// A source error counts the same.
	if err := r.Reject(errors.New("bad.yaml: document 1: invalid YAML")); err == nil || r.State().LastError != err.Error() {
		t.Errorf("Reject: %v, state error %q", err, r.State().LastError)
	}
	if n := testutil.ToFloat64(m.Reloads.WithLabelValues("rejected")); n != 3 {
		t.Errorf(`snigate_config_loads_total{result="rejected"} %v, want 3`, n)
	}
}

// With Config.Gateway the data plane serves that Gateway alone, while the status covers all.
func TestRunOneGateway(t *testing.T) {
	rec := &recorder{}
	r, _ := newRunner(t, rec, "apps/edge")
	for range 2 { // the second run goes through both memos
		if err := r.Run(decode(t, twoGateways)); err != nil {
			t.Fatal(err)
		}
		snap := rec.applied[len(rec.applied)-1]
		if len(snap.Ports) != 1 || snap.Port("0.0.0.0:8443") == nil {
			t.Errorf("snapshot ports %v, want edge's 0.0.0.0:8443 alone", snap.Ports)
		}
		if n := len(rec.published[len(rec.published)-1].Gateways); n != 2 {
			t.Errorf("status of %d Gateways, want 2", n)
		}
	}
	for _, bad := range []string{"edge", "apps/", "/edge", "a/b/c"} {
		if _, err := New(Config{Gateway: bad}); err == nil {
			t.Errorf("Gateway %q accepted", bad)
		}
	}
}

// TestRunOneGatewayStatusOnly: a data plane's runner (GatewayStatusOnly) translates its
// Gateway alone: the same snapshot as TestRunOneGateway's, and a status, in State as in
// Publish, of that Gateway and of the route's parent on it, nothing of the other Gateway.
func TestRunOneGatewayStatusOnly(t *testing.T) {
	rec := &recorder{}
	r, err := New(Config{Apply: rec.apply, Publish: rec.publish, Gateway: "apps/edge", GatewayStatusOnly: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run goes through the memo
		if err := r.Run(decode(t, twoGateways)); err != nil {
			t.Fatal(err)
		}
		snap := rec.applied[len(rec.applied)-1]
		if len(snap.Ports) != 1 || snap.Port("0.0.0.0:8443") == nil {
			t.Errorf("snapshot ports %v, want edge's 0.0.0.0:8443 alone", snap.Ports)
		}
		st := rec.published[len(rec.published)-1]
		if st != r.State().Status {
			t.Errorf("State's status is not the one published")
		}
		if len(st.Gateways) != 1 || st.Gateways[0].Name != "edge" {
			t.Errorf("status of Gateways %+v, want edge's alone", st.Gateways)
		}
		if len(st.TLSRoutes) != 1 || len(st.TLSRoutes[0].Status.Parents) != 1 || st.TLSRoutes[0].Status.Parents[0].ParentRef.Name != "edge" {
			t.Errorf("route status %+v, want its parent edge alone", st.TLSRoutes)
		}
	}
}

// Where the runner renders nothing (a cluster: the tenant controller renders and writes
// status), State shows the TenantGateways', DatabaseExposures' and TrustAnchors' status as
// the input carries it.
func TestStateShowsTenantObjectsAsStored(t *testing.T) {
	r, m := newRunner(t, &recorder{}, "")
	res := decode(t, twoGateways)
	ready := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"}}
	res.TenantGateways = []*v1alpha1.TenantGateway{{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "tg"},
		Status: v1alpha1.TenantGatewayStatus{Conditions: ready}}}
	res.DatabaseExposures = []*v1alpha1.DatabaseExposure{{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "pg"},
		Status: v1alpha1.DatabaseExposureStatus{Hostnames: []string{"pg.t.example.test"}}}}
	res.TrustAnchors = []*v1alpha1.TrustAnchor{{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "ca"},
		Status: v1alpha1.TrustAnchorStatus{Conditions: ready}}}
	if err := r.Run(res); err != nil {
		t.Fatal(err)
	}
	st := r.State()
	if len(st.Tenants) != 1 || st.Tenants[0].Name != "tg" || len(st.Tenants[0].Status.Conditions) != 1 ||
		len(st.DatabaseExposures) != 1 || st.DatabaseExposures[0].Status.Hostnames[0] != "pg.t.example.test" ||
		len(st.TrustAnchors) != 1 || st.TrustAnchors[0].Status.Conditions[0].Reason != "Ready" {
		t.Errorf("state: tenants %+v, exposures %+v, anchors %+v", st.Tenants, st.DatabaseExposures, st.TrustAnchors)
	}
	// snigate_object_condition exports the same conditions, and forgets an object gone.
	want := `# HELP snigate_object_condition Status conditions of the TenantGateways, DatabaseExposures and TrustAnchors: 1 when True, 0 when False or Unknown (the reason is in their status and on the status page).
# TYPE snigate_object_condition gauge
snigate_object_condition{kind="TenantGateway",name="tg",namespace="t",type="Ready"} 1
snigate_object_condition{kind="TrustAnchor",name="ca",namespace="t",type="Ready"} 1
`
	if err := testutil.CollectAndCompare(m.Conditions, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	res.TenantGateways[0] = res.TenantGateways[0].DeepCopy()
	res.TenantGateways[0].Status.Conditions[0].Status = metav1.ConditionFalse
	res.TrustAnchors = nil
	if err := r.Run(res); err != nil {
		t.Fatal(err)
	}
	want = strings.Join(strings.Split(want, "\n")[:2], "\n") + "\n" +
		`snigate_object_condition{kind="TenantGateway",name="tg",namespace="t",type="Ready"} 0` + "\n"
	if err := testutil.CollectAndCompare(m.Conditions, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// /status and /readyz read State while a reload runs. A reload that keeps a TenantGateway's
// previous objects (here: another object holds the name of its redirect route) must not
// write into the state being served: under the race detector, a status shared between the
// serving render and the next one fails this test.
func TestStateWhileReloading(t *testing.T) {
	good, err := file.Load("../../examples/databases")
	if err != nil {
		t.Fatal(err)
	}
	if len(good.TenantGateways) == 0 || len(good.DatabaseExposures) == 0 {
		t.Fatalf("examples/databases: %d TenantGateways, %d DatabaseExposures", len(good.TenantGateways), len(good.DatabaseExposures))
	}
	tg := good.TenantGateways[0]
	kept := *good
	kept.HTTPRoutes = append(slices.Clone(good.HTTPRoutes), &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: tg.Namespace, Name: tg.Name + "-http-redirect"}})

	m := metrics.New()
	r, err := New(Config{Apply: (&recorder{}).apply, Metrics: m, Render: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(good); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := json.NewEncoder(io.Discard).Encode(r.State()); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := range 20 {
		in := good
		if i%2 == 0 {
			in = &kept
		}
		if err := r.Run(in); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A kept run serves the previous Gateway and says why nothing new was rendered.
	if err := r.Run(&kept); err != nil {
		t.Fatal(err)
	}
	st := r.State()
	if len(st.Tenants) != 1 || st.Generation != 22 {
		t.Fatalf("state: generation %d, %d tenants", st.Generation, len(st.Tenants))
	}
	if c := meta.FindStatusCondition(st.Tenants[0].Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonNameInUse {
		t.Errorf("the kept run's Ready condition %+v, want reason %s", c, v1alpha1.ReasonNameInUse)
	}
}

// A certificate probe's new verdict changes the exposures' status and nothing else: the
// routing table is not translated or applied again, and the generation stays (a verdict is
// not a configuration). The demo's databases are not running here, so the probes find
// them unreachable, which moves CertificateVerified from Pending. One exposure has members,
// each probed on its own route: their verdicts do not move the generation either.
func TestProbeVerdictIsStatusOnly(t *testing.T) {
	res, err := file.Load("../../examples/databases")
	if err != nil {
		t.Fatal(err)
	}
	res.DatabaseExposures = slices.Clone(res.DatabaseExposures)
	for i, d := range res.DatabaseExposures {
		if d.Name == "orders" {
			d = d.DeepCopy()
			d.Spec.Members = []v1alpha1.DatabaseMember{{Name: "replica-1", BackendRef: d.Spec.BackendRef}, {Name: "replica-2", BackendRef: d.Spec.BackendRef}}
			res.DatabaseExposures[i] = d
		}
	}
	rec := &recorder{}
	var r *Runner
	var mu sync.Mutex
	probes := probe.NewRunner(probe.RunnerOptions{Timeout: 500 * time.Millisecond, OnChange: func() {
		mu.Lock()
		defer mu.Unlock()
		if err := r.Refresh(); err != nil {
			t.Error(err)
		}
	}})
	r, err = New(Config{Apply: rec.apply, Render: true, Probes: probes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if err := r.Run(res); err != nil {
		t.Fatal(err)
	}
	mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go probes.Run(ctx)
	wantMembers := 0 // the example's own (cache's) and the two added to orders
	for _, d := range res.DatabaseExposures {
		wantMembers += len(d.Spec.Members)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		verdicts, members := 0, 0
		for _, x := range r.State().DatabaseExposures {
			if c := meta.FindStatusCondition(x.Status.Conditions, v1alpha1.ConditionCertificateVerified); c != nil && c.Reason != v1alpha1.ReasonProbePending {
				verdicts++
			}
			for _, m := range x.Status.Members {
				if m.Certificate != "" && m.Certificate != v1alpha1.ReasonProbePending {
					members++
				}
			}
		}
		if verdicts == len(res.DatabaseExposures) && members == wantMembers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d exposures and %d of %d members have a verdict after 20 s", verdicts, len(res.DatabaseExposures), members, wantMembers)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if g := r.State().Generation; g != 1 || len(rec.applied) != 1 {
		t.Fatalf("after the verdicts: generation %d, %d snapshots applied; want 1 and 1", g, len(rec.applied))
	}
	// A change of the input is translated and applied as ever.
	changed := *res
	changed.DatabaseExposures = slices.Clone(res.DatabaseExposures)[1:]
	if err := r.Run(&changed); err != nil {
		t.Fatal(err)
	}
	if g := r.State().Generation; g != 2 || len(rec.applied) != 2 {
		t.Fatalf("after a change: generation %d, %d snapshots applied; want 2 and 2", g, len(rec.applied))
	}
}

// In a cluster the runner renders too and serves what it renders at once; the route the
// controller then applies comes back from the API server with a generation, and is
// translated in place of the rendered one (its status names that generation); status-only
// changes of it, and a second run of the same input, change no configuration.
func TestClusterRenderServesBeforeTheAPIServer(t *testing.T) {
	res, err := file.Load("../../examples/databases")
	if err != nil {
		t.Fatal(err)
	}
	// As a cluster holds them: with UIDs (the rendered routes are owned by their exposures).
	for i, x := range res.DatabaseExposures {
		x = x.DeepCopy()
		x.UID = types.UID("uid-" + x.Name)
		res.DatabaseExposures[i] = x
	}
	rec := &recorder{}
	r, err := New(Config{Apply: rec.apply, Publish: rec.publish, Render: true, Cluster: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(res); err != nil {
		t.Fatal(err)
	}
	rendered := r.Rendered()
	if len(rendered.TLSRoutes) == 0 || r.State().Generation != 1 {
		t.Fatalf("%d routes rendered, generation %d", len(rendered.TLSRoutes), r.State().Generation)
	}
	first := rendered.TLSRoutes[0]
	// Its status is computed from the rendered object: generation 0, never written.
	st := r.Status()
	if s := routeStatus(st, first.Namespace, first.Name); s == nil || s.Parents[0].Conditions[0].ObservedGeneration != 0 {
		t.Fatalf("status of the rendered route: %+v", s)
	}

	// The same input again: nothing to translate.
	if err := r.Run(res); err != nil {
		t.Fatal(err)
	}
	if g := r.State().Generation; g != 1 {
		t.Errorf("the same input made generation %d", g)
	}

	// The API server's copy of the first route, as applied: same digest, a generation.
	applied := first.DeepCopy()
	applied.Generation, applied.UID, applied.ResourceVersion = 1, "uid-1", "10"
	withCopy := *res
	withCopy.TLSRoutes = append(slices.Clone(res.TLSRoutes), applied)
	if err := r.Run(&withCopy); err != nil {
		t.Fatal(err)
	}
	if g := r.State().Generation; g != 2 {
		t.Fatalf("the applied copy made generation %d, want 2", g)
	}
	if s := routeStatus(r.Status(), first.Namespace, first.Name); s == nil || s.Parents[0].Conditions[0].ObservedGeneration != 1 {
		t.Fatalf("status of the applied route: %+v", s)
	}
	// Its status written (a new resourceVersion, the same generation): no configuration.
	written := applied.DeepCopy()
	written.ResourceVersion = "11"
	withWritten := withCopy
	withWritten.TLSRoutes = append(slices.Clone(res.TLSRoutes), written)
	if err := r.Run(&withWritten); err != nil {
		t.Fatal(err)
	}
	if g := r.State().Generation; g != 2 {
		t.Errorf("a status write made generation %d", g)
	}

	// A copy of another render (someone changed it; the controller applies it again) is
	// not translated: the render is.
	stale := applied.DeepCopy()
	stale.Annotations = map[string]string{"snigate.dev/rendered": "0000000000000000"}
	stale.Spec.Hostnames = []gwv1.Hostname{"elsewhere.example.test"}
	withStale := *res
	withStale.TLSRoutes = append(slices.Clone(res.TLSRoutes), stale)
	if err := r.Run(&withStale); err != nil {
		t.Fatal(err)
	}
	if s := routeStatus(r.Status(), first.Namespace, first.Name); s == nil || s.Parents[0].Conditions[0].ObservedGeneration != 0 {
		t.Errorf("a stale copy was translated: %+v", s)
	}
}

func routeStatus(st *translate.Status, ns, name string) *gwv1.RouteStatus {
	for i := range st.TLSRoutes {
		if st.TLSRoutes[i].Namespace == ns && st.TLSRoutes[i].Name == name {
			return &st.TLSRoutes[i].Status.RouteStatus
		}
	}
	return nil
}

// A bug that panics in a stage costs that run, not the process: the previous configuration
// keeps serving, and the next run works.
func TestPanicKeepsServing(t *testing.T) {
	rec := &recorder{}
	fail := true
	r, err := New(Config{Apply: rec.apply, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Prepare: func(res *resources.Resources) *resources.Resources {
			if fail {
				panic("a bug")
			}
			return res
		}})
	if err != nil {
		t.Fatal(err)
	}
	fail = false
	if err := r.Run(decode(t, twoGateways)); err != nil {
		t.Fatal(err)
	}
	fail = true
	if err := r.Run(decode(t, twoGateways)); err == nil || !strings.Contains(err.Error(), "a bug") {
		t.Fatalf("a panicking run: %v", err)
	}
	if st := r.State(); st.Generation != 1 || !strings.Contains(st.LastError, "a bug") || len(rec.applied) != 1 {
		t.Fatalf("after the panic: generation %d, last error %q, %d applied", st.Generation, st.LastError, len(rec.applied))
	}
	fail = false
	if err := r.Run(decode(t, twoGateways)); err != nil || r.State().Generation != 2 {
		t.Fatalf("the next run: %v, generation %d", err, r.State().Generation)
	}
}

// Each stage of a run is timed in snigate_pipeline_stage_seconds: a run observes render,
// translate, complete and dataplane once each; a run of the same input (Refresh) whose
// routing table is unchanged completes the status again and translates and applies nothing.
func TestRunObservesItsStages(t *testing.T) {
	res, err := file.Load("../../examples/databases")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	r, err := New(Config{Apply: (&recorder{}).apply, Metrics: m, Render: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(res); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"render": 1, "translate": 1, "complete": 1, "dataplane": 1}
	if got := stageCounts(t, m); !maps.Equal(got, want) {
		t.Errorf("after a run: %v, want %v", got, want)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	want["render"], want["complete"] = 2, 2
	if got := stageCounts(t, m); !maps.Equal(got, want) {
		t.Errorf("after a refresh: %v, want %v", got, want)
	}
}

// stageCounts are snigate_pipeline_stage_seconds' observation counts by stage.
func stageCounts(t *testing.T, m *metrics.Metrics) map[string]uint64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "snigate_pipeline_stage_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "stage" && s.GetHistogram().GetSampleCount() > 0 {
					out[l.GetValue()] = s.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}
