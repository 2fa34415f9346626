// Package pipeline is snigate's one runner, shared by standalone mode (files) and cluster
// mode (an API server): it takes each new set of resources through translate, applies the
// snapshot to the data plane, publishes the status, and keeps what the admin endpoints and
// the metrics show, so that the two modes cannot drift.
//
//	r := pipeline.New(pipeline.Config{Apply: p.Apply, Metrics: m, Logger: log})
//	err := r.Run(res)        // on every change the source sees
//	srv := admin.New(m, r.State)
//
// What Run does, in order:
//
//  0. With Config.Render, the TenantGateways are rendered (package render) and the rendered
//     Gateways and HTTPRoutes join the resources; the previous render is kept, so a
//     TenantGateway whose new input cannot be rendered keeps its previous Gateway.
//  1. translate.Translate(res) with a Memo carried from one Run to the next (a change of one
//     route among 100 000 hostnames translates that route alone). With Config.Gateway set,
//     a second translation (with a memo of its own) of that Gateway alone gives the snapshot
//     to serve, while the status still covers every Gateway; with Config.GatewayStatusOnly
//     (a data plane) that Gateway's translation is the only one.
//  2. If translate rejects the input as a whole, nothing changes: the previous snapshot keeps
//     serving, the error is returned as an *InputError (retrying the same input cannot help),
//     recorded as State.LastError and counted as snigate_config_loads_total{result="rejected"}.
//  3. Config.Publish receives the status (the cluster's status writer); then Config.Apply the
//     snapshot. A failed Apply (a port that cannot be bound) is an error naming the Gateway,
//     its file when known, and the listener; the previous snapshot stays.
//  4. On success the generation moves: snigate_config_generation, snigate_route_hostnames and
//     snigate_config_loads_total{result="applied"} are updated, and State shows the new
//     status. The routing table in State is described only when State is read: at 100 000
//     routes the description alone takes about 100 ms, too much for every change.
//
// Each run observes how long its stages took in snigate_pipeline_stage_seconds{stage}:
// render, translate, complete (render.Complete: the tenant objects' status from
// translate's) and dataplane (Config.Apply, when set); a run whose translate input is the
// serving one's (only statuses follow) observes render and complete alone. The cluster's
// tenant applier observes its own pass as tenant_apply.
//
// Run is safe to call from several goroutines; calls are serialised. State never waits for a
// Run in progress.
package pipeline

import (
	"cmp"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/snigate/snigate/internal/admin"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/proxy"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/translate"
	"github.com/snigate/snigate/internal/trustanchor"
)

// Config configures a Runner.
type Config struct {
	// Apply receives every new snapshot (the data plane's proxy.Apply). Nil: status only.
	Apply func(*snapshot.Snapshot) error
	// Publish receives the status of every accepted translation, before Apply (the
	// cluster's status writer). Nil: status is only kept for State.
	Publish func(*translate.Status)
	// Metrics receives the generation, route and load counters. Nil: a private set.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Translate is passed to every translation (Generation and Memo are the runner's).
	Translate translate.Options
	// Render renders TenantGateways in memory and serves what they render: in standalone
	// mode the only place they are rendered; in a cluster the same render, whose objects a
	// controller applies afterwards (Rendered), so that a new exposure is served without
	// waiting for its route's round trip through the API server. RenderOptions.Previous and
	// Now are the runner's.
	Render        bool
	RenderOptions render.Options
	// RenderInputs, when set, fills in what each render reads beside the resources: in a
	// cluster, the cert-manager objects and the leader's certificate probe verdicts.
	RenderInputs func(*render.Options)
	// Cluster says the resources come from an API server: its CRDs validated the render
	// inputs already (files are checked here), and the cluster's controller projects the
	// TrustAnchors and probes the certificates (Probes is nil).
	Cluster bool
	// Prepare, when set, adjusts the resources translate reads after the render's objects
	// joined them (the cluster's local addresses for Gateways). It must hand back the same
	// objects for the same input: translate remembers its work by object identity.
	Prepare func(*resources.Resources) *resources.Resources
	// Probes, with Render, probes the certificates of the rendered DatabaseExposures'
	// backends: each run hands it the targets, and its latest verdicts become their
	// CertificateVerified (call Refresh when they change).
	Probes *probe.Runner
	// Gateway ("namespace/name"), when set, limits the snapshot given to Apply to that
	// Gateway: its data plane serves nothing else, and no other Gateway's claim on a port
	// can take the port from it. Status still covers every Gateway (a second translation,
	// of every Gateway), unless GatewayStatusOnly.
	Gateway string
	// GatewayStatusOnly, with Gateway, translates that Gateway alone, once, for the
	// snapshot and the status: State, the condition metrics and the input's errors cover
	// that Gateway and what attaches to it. For a provisioned data plane, which writes no
	// status: the second translation, for a status nobody writes, doubled its work on
	// every change (BenchmarkDataPlaneChange, 1 000 ListenerSets on the Gateway: 36–44 ms
	// a new route with it, 19–25 without).
	GatewayStatusOnly bool
}

