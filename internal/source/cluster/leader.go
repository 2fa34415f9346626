package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// leaderGroup runs the work only one replica may do — the status writer and the tenant
// applier — while this replica holds the Lease, stops it when the Lease is lost, and
// campaigns again, for as long as the process runs.
//
// controller-runtime's own election (manager.Options.LeaderElection) ends the whole
// manager when the Lease is lost ("leader election lost"): right for a controller that a
// kubelet restarts at no cost, wrong for `snigate controller` with its local proxy, where
// an API server outage longer than the renew deadline then closed every listener for as
// long as the API server was gone. Here only the elected work stops; translation and the
// proxy go on serving the last configuration, and the elected work starts again when this
// replica wins the Lease back. (With --provision the manager's election stays: the
// provisioner's controllers can be started only once, and the data planes, not that
// process, serve traffic.)
type leaderGroup struct {
	lock                                      resourcelock.Interface
	leaseDuration, renewDeadline, retryPeriod time.Duration
	members                                   []elected
	log                                       *slog.Logger

	// term is held while the elected work runs: a new term's work waits for the last
	// one's to stop, so two writers of the same replica never overlap.
	term  sync.Mutex
	terms atomic.Int64 // terms won (tests, logs)
}

// elected is work that runs only while this replica leads. Its Start runs until ctx is
// done and may be called again after it returns (a new term).
type elected interface {
	Start(ctx context.Context) error
}

var _ manager.LeaderElectionRunnable = (*leaderGroup)(nil)

// Leader election defaults: controller-runtime's.
const (
	defaultLeaseDuration = 15 * time.Second
	defaultRenewDeadline = 10 * time.Second
	defaultRetryPeriod   = 2 * time.Second
)

func newLeaderGroup(cfg Config, log *slog.Logger, members ...elected) (*leaderGroup, error) {
	g := &leaderGroup{
		leaseDuration: or(cfg.LeaseDuration, defaultLeaseDuration),
		renewDeadline: or(cfg.RenewDeadline, defaultRenewDeadline),
		retryPeriod:   or(cfg.RetryPeriod, defaultRetryPeriod),
		members:       members, log: log,
	}
	ns := cfg.LeaderElectionNamespace
	if ns == "" {
		b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, fmt.Errorf("cluster: leader election needs LeaderElectionNamespace outside a Pod: %w", err)
		}
		ns = string(b)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	// A hung request must not cost the Lease by itself: half the renew deadline, as
	// controller-runtime sets it.
	rc := rest.CopyConfig(cfg.REST)
	rc.Timeout = max(g.renewDeadline/2, time.Second)
	rc = rest.AddUserAgent(rc, "leader-election")
	core, err := corev1client.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	coord, err := coordinationv1client.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	g.lock, err = resourcelock.New(resourcelock.LeasesResourceLock, ns, cfg.LeaderElectionID, core, coord,
		resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())})
	if err != nil {
		return nil, err
	}
	return g, nil
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// NeedLeaderElection is false: the group runs on every replica and campaigns itself.
func (g *leaderGroup) NeedLeaderElection() bool { return false }

// Start campaigns for the Lease until ctx is done, running the elected work while it is
// held.
func (g *leaderGroup) Start(ctx context.Context) error {
	for {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: g.lock, Name: g.lock.Describe(),
			LeaseDuration: g.leaseDuration, RenewDeadline: g.renewDeadline, RetryPeriod: g.retryPeriod,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: g.lead,
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return fmt.Errorf("cluster: leader election: %w", err)
		}
		// Run returns when ctx is done or when this replica stopped renewing the Lease
		// (the API server unreachable for the renew deadline, or another holder).
		le.Run(ctx)
		if ctx.Err() != nil {
			// Wait for the elected work to stop before the manager reports it stopped.
			g.term.Lock()
			g.term.Unlock() //nolint:staticcheck // an empty critical section: waiting is the point
			return nil
		}
		g.log.Warn("lost the leader Lease: status writes and tenant objects stop until it is won back; the proxy keeps serving its last configuration",
			"lease", g.lock.Describe())
		// Campaign again at once: Run's acquire loop retries every RetryPeriod while the
		// API server is unreachable or another replica holds the Lease.
	}
}

// lead runs every member until ctx (the term) ends. The leader elector calls it on a
// goroutine of its own.
func (g *leaderGroup) lead(ctx context.Context) {
	g.term.Lock()
	defer g.term.Unlock()
	if ctx.Err() != nil {
		return // the term ended before the last one's work stopped
	}
	n := g.terms.Add(1)
	g.log.Info("won the leader Lease: writing status and applying tenant objects", "lease", g.lock.Describe(), "term", n)
	var wg sync.WaitGroup
	for _, m := range g.members {
		wg.Go(func() {
			if err := m.Start(ctx); err != nil && ctx.Err() == nil {
				g.log.Error("elected work stopped", "error", err)
			}
		})
	}
	wg.Wait()
}
