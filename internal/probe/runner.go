package probe

import (
	"container/heap"
	"context"
	"crypto/x509"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snigate/snigate/api/v1alpha1"
)

// Key names a DatabaseExposure: namespace, name.
type Key = [2]string

// RunnerOptions configures a Runner.
type RunnerOptions struct {
	// Interval between two probes of an unchanged target (default 5 minutes): a rotated or
	// expiring certificate is seen within it.
	Interval time.Duration
	// Retry is the first wait before probing again a target that was unreachable or does
	// not serve its Expected certificate yet (default 5 seconds); it doubles at each such
	// probe, up to Interval. A database starts after the gateway, or reloads a reissued
	// certificate some time after its Secret changes: the status follows within seconds,
	// not minutes.
	Retry time.Duration
	// Timeout bounds one probe (default DefaultTimeout).
	Timeout time.Duration
	// OnChange is called, outside the runner's lock, after a probe whose verdict or
	// certificate differs from the previous one: the caller renders the status again.
	OnChange func()
	// Expiry, when set, holds each exposure's certificate notAfter (Unix seconds), labelled
	// namespace and name; an exposure without a certificate has no series.
	Expiry *prometheus.GaugeVec
	// Now is the clock (default time.Now).
	Now func() time.Time
	// MaxRate caps the connections a second (default 50), every endpoint of every route
	// counted: 10 000 exposures are probed within Interval without their databases, or the
	// gateway's host, seeing a burst.
	MaxRate float64
	// Concurrency bounds the routes probed at once (default 4): a silent endpoint holds
	// its worker for Timeout, not every other probe.
	Concurrency int
	// Probes, when set, counts the probes by verdict (reason): one per endpoint.
	Probes *prometheus.CounterVec
}

// Runner probes a set of targets, each a route with every ready endpoint of its Service: a
// new or changed target at once, every target again about each Interval (a tenth of it at
// random either way, so that targets set at once do not stay due at once), at most
// Concurrency routes at a time and at most MaxRate connections a second over all of them
// (a probe is one short connection per endpoint; a tenant's databases are not stormed, nor
// the gateway's host at 10 000 exposures: 10 000 targets set at once are probed over
// 10 000/MaxRate seconds, and stay spread after that). The next due target comes off a
// heap: nothing is sorted or scanned per probe. The latest result of each target is kept
// for Results.
//
//	r := probe.NewRunner(probe.RunnerOptions{OnChange: rerender, Expiry: m.BackendCertificateExpiry})
//	go r.Run(ctx)
//	r.Set(targets)          // after every render: what the exposures publish now
//	verdicts := r.Results() // what the next render writes into CertificateVerified
type Runner struct {
	opts RunnerOptions
	kick chan struct{}

	mu      sync.Mutex
	targets map[Key]Target
	results map[Key]Result
	// dueAt is when each target is due; queue holds the same times, and an entry whose time
	// is not its target's dueAt any more is stale (skipped when it comes up).
	dueAt map[Key]time.Time
	queue dueQueue
	// retries counts, per target, the probes in a row that found it unreachable or not
	// serving its Expected certificate: the next one comes after Retry << retries (at most
	// Interval).
	retries map[Key]int
	// version counts the changes of results' verdicts (record's report, a result dropped):
	// a reader that converted the results at one version need not again (Version).
	version uint64

	// next is when the next connection may start (the MaxRate limit).
	rateMu sync.Mutex
	next   time.Time
}

// dueQueue is a min-heap of due times (container/heap).
type dueQueue []dueItem