// InputError is an input that translate rejected as a whole. Nothing changed; retrying the
// same input cannot help.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Runner runs resources through translate to the data plane and the status.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	gateway [2]string // namespace, name; empty without Config.Gateway

	mu         sync.Mutex // serialises Run
	generation uint64
	memo       translate.Memo      // the full translation's
	gwMemo     translate.Memo      // the one-Gateway translation's
	rendered   *render.Result      // the last applied render
	anchors    *trustanchor.Result // the last TrustAnchor projection (standalone: status only)
	// targets makes the probe targets anew only when what they are made of changed, and
	// keeps their parsed CA bundles from one run to the next (r.mu).
	targets render.TargetCache
	// verdicts makes the probes' verdicts into the render's, the same map while none
	// changed (r.mu).
	verdicts   render.VerdictCache
	last       *resources.Resources // the last input Run was given (Refresh runs it again)
	translated *resources.Resources // what the serving snapshot was translated from

	// stateMu guards what State reads alone, so /status and /readyz answer at once while a
	// long Run (100 000 routes take about a second) goes on.
	stateMu sync.Mutex
	state   admin.State
	snap    *snapshot.Snapshot    // serving snapshot, described lazily into table
	table   *snapshot.Description // nil until State asks

	// stages observe snigate_pipeline_stage_seconds of each stage of a run.
	stages struct{ render, translate, complete, dataplane prometheus.Observer }
}

// New returns a runner; nothing runs until Run. It fails only on a malformed Config.Gateway.
func New(cfg Config) (*Runner, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	r := &Runner{cfg: cfg, log: cfg.Logger}
	cfg.Metrics.Conditions.From(r.conditions)
	st := cfg.Metrics.StageSeconds
	r.stages.render, r.stages.translate = st.WithLabelValues("render"), st.WithLabelValues("translate")
	r.stages.complete, r.stages.dataplane = st.WithLabelValues("complete"), st.WithLabelValues("dataplane")
	if cfg.Gateway != "" {
		ns, name, ok := strings.Cut(cfg.Gateway, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("gateway %q: want namespace/name", cfg.Gateway)
		}
		r.gateway = [2]string{ns, name}
	}
	return r, nil
}

// State returns what the admin server shows.
func (r *Runner) State() admin.State {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	if r.snap != nil && r.table == nil {
		d := r.snap.Describe()
		r.table = &d
	}
	st := r.state
	if r.table != nil {
		st.Table = r.table
	}
	return st
}

// Status is the status of the last applied translation (nil before the first).
func (r *Runner) Status() *translate.Status {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	return r.state.Status
}

