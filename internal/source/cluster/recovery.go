package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A data plane (Config.ReadOnly) must pick up changes within a second of the API server's
// return after an outage. Its informers cannot promise that: client-go's reflector retries a
// broken watch with jittered exponential backoff (k8s.io/client-go/tools/cache/reflector.go:
// 0.8 s doubling, capped at 30 s, jitter 1.0, so a retry can be up to 60 s away) and does not
// notice that the API server is back in between. The recovery watchdog closes that gap: it
// probes the API server every 200 ms; when a probe succeeds after two in a row failed (one
// alone is a blip), it switches the reconciler to direct (uncached) reads for
// recoveryWindow and enqueues a translation at once and every 500 ms, so a change made
// during the outage is served ~0.2–0.7 s after the return while the informers are still
// backing off.
//
// Only an outage opens the window, not a busy API server. A busy one answers the probe
// late too (at 10 000 exposures on two cores, /readyz took longer than probeTimeout while
// the controller converged), and there the watches hold and the cache stays current; a
// window then only made every reconcile list 10 000 objects of a struggling API server
// within directTimeout, which failed, and kept failing while the slow probes kept the window
// open: a data plane stopped applying changes for minutes (bench/cpscale.sh --provision). So
// the informers report each broken watch (watchFailed, their WatchErrorHandler), and the
// return opens a window only when a probe found the API server gone (a refused connection,
// unreachable) or a watch broke since the probes began to fail. A partition that only delays
// answers opens none: its watches resume on their own streams, or, if their connections
// died, are retried by client-go's backoff.
//
// During the window every reconcile reads directly, never from the cache, so a reconcile
// from a cache that has not caught up yet cannot replace a newer snapshot with an older one.
// A probe failure during the window keeps the window open (direct reads then fail and the
// snapshot stays), so a stale cache is not read between two outages either. The window
// outlasts the reflector's longest retry delay (60 s), so when reads go back to the cache it
// has reconnected and caught up.
const (
	probeInterval  = 200 * time.Millisecond
	probeTimeout   = 300 * time.Millisecond
	recoveryPoll   = 500 * time.Millisecond
	recoveryWindow = 65 * time.Second
	directTimeout  = 2 * time.Second // bounds a direct read that an outage leaves hanging
)

// recovery is the watchdog (a manager Runnable). kick receives one event per translation it
// asks for; probe reports whether the API server answers.
type recovery struct {
	probe    func(context.Context) error
	kick     chan event.GenericEvent
	log      *slog.Logger
	interval time.Duration // probeInterval; shorter in tests
	poll     time.Duration // recoveryPoll
	window   time.Duration // recoveryWindow

	mu    sync.Mutex
	until time.Time // reads are direct until then
	// brokeAt is when an informer's watch last failed (zero: never).
	brokeAt time.Time
}

// watchFailed is the informers' WatchErrorHandler: it notes the broken watch, and logs it
// as client-go's default handler does.
func (r *recovery) watchFailed(ctx context.Context, rf *toolscache.Reflector, err error) {
	r.watchBroke()
	toolscache.DefaultWatchErrorHandler(ctx, rf, err)
}

// watchBroke notes that a watch failed now.
func (r *recovery) watchBroke() {
	r.mu.Lock()
	r.brokeAt = time.Now()
	r.mu.Unlock()
}

// brokeSince says whether a watch failed since the probes began to fail at failing, or just
// before: a dropped connection breaks a watch at once, and the next probe fails up to an
// interval and a timeout later.
func (r *recovery) brokeSince(failing time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.brokeAt.IsZero() && r.brokeAt.After(failing.Add(-2*r.interval-probeTimeout))
}

// unreachable says whether a failed probe found the API server gone rather than slow: no
// answer at all (a refused or reset connection), not a late one (the deadline) nor an answer
// saying it is not ready. client-go's reflectors retry a refused watch inside their own loop
// with backoff and never report it to the WatchErrorHandler, so a refused probe is the sign
// that the watches are down with it.
func unreachable(err error) bool {
	var status apierrors.APIStatus
	return !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &status)
}

// outageProbes consecutive failed probes mark the API server as unreachable.
const outageProbes = 2

func newRecovery(probe func(context.Context) error, log *slog.Logger) *recovery {
	return &recovery{
		probe: probe, kick: make(chan event.GenericEvent, 1), log: log,
		interval: probeInterval, poll: recoveryPoll, window: recoveryWindow,
	}
}

// restProbe asks the API server for /readyz (readable by any client, like /version) through
// its own connection settings: no client-side rate limit, probeTimeout per request.
func restProbe(cfg *rest.Config) (func(context.Context) error, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.RateLimiter = -1, nil
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc := dc.RESTClient()
	return func(ctx context.Context) error { return rc.Get().AbsPath("/readyz").Do(ctx).Error() }, nil
}

// directReader reads from the API server without the cache or a client-side rate limit (a
// translation lists ten kinds, every 500 ms during the window).
func directReader(cfg *rest.Config, opts client.Options) (client.Reader, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.RateLimiter = -1, nil
	return client.New(cfg, opts)
}

// direct reports whether reconciles must read from the API server, not the cache.
func (r *recovery) direct() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Now().Before(r.until)
}

func (r *recovery) extend() {
	r.mu.Lock()
	r.until = time.Now().Add(r.window)
	r.mu.Unlock()
}

// enqueue asks for a translation; one pending request is enough.
func (r *recovery) enqueue() {
	select {
	case r.kick <- event.GenericEvent{Object: &gwv1.Gateway{}}:
	default:
	}
}

// Start probes until ctx is done.
func (r *recovery) Start(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	up := true
	fails := 0
	var polled, failing time.Time // failing: when the probes began to fail
	refused := false              // a probe of this streak got no answer at all (refused, reset)
	for {
		sent := time.Now()
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := r.probe(pctx)
		cancel()
		if err != nil {
			if fails == 0 {
				failing, refused = sent, false
			}
			fails++
			refused = refused || unreachable(err)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			// One failed probe (a slow answer on a busy API server) is not an outage: every
			// replica opening a window of direct lists on a blip would load the API server
			// exactly when it is struggling. Two in a row are.
			if up && fails >= outageProbes {
				r.log.Warn("API server unreachable; serving the last snapshot", "error", err)
				up = false
			}
			if r.direct() {
				r.extend() // keep reading directly: the cache may be older than the snapshot
			}
		case !up && !refused && !r.brokeSince(failing) && !r.direct():
			// Slow, not gone: every watch held, so the cache is as current as it can be.
			fails = 0
			up = true
			r.log.Info("API server answering again; no watch broke, so the cache is current: no direct reads")
		case !up:
			fails = 0
			up = true
			r.log.Info("API server reachable again; reading it directly while the watches reconnect", "for", r.window)
			r.extend()
			r.enqueue()
			polled = time.Now()
		case fails > 0:
			fails = 0 // a single failed probe, now answered: nothing to recover from
		case r.direct() && time.Since(polled) >= r.poll:
			r.enqueue()
			polled = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