type dueItem struct {
	at time.Time
	k  Key
}

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(dueItem)) }
func (q *dueQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

// schedule makes k due at at (r.mu held).
func (r *Runner) schedule(k Key, at time.Time) {
	r.dueAt[k] = at
	heap.Push(&r.queue, dueItem{at, k})
}

// requeue makes k due now if it is still the target t (an interrupted probe).
func (r *Runner) requeue(k Key, t Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.targets[k]; ok && sameTarget(cur, t) && r.dueAt[k].IsZero() {
		r.schedule(k, r.opts.Now())
	}
}

// top drops stale entries and returns the earliest due target (r.mu held).
func (r *Runner) top() (dueItem, bool) {
	for len(r.queue) > 0 {
		it := r.queue[0]
		if at, ok := r.dueAt[it.k]; ok && at.Equal(it.at) {
			return it, true
		}
		heap.Pop(&r.queue)
	}
	return dueItem{}, false
}

// NewRunner makes a Runner; Run starts it.
func NewRunner(o RunnerOptions) *Runner {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Retry <= 0 {
		o.Retry = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxRate <= 0 {
		o.MaxRate = 50
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	return &Runner{opts: o, kick: make(chan struct{}, 1), targets: map[Key]Target{},
		results: map[Key]Result{}, dueAt: map[Key]time.Time{}, retries: map[Key]int{}}
}

// Set replaces the targets. A target that is new or differs from before is probed at once;
// the result of a target that is gone is dropped, with its metric.
func (r *Runner) Set(targets map[Key]Target) {
	r.mu.Lock()
	changed := false
	now := r.opts.Now()
	for k, t := range targets {
		if old, ok := r.targets[k]; !ok || !sameTarget(old, t) {
			delete(r.retries, k)
			r.schedule(k, now)
			changed = true
		}
	}
	for k := range r.targets {
		if _, ok := targets[k]; !ok {
			if _, had := r.results[k]; had {
				r.version++
			}
			delete(r.results, k)
			delete(r.dueAt, k)
			delete(r.retries, k)
			if r.opts.Expiry != nil {
				r.opts.Expiry.DeleteLabelValues(k[0], k[1])
			}
		}
	}
	r.targets = maps.Clone(targets)
	r.mu.Unlock()
	if changed {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// Results returns the latest result of every target probed so far.
func (r *Runner) Results() map[Key]Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.results)
}

// Version changes whenever a verdict in Results does (a result's reason, message,
// certificate or endpoints; a result dropped), and only then: read before Results, it
// tells whether what was made of an earlier Results still holds.
func (r *Runner) Version() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

// Run probes until ctx is done, and returns once its probes have.
func (r *Runner) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	workers := make(chan struct{}, r.opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-timer.C:
		}
		for {
			// A free worker first, then the earliest due target: one taken while every
			// worker is busy would wait, not due, while Set may change it.
			select {
			case workers <- struct{}{}:
			case <-ctx.Done():
				return
			}
			k, t, ok := r.due()
			if !ok || ctx.Err() != nil {
				if ok {
					r.requeue(k, t) // taken as Run stopped: due at once when it starts again
				}
				<-workers
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-workers }()
				res := ProbeEndpoints(ctx, t, r.opts.Now(), r.opts.Timeout, r.slot)
				if ctx.Err() != nil {
					// Stopped mid-probe (the replica lost its leader Lease): the target is
					// due at once when Run starts again, not lost from the queue.
					r.requeue(k, t)
					return
				}
				if r.opts.Probes != nil {
					for _, e := range endpointResults(res) {
						r.opts.Probes.WithLabelValues(e.Reason).Inc()
					}
				}
				if r.record(k, t, res) && r.opts.OnChange != nil {
					r.opts.OnChange()
				}
				// Its next probe is scheduled now: the loop may have to wake earlier.
				select {
				case r.kick <- struct{}{}:
				default:
				}
			}()
		}
		timer.Reset(r.untilNext())
	}
}

// slot waits until a connection may start under MaxRate: each caller reserves the next
// free instant, so concurrent probes share one rate.
func (r *Runner) slot(ctx context.Context) error {
	gap := time.Duration(float64(time.Second) / r.opts.MaxRate)
	r.rateMu.Lock()
	now := time.Now()
	at := now
	if r.next.After(now) {
		at = r.next
	}
	r.next = at.Add(gap)
	r.rateMu.Unlock()
	d := at.Sub(now)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// due takes the earliest target whose probe is due, if any; it is not due again until its
// probe is recorded.
func (r *Runner) due() (Key, Target, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	it, ok := r.top()
	if !ok || it.at.After(r.opts.Now()) {
		return Key{}, Target{}, false
	}
	heap.Pop(&r.queue)
	// In flight: due again when record says (or at once, if Set changes it meanwhile).
	r.dueAt[it.k] = time.Time{}
	return it.k, r.targets[it.k], true
}

// wait is how long after its last probe target k is due again; r.mu is held.
func (r *Runner) wait(k Key) time.Duration {
	n, ok := r.retries[k]
	if !ok {
		return r.opts.Interval
	}
	if n > 20 {
		n = 20
	}
	return min(r.opts.Retry<<n, r.opts.Interval)
}

// untilNext is the time until the next probe is due (at least a millisecond, at most
// Interval).
func (r *Runner) untilNext() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	it, ok := r.top()
	if !ok {
		return r.opts.Interval
	}
	return min(max(it.at.Sub(r.opts.Now()), time.Millisecond), r.opts.Interval)
}