// TenantObjects updates what State shows of res's TenantGateways, DatabaseExposures and
// TrustAnchors, and nothing else: in a cluster, where a controller renders them, a change of
// those objects alone changes no routing, and is not translated (cluster.Controller). A
// runner that renders (Config.Render) shows its own render instead, and ignores this.
func (r *Runner) TenantObjects(res *resources.Resources) {
	if r.cfg.Render {
		return
	}
	ts, xs, as := tenantStatus(res, nil, nil)
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	if !r.state.Ready {
		return
	}
	r.state.Tenants, r.state.DatabaseExposures, r.state.TrustAnchors = ts, xs, as
}

// Generation is the generation of the serving snapshot (0 before the first Run applied).
func (r *Runner) Generation() uint64 {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	return r.state.Generation
}

// Run translates res and applies the result. On error the running configuration is
// unchanged; an *InputError says the input itself was rejected. res must follow the
// contract of package resources: nothing may change its objects afterwards.
func (r *Runner) Run(res *resources.Resources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.safeRun(res); err != nil {
		return r.rejected(err)
	}
	r.cfg.Metrics.Reloads.WithLabelValues("applied").Inc()
	return nil
}

// safeRun is run, with a panic (a bug in a stage) turned into an error: the previous
// snapshot keeps serving, and what the stages remember is dropped, since the panic may have
// left it half updated; the next run starts afresh.
func (r *Runner) safeRun(res *resources.Resources) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.memo, r.gwMemo, r.rendered, r.translated = translate.Memo{}, translate.Memo{}, nil, nil
			r.log.Error("a stage of the pipeline panicked; still serving the previous configuration",
				"panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error (a bug; please report it): %v", p)
		}
	}()
	return r.run(res)
}

// Refresh runs the last input again (after the certificate probes changed a verdict): the
// status follows, nothing else moves. Before the first Run it does nothing.
func (r *Runner) Refresh() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return nil
	}
	if err := r.safeRun(r.last); err != nil {
		return r.rejected(err)
	}
	return nil
}

// Reject records an error of the source itself (a file that cannot be read or decoded)
// exactly like a rejected translation: counted, shown in State, logged once serving. It
// returns err.
func (r *Runner) Reject(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejected(err)
}

// rejected counts, records and logs a rejected configuration; r.mu is held.
func (r *Runner) rejected(err error) error {
	r.cfg.Metrics.Reloads.WithLabelValues("rejected").Inc()
	r.stateMu.Lock()
	r.state.LastError, r.state.LastRejected = err.Error(), time.Now()
	ready, gen := r.state.Ready, r.state.Generation
	r.stateMu.Unlock()
	// Before the first configuration the caller reports the error (serve exits with it).
	if ready {
		r.log.Error("configuration rejected; still serving the previous one", "generation", gen, "error", err)
	}
	return err
}

func (r *Runner) run(res *resources.Resources) error {
	input := res
	opts := r.cfg.Translate
	opts.Generation = r.generation + 1
	opts.Memo = &r.memo
	var rendered *render.Result
	var anchors *trustanchor.Result
	start := time.Now()
	if r.cfg.Render {
		// A TenantGateway the CRD would refuse is invalid input, like any other: in a
		// cluster the API server refuses it; from files the reload is rejected, naming the
		// file, the object and the field.
		if !r.cfg.Cluster {
			if err := validateRenderInputs(res); err != nil {
				return &InputError{Err: err}
			}
		}
		ro := r.cfg.RenderOptions
		ro.Previous, ro.Now = r.rendered, opts.Now
		if r.cfg.Probes != nil {
			ro.Probes = r.verdicts.Of(r.cfg.Probes)
		}
		if r.cfg.RenderInputs != nil {
			r.cfg.RenderInputs(&ro)
		}
		rendered = render.Render(res, ro)
		if !r.cfg.Cluster {
			anchors = trustanchor.Render(trustanchor.Input{TrustAnchors: res.TrustAnchors, Secrets: res.Secrets},
				trustanchor.Options{Now: opts.Now, Previous: r.anchors, InUse: r.inUse()})
		}
		res = rendered.Merge(res)
		start = observe(r.stages.render, start)
	}
	if r.cfg.Prepare != nil {
		res = r.cfg.Prepare(res)
	}
	if (r.cfg.Cluster || input == r.last) && r.translated != nil && sameTranslateInput(res, r.translated) {
		// Nothing translate reads changed (a certificate probe's verdict moved, a
		// DatabaseExposure's route came back from the API server as rendered): the
		// statuses follow; the routing table is what it was, so nothing is translated or
		// applied and the generation stays. A reload of files is an operator's request and
		// always makes a generation (the acknowledgement a reload looks for).
		r.statusOnly(input, res, rendered, anchors)
		return nil
	}
	in, one := res, r.gateway[1] != "" && r.cfg.GatewayStatusOnly
	if one {
		in, opts.Memo = onlyGateway(res, r.gateway), &r.gwMemo
	}
	out := translate.Translate(in, opts)
	if len(out.Errors) > 0 {
		return &InputError{Err: errors.Join(out.Errors...)}
	}
	snap := out.Snapshot
	if r.gateway[1] != "" && !one {
		opts.Memo = &r.gwMemo
		snap = translate.Translate(onlyGateway(res, r.gateway), opts).Snapshot
	}
	start = observe(r.stages.translate, start)
	if rendered != nil {
		render.Complete(rendered, out.Status, opts.Now)
		start = observe(r.stages.complete, start)
	}
	if r.cfg.Publish != nil {
		r.cfg.Publish(out.Status)
	}
	if r.cfg.Apply != nil {
		if err := r.cfg.Apply(snap); err != nil {
			var be *proxy.BindError
			if errors.As(err, &be) {
				return bindError(res.Origins, be)
			}
			return fmt.Errorf("applying the snapshot: %w", err)
		}
		observe(r.stages.dataplane, start)
	}
	r.generation = opts.Generation
	r.rendered, r.anchors, r.last, r.translated = rendered, anchors, input, res
	if r.cfg.Probes != nil && rendered != nil {
		if targets, changed := r.targets.Of(res, rendered, anchors.Bundles()); changed {
			r.cfg.Probes.Set(targets)
		}
	}
	routes := snap.RouteHostnames()
	r.cfg.Metrics.Generation.Set(float64(r.generation))
	r.cfg.Metrics.Routes.Set(float64(routes))
	r.stateMu.Lock()
	r.state = admin.State{Ready: true, Generation: r.generation, NoTraffic: r.cfg.Apply == nil, LastApplied: time.Now(), Status: out.Status}
	r.state.Tenants, r.state.DatabaseExposures, r.state.TrustAnchors = tenantStatus(res, rendered, anchors)
	r.snap, r.table = snap, nil
	r.stateMu.Unlock()
	r.log.Info("configuration applied", "generation", r.generation, "ports", len(snap.Ports),
		"routeHostnames", routes)
	return nil
}

// statusOnly takes a run whose translate input is the serving snapshot's (merged; its
// caller checked it): the TenantGateways', DatabaseExposures' and TrustAnchors' status
// follow the render, the status is published again (an object that has appeared since, such
// as a rendered route the controller applied, gets its status written), the rest of the
// state stays. r.mu is held.
func (r *Runner) statusOnly(input, merged *resources.Resources, rendered *render.Result, anchors *trustanchor.Result) {
	r.stateMu.Lock()
	st := r.state
	r.stateMu.Unlock()
	if rendered != nil {
		start := time.Now()
		render.Complete(rendered, st.Status, r.cfg.Translate.Now)
		observe(r.stages.complete, start)
		if r.cfg.Probes != nil {
			if targets, changed := r.targets.Of(merged, rendered, anchors.Bundles()); changed {
				r.cfg.Probes.Set(targets)
			}
		}
	}
	r.rendered, r.anchors, r.last = rendered, anchors, input
	if r.cfg.Publish != nil {
		r.cfg.Publish(st.Status)
	}
	r.stateMu.Lock()
	r.state.Tenants, r.state.DatabaseExposures, r.state.TrustAnchors = tenantStatus(input, rendered, anchors)
	r.stateMu.Unlock()
	r.log.Debug("status refreshed", "generation", r.generation)
}