// jitter spreads d over a tenth of it either way.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()-0.5)*0.2*float64(d))
}

// record stores res for k unless the target changed meanwhile, and reports whether the
// verdict or the certificate differs from the previous result.
func (r *Runner) record(k Key, t Target, res Result) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.targets[k]; !ok || !sameTarget(cur, t) {
		return false // replaced or gone while probing: its own probe comes
	}
	defer func() { r.schedule(k, r.opts.Now().Add(jitter(r.wait(k)))) }()
	old, had := r.results[k]
	r.results[k] = res
	// Soon again: a backend not reachable yet (a database that starts after the gateway, or
	// restarts), or not serving its Expected certificate yet.
	unreachable, stale := false, false
	for _, e := range endpointResults(res) {
		unreachable = unreachable || e.Reason == v1alpha1.ReasonUnreachable
		stale = stale || t.Expected != nil && (e.Certificate == nil || e.Certificate.Serial != serialHex(t.Expected.SerialNumber))
	}
	if unreachable || stale {
		if n, ok := r.retries[k]; ok {
			r.retries[k] = n + 1
		} else {
			r.retries[k] = 0
		}
	} else {
		delete(r.retries, k)
	}
	if r.opts.Expiry != nil {
		if notAfter, ok := Expiry(res); ok {
			r.opts.Expiry.WithLabelValues(k[0], k[1]).Set(float64(notAfter.Unix()))
		} else {
			r.opts.Expiry.DeleteLabelValues(k[0], k[1])
		}
	}
	changed := !had || !SameVerdict(old, res)
	if changed {
		r.version++
	}
	return changed
}

// SameVerdict reports whether a and b say the same of a target: reason, message, and the
// certificate each endpoint served.
func SameVerdict(a, b Result) bool {
	return a.Reason == b.Reason && a.Message == b.Message && sameCert(a, b) && sameEndpoints(a, b)
}

// endpointResults are res's endpoints, or res alone when it has none.
func endpointResults(res Result) []EndpointResult {
	if len(res.Endpoints) == 0 {
		return []EndpointResult{{Result: res}}
	}
	return res.Endpoints
}

// sameEndpoints reports whether a and b probed the same endpoints, each with the same
// verdict and certificate (status.endpoints lists them).
func sameEndpoints(a, b Result) bool {
	if len(a.Endpoints) != len(b.Endpoints) {
		return false
	}
	for i := range a.Endpoints {
		x, y := a.Endpoints[i], b.Endpoints[i]
		if x.Address != y.Address || x.Reason != y.Reason || !sameCert(x.Result, y.Result) {
			return false
		}
	}
	return true
}

func sameTarget(a, b Target) bool {
	return a.Address == b.Address && slices.Equal(a.Endpoints, b.Endpoints) && a.Start == b.Start && a.SNI == b.SNI &&
		slices.Equal(a.Hostnames, b.Hostnames) && samePool(a.Roots, b.Roots) &&
		(a.Expected == nil) == (b.Expected == nil) && (a.Expected == nil || a.Expected.Equal(b.Expected))
}

func samePool(a, b *x509.CertPool) bool {
	if a == b {
		return true // the pool kept from the last targets (render.Pools)
	}
	if a == nil || b == nil {
		return false
	}
	return a.Equal(b)
}

func sameCert(a, b Result) bool {
	if (a.Certificate == nil) != (b.Certificate == nil) {
		return false
	}
	// The same leaf has the same fields, but for what depends on the probe's roots: whether
	// it chains to the TrustAnchor (a CA added to or taken off its bundle).
	return a.Certificate == nil || (a.Certificate.SHA256 == b.Certificate.SHA256 &&
		a.Certificate.CoversHostnames == b.Certificate.CoversHostnames &&
		sameBool(a.Certificate.ChainsToTrustAnchor, b.Certificate.ChainsToTrustAnchor))
}

func sameBool(a, b *bool) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