// observe records the time since start in o (snigate_pipeline_stage_seconds) and returns
// now, the next stage's start.
func observe(o prometheus.Observer, start time.Time) time.Time {
	now := time.Now()
	o.Observe(now.Sub(start).Seconds())
	return now
}

// sameTranslateInput reports whether translate would read the same in a as in b: every
// kind it reads (not the render's inputs) holds the same objects in the same order
// (resources.SameSpec: for a kind whose status snigate writes, a status write is no change).
func sameTranslateInput(a, b *resources.Resources) bool {
	for i := range resources.Kinds {
		k := &resources.Kinds[i]
		if k.RenderInput {
			continue
		}
		if !slices.EqualFunc(k.Objects(a), k.Objects(b), func(x, y resources.Object) bool { return resources.SameSpec(x, y, k.OwnStatus) }) {
			return false
		}
	}
	return true
}

// Rendered is the render of the last Run (nil without Config.Render): in a cluster, what the
// controller applies and whose statuses it writes. It does not change once returned.
func (r *Runner) Rendered() *render.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rendered
}

// tenantStatus is the status of every TenantGateway, DatabaseExposure and TrustAnchor for
// State: what this run rendered (standalone mode), or, where the runner renders nothing (a
// cluster, whose tenant controller renders and writes status), the status the objects of
// res carry. Every list is in namespace/name order.
func tenantStatus(res *resources.Resources, rendered *render.Result, anchors *trustanchor.Result) ([]render.Tenant, []render.Exposure, []trustanchor.Anchor) {
	var ts []render.Tenant
	var xs []render.Exposure
	var as []trustanchor.Anchor
	if rendered != nil {
		ts, xs = rendered.Tenants, rendered.Exposures
	} else {
		for _, t := range res.TenantGateways {
			ts = append(ts, render.Tenant{Namespace: t.Namespace, Name: t.Name, Status: t.Status})
		}
		for _, x := range res.DatabaseExposures {
			xs = append(xs, render.Exposure{Namespace: x.Namespace, Name: x.Name, Status: x.Status})
		}
		// In namespace/name order, as render's results are.
		slices.SortFunc(ts, func(a, b render.Tenant) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		slices.SortFunc(xs, func(a, b render.Exposure) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	if anchors != nil {
		as = anchors.Anchors
	} else {
		for _, a := range res.TrustAnchors {
			as = append(as, trustanchor.Anchor{Namespace: a.Namespace, Name: a.Name, Status: a.Status})
		}
		slices.SortFunc(as, func(a, b trustanchor.Anchor) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	return ts, xs, as
}

// conditions lists the conditions of st's TenantGateways, DatabaseExposures and
// TrustAnchors for snigate_object_condition.
func conditions(st admin.State) []metrics.Condition {
	n := 0
	for _, t := range st.Tenants {
		n += len(t.Status.Conditions)
	}
	for _, x := range st.DatabaseExposures {
		n += len(x.Status.Conditions)
	}
	for _, a := range st.TrustAnchors {
		n += len(a.Status.Conditions)
	}
	out := make([]metrics.Condition, 0, n)
	add := func(kind, ns, name string, cs []metav1.Condition) {
		for _, c := range cs {
			out = append(out, metrics.Condition{Kind: kind, Namespace: ns, Name: name, Type: c.Type, True: c.Status == metav1.ConditionTrue})
		}
	}
	for _, t := range st.Tenants {
		add("TenantGateway", t.Namespace, t.Name, t.Status.Conditions)
	}
	for _, x := range st.DatabaseExposures {
		add("DatabaseExposure", x.Namespace, x.Name, x.Status.Conditions)
	}
	for _, a := range st.TrustAnchors {
		add("TrustAnchor", a.Namespace, a.Name, a.Status.Conditions)
	}
	return out
}

// conditions is the status conditions of the state now, for snigate_object_condition.
func (r *Runner) conditions() []metrics.Condition {
	r.stateMu.Lock()
	st := r.state
	r.stateMu.Unlock()
	return conditions(st)
}

// inUse is, per TrustAnchor, what its exposures' backends served at their last probe.
func (r *Runner) inUse() map[types.NamespacedName][]*x509.Certificate {
	if r.cfg.Probes == nil || r.rendered == nil {
		return nil
	}
	return render.AnchorsInUse(r.rendered, r.cfg.Probes.Results())
}

// onlyGateway is res with one Gateway left.
func onlyGateway(res *resources.Resources, gw [2]string) *resources.Resources {
	out := *res
	out.Gateways = nil
	for _, g := range res.Gateways {
		if g.Namespace == gw[0] && g.Name == gw[1] {
			out.Gateways = append(out.Gateways, g)
		}
	}
	return &out
}

// bindError names the file and field of a listener whose port cannot be bound.
func bindError(origins map[string]string, be *proxy.BindError) error {
	// The snapshot names a listener gateway-ns/gateway/listener, or, for a ListenerSet's,
	// gateway-ns/gateway/set-ns/set/listener: the error names the object that defines it.
	parts := strings.Split(be.Listener, "/")
	kind := "Gateway"
	switch len(parts) {
	case 3:
	case 5:
		kind, parts = "ListenerSet", parts[2:]
	default:
		return be
	}
	where := kind + " " + parts[0] + "/" + parts[1]
	if o := origins[resources.OriginKey(kind, parts[0], parts[1])]; o != "" {
		where = resources.DescribeOrigin(o) + " (" + where + ")"
	}
	return fmt.Errorf("%s: spec.listeners[name=%s].port: cannot bind %s: %w", where, parts[2], be.Address, be.Err)
}

// validateRenderInputs runs the CRDs' rules on every object of snigate's own API
// (TenantGateway, DatabaseExposure, TrustAnchor, BackendPolicy, ListenerPolicy, AccessPolicy), as the API
// server would.
func validateRenderInputs(res *resources.Resources) error {
	var errs []error
	check := func(kind string, o interface {
		GetNamespace() string
		GetName() string
	}, fieldErrs field.ErrorList) {
		where := kind + " " + o.GetNamespace() + "/" + o.GetName()
		if origin := res.Origin(kind, o.GetNamespace(), o.GetName()); origin != "" {
			where = resources.DescribeOrigin(origin) + " (" + where + ")"
		}
		for _, e := range fieldErrs {
			errs = append(errs, fmt.Errorf("%s: %s", where, e.Error()))
		}
	}
	for _, t := range res.TenantGateways {
		d := t.DeepCopy()
		d.Default()
		check("TenantGateway", t, d.Validate())
	}
	for _, x := range res.DatabaseExposures {
		d := x.DeepCopy()
		d.Default()
		check("DatabaseExposure", x, d.Validate())
	}
	for _, a := range res.TrustAnchors {
		d := a.DeepCopy()
		d.Default()
		check("TrustAnchor", a, d.Validate())
	}
	for _, b := range res.BackendPolicies {
		check("BackendPolicy", b, b.Validate())
	}
	for _, l := range res.ListenerPolicies {
		check("ListenerPolicy", l, l.Validate())
	}
	for _, a := range res.AccessPolicies {
		check("AccessPolicy", a, a.Validate())
	}
	return errors.Join(errs...)
}
