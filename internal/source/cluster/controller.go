// Package cluster is snigate's cluster source: a controller-runtime manager that watches
// the Gateway API and core objects snigate routes from, hands a complete view of the cluster
// to the same runner as standalone mode (package pipeline: translate, apply, metrics), and
// writes every object's status.
//
//	c, err := cluster.New(cluster.Config{REST: cfg, Apply: p.Apply, Gateway: "infra/edge"})
//	if err != nil { ... }
//	err = c.Start(ctx) // blocks until ctx is done or leadership is lost
//
// # How it runs
//
//  1. Every kind of resources.Kinds feeds one informer cache. Any change enqueues the same
//     single key, so a burst of changes makes one translation.
//  2. The reconciler lists everything from the cache into resources.Resources and hands it
//     to the pipeline, which translates with RequireGatewayClass (a cluster is a complete
//     view: a Gateway whose class is missing is not ours).
//  3. The snapshot goes to Config.Apply, on every replica (they all serve). With
//     Config.Gateway set, the snapshot holds that Gateway only (one data plane per Gateway).
//  4. The status goes to the status writer (status.go): one goroutine, on the elected leader
//     only, that writes only what changed and retries on conflict. With Config.Provision,
//     each Gateway's addresses come from its provisioned Service first.
//  5. With Config.Provision, the elected leader also provisions a data plane per Gateway
//     (internal/provision); a data plane runs this same source with Config.ReadOnly, where
//     a watchdog switches to direct reads after an API server outage (recovery.go).
//
// Input that the translate stage rejects as a whole (it cannot pass the CRDs' validation, so
// it should not exist in a cluster) is logged; the previous snapshot and status stay.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/pipeline"
	"github.com/snigate/snigate/internal/provision"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/translate"
	"github.com/snigate/snigate/internal/trustanchor"
)

// DefaultLeaderElectionID names the Lease that elects the status writer.
const DefaultLeaderElectionID = "snigate-status-writer"

// DefaultQPS and DefaultBurst bound the controller's requests to the API server when the
// REST config sets no limit of its own.
const (
	DefaultQPS   = 500
	DefaultBurst = 1000
)

// Config configures a Controller.
type Config struct {
	// REST reaches the API server.
	REST *rest.Config
	// ControllerName selects our GatewayClasses; default translate.DefaultControllerName.
	ControllerName string
	// DefaultBindAddress is where a Gateway without spec.addresses binds; default 0.0.0.0.
	DefaultBindAddress string
	// LocalAddresses, when valid, gives every Gateway without spec.addresses an address of
	// its own from this prefix (for example 127.0.0.0/24), bound by the local proxy and
	// reported in status.addresses: many Gateways on one machine (see localaddr.go).
	LocalAddresses netip.Prefix
	// Gateway ("namespace/name"), when set, limits the snapshot given to Apply to that
	// Gateway. Status is written for every Gateway of our classes either way.
	Gateway string
	// Apply receives every new snapshot (on every replica). An error is logged and the
	// translation retried with backoff. Nil: status only.
	Apply func(*snapshot.Snapshot) error
	// Metrics receives the pipeline's generation, route and load counters (nil: a private
	// set, as in tests).
	Metrics *metrics.Metrics
	// LeaderElection elects one replica to write status; the others translate and serve.
	// Off, this process writes status unconditionally.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; required with LeaderElection outside a Pod.
	LeaderElectionNamespace string
	// LeaderElectionID is the Lease name; default DefaultLeaderElectionID.
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (controller-runtime
	// defaults when zero: 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Provision, when set, makes the elected replica provision a data plane per Gateway of
	// our classes (internal/provision: Deployment, LoadBalancer Service, ServiceAccount) and
	// takes each Gateway's status.addresses from its Service
	// (translate.Options.ProvisionedAddresses).
	Provision *provision.Options
	// LoadBalancerAddresses, with Provision, is the pool the cluster's load balancer
	// assigns from: a Gateway asking for a static address outside it is
	// Programmed=False/AddressNotUsable (translate.Options.UsableAddresses). Invalid: any
	// address is taken as assignable, and one the load balancer refuses stays
	// AddressNotAssigned.
	LoadBalancerAddresses netip.Prefix
	// ReadOnly runs no status writer and writes nothing: a provisioned data plane
	// (`snigate dataplane`), which only watches and serves. LeaderElection is ignored.
	// With Gateway, it translates that Gateway alone (pipeline.Config.GatewayStatusOnly):
	// its admin status and condition metrics cover that Gateway and what attaches to it.
	// Its listeners bind DefaultBindAddress, the Pod's: spec.addresses are its load
	// balancer's (translate.Options.ProvisionedAddresses).
	ReadOnly bool
	// HealthProbeAddress serves /healthz and /readyz of the manager ("" disables).
	HealthProbeAddress string
	Logger             *slog.Logger
}

// Controller is a running (or runnable) cluster source.
type Controller struct {
	cfg    Config
	log    *slog.Logger
	mgr    manager.Manager
	writer *statusWriter
	leader *leaderGroup // nil unless this process campaigns itself (leader.go)
	pipe   *pipeline.Runner
	local  *localAddresses // nil without Config.LocalAddresses

	// With Config.ReadOnly: the watchdog that switches to direct reads after an API server
	// outage, and the uncached reader it switches to (recovery.go).
	recovery *recovery
	direct   client.Reader

	// kinds are the resources.Kinds this cluster serves: the optional ones whose CRD is
	// missing are left out.
	kinds []*resources.Kind
	// tenants renders and applies TenantGateways on the leader (nil when the cluster does
	// not serve the kind, or on a read-only data plane).
	tenants *tenantApplier
	// interned keeps the objects of the last load (reconciles run one at a time).
	interned *interner
	// stale says that a kind translate reads changed since the pipeline's last run that
	// ended (applied, or rejected as a whole). Without a render (no TenantGateway CRD, or a
	// read-only data plane) the render's inputs do not count: what changed of them alone is
	// shown in State without translating anything. With one, every reconcile runs the
	// pipeline: the render reads more than the kinds (cert-manager's objects, the probes'
	// verdicts), and the pipeline itself tells a change of the routing table from one of
	// statuses alone.
	stale bool
	// verdicts wakes the reconciler when a certificate probe's verdict changed: the
	// statuses are rendered again.
	verdicts chan event.GenericEvent
}

// verdictChanged is the certificate probes' OnChange: a reconcile renders again.
func (c *Controller) verdictChanged() {
	select {
	case c.verdicts <- event.GenericEvent{Object: &v1alpha1.DatabaseExposure{}}:
	default:
	}
}

// Scheme returns the types the controller reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := gwv1.Install(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := cmv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

var setLoggerOnce sync.Once

// New builds the manager and its watches; nothing runs until Start.
func New(cfg Config) (*Controller, error) {
	if cfg.REST == nil {
		return nil, errors.New("cluster: Config.REST is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ControllerName == "" {
		cfg.ControllerName = translate.DefaultControllerName
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.LeaderElectionID == "" {
		cfg.LeaderElectionID = DefaultLeaderElectionID
	}
	if cfg.REST.QPS == 0 && cfg.REST.RateLimiter == nil {
		// client-go's default, 5 requests a second with bursts of 10, made a platform's
		// first render of 200 DatabaseExposures take 154 s (one TLSRoute applied every
		// 200 ms). The API server's own priority and fairness is what protects it; this
		// limit only keeps a runaway loop in bounds.
		rc := rest.CopyConfig(cfg.REST)
		rc.QPS, rc.Burst = DefaultQPS, DefaultBurst
		cfg.REST = rc
	}
	c := &Controller{cfg: cfg, log: cfg.Logger}
	if cfg.LocalAddresses.IsValid() {
		l, err := newLocalAddresses(cfg.LocalAddresses)
		if err != nil {
			return nil, err
		}
		c.local = l
	}
	// controller-runtime logs through logr; route it to our slog handler once per process.
	setLoggerOnce.Do(func() { crlog.SetLogger(logr.FromSlogHandler(cfg.Logger.Handler())) })

	if cfg.ReadOnly {
		cfg.LeaderElection, cfg.Provision = false, nil
	}
	// With a local proxy the process campaigns itself (leaderGroup), so that a lost Lease
	// stops only the elected work, never the proxy; with --provision the manager's own
	// election runs the provisioner's controllers too.
	campaign := cfg.LeaderElection && cfg.Provision == nil
	var elected []elected
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	opts := manager.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // snigate has its own /metrics
		HealthProbeBindAddress:        cfg.HealthProbeAddress,
		LeaderElection:                cfg.LeaderElection && !campaign,
		LeaderElectionID:              cfg.LeaderElectionID,
		LeaderElectionNamespace:       cfg.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Logger:                        logr.FromSlogHandler(cfg.Logger.Handler()),
	}
	// Nothing here reads managedFields (status goes out as patches, rendered objects by
	// apply or update, where the API server keeps the managed fields a request leaves out),
	// and they are often the largest part of a cached object: 10 000 exposures and their
	// routes carry tens of MiB of them.
	opts.Cache.DefaultTransform = cache.TransformStripManagedFields()
	if cfg.Provision != nil {
		opts.Cache.ByObject = provision.CacheByObject()
	}
	if cfg.ReadOnly {
		// A data plane must pick up changes within a second of the API server's return,
		// sooner than client-go's watch retry backoff allows (recovery.go); the watchdog
		// learns from the informers whether a watch broke.
		probe, err := restProbe(cfg.REST)
		if err != nil {
			return nil, err
		}
		c.recovery = newRecovery(probe, cfg.Logger.With("component", "recovery"))
		opts.Cache.DefaultWatchErrorHandler = c.recovery.watchFailed
	}
	if cfg.LeaseDuration > 0 {
		opts.LeaseDuration = &cfg.LeaseDuration
	}
	if cfg.RenewDeadline > 0 {
		opts.RenewDeadline = &cfg.RenewDeadline
	}
	if cfg.RetryPeriod > 0 {
		opts.RetryPeriod = &cfg.RetryPeriod
	}
	mgr, err := ctrl.NewManager(cfg.REST, opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: manager: %w", err)
	}
	c.mgr = mgr
	usable := cfg.LocalAddresses
	if cfg.Provision != nil && cfg.LoadBalancerAddresses.IsValid() {
		usable = cfg.LoadBalancerAddresses
	}
	pc := pipeline.Config{
		Apply: cfg.Apply, Metrics: cfg.Metrics, Logger: cfg.Logger, Gateway: cfg.Gateway,
		// A data plane writes no status: its one Gateway is all it translates.
		GatewayStatusOnly: cfg.ReadOnly,
		Translate: translate.Options{
			ControllerName:      cfg.ControllerName,
			DefaultBindAddress:  cfg.DefaultBindAddress,
			RequireGatewayClass: true,
			// Provisioned Gateways are reached through their LoadBalancer Services, and
			// their data planes bind their Pods' addresses.
			ProvisionedAddresses: cfg.Provision != nil || cfg.ReadOnly,
			// A local proxy binds only addresses of its prefix; a load balancer assigns
			// only addresses of its pool.
			UsableAddresses: usable,
		},
	}
	if !cfg.ReadOnly {
		c.writer = newStatusWriter(mgr.GetClient(), mgr.GetAPIReader(), cfg.ControllerName, cfg.Metrics, cfg.Logger.With("component", "status-writer"))
		if campaign {
			elected = append(elected, c.writer)
		} else if err := mgr.Add(c.writer); err != nil {
			return nil, err
		}
		pc.Publish = c.writer.Publish
	}
	if p := cfg.Provision; p != nil {
		o := *p
		o.ControllerName = cfg.ControllerName
		if o.Logger == nil {
			o.Logger = cfg.Logger
		}
		if err := provision.Setup(mgr, o); err != nil {
			return nil, err
		}
	}
	if cfg.HealthProbeAddress != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
	}

	// One key for everything: the workqueue folds bursts of events into one translation.
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: "cluster"}}}
	})
	// Gateway API objects: status writes (ours included) change neither generation, labels
	// nor annotations, and must not trigger a translation.
	spec := builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
		predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))
	b := ctrl.NewControllerManagedBy(mgr).
		Named("snigate").
		WithOptions(controller.Options{
			// Every replica translates and serves; only the status writer is elected.
			NeedLeaderElection:      ptr.To(false),
			MaxConcurrentReconciles: 1,
			// Names only label metrics, which snigate turns off; a process may hold several
			// (a test runs the controller and a data plane side by side).
			SkipNameValidation: ptr.To(true),
		})
	// Kinds whose CRD this cluster may lack are watched only where they are served.
	for i := range resources.Kinds {
		k := &resources.Kinds[i]
		if cfg.ReadOnly && k.RenderInput {
			continue
		}
		if k.Optional {
			_, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: k.Group, Kind: k.Name}, k.Versions[0])
			if meta.IsNoMatchError(err) {
				cfg.Logger.Info("kind not served by this cluster (its CRD is not installed); not watching it",
					"kind", k.Name, "apiVersion", k.Group+"/"+k.Versions[0])
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("cluster: looking up %s: %w", k.Name, err)
			}
		}
		c.kinds = append(c.kinds, k)
	}
	if !cfg.ReadOnly && slices.ContainsFunc(c.kinds, func(k *resources.Kind) bool { return k.Name == "TenantGateway" }) {
		// cert-manager is optional too: without its CRDs the HTTPS listeners of http01 and
		// dns01 TenantGateways say CertManagerNotInstalled.
		_, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}, "v1")
		if err != nil && !meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("cluster: looking up cert-manager's Certificate: %w", err)
		}
		certManager := err == nil
		c.verdicts = make(chan event.GenericEvent, 1)
		c.tenants = newTenantApplier(mgr.GetClient(), mgr.GetCache(), certManager, cfg.Metrics, cfg.Logger.With("component", "tenants"), c.verdictChanged)
		c.tenants.newFirst = cfg.Provision != nil
		b = b.WatchesRawSource(source.Channel(c.verdicts, all))
		// The controller renders the TenantGateways itself and serves what they render
		// (pipeline.Config.Render); the tenant applier applies the same render.
		pc.Render, pc.Cluster = true, true
		pc.RenderInputs = func(o *render.Options) {
			if err := c.tenants.renderInputs(context.Background(), o); err != nil {
				c.log.Warn("reading cert-manager's objects for the render", "error", err)
			}
		}
		c.tenants.events = mgr.GetEventRecorder("snigate")
		if slices.ContainsFunc(c.kinds, func(k *resources.Kind) bool { return k.Name == "TrustAnchor" }) {
			// A TrustAnchor's Role and RoleBinding are watched: one deleted or edited by hand
			// is put back at once (its Secret is watched with every Secret).
			anchored := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				_, ok := o.GetLabels()[trustanchor.LabelTrustAnchor]
				return ok
			}))
			b = b.Watches(&rbacv1.Role{}, all, anchored).Watches(&rbacv1.RoleBinding{}, all, anchored)
		}
		if campaign {
			elected = append(elected, c.tenants)
		} else if err := mgr.Add(c.tenants); err != nil {
			return nil, err
		}
		if certManager {
			// cert-manager's objects are watched too: an owned Certificate deleted or
			// edited by hand is put back at once, and a foreign one created or deleted at
			// a rendered name turns NameInUse on or off. Updates of objects the
			// TenantGateways do not own (cert-manager's own status writes) are not.
			labelled := func(o client.Object) bool {
				_, ok := o.GetLabels()[render.LabelTenantGateway]
				return ok
			}
			changed := predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})
			certManagerEvents := builder.WithPredicates(predicate.Funcs{
				CreateFunc: func(event.CreateEvent) bool { return true },
				DeleteFunc: func(event.DeleteEvent) bool { return true },
				UpdateFunc: func(e event.UpdateEvent) bool {
					return (labelled(e.ObjectOld) || labelled(e.ObjectNew)) && changed.Update(e)
				},
				GenericFunc: func(event.GenericEvent) bool { return false },
			})
			b = b.Watches(&cmv1.Certificate{}, all, certManagerEvents).Watches(&cmv1.Issuer{}, all, certManagerEvents)
		}
	}
	for _, k := range c.kinds {
		if k.OwnStatus {
			b = b.Watches(k.New(), all, spec)
		} else {
			b = b.Watches(k.New(), all)
		}
	}
	if cfg.ReadOnly {
		c.direct, err = directReader(cfg.REST, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(c.recovery); err != nil {
			return nil, err
		}
		b = b.WatchesRawSource(source.Channel(c.recovery.kick, all))
	}
	if c.local != nil {
		pc.Prepare = c.local.assign
	}
	if c.pipe, err = pipeline.New(pc); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if campaign {
		if c.leader, err = newLeaderGroup(cfg, cfg.Logger.With("component", "leader"), elected...); err != nil {
			return nil, err
		}
		if err := mgr.Add(c.leader); err != nil {
			return nil, err
		}
	}
	c.interned = newInterner(len(c.kinds))
	if err := b.Complete(reconcile.Func(c.reconcile)); err != nil {
		return nil, fmt.Errorf("cluster: controller: %w", err)
	}
	return c, nil
}

// Start runs the manager until ctx is done. It returns an error when the manager fails. A
// lost leader Lease stops only the status writer and the tenant applier (they start again
// when this replica wins it back), except with Provision, where it ends the manager.
func (c *Controller) Start(ctx context.Context) error { return c.mgr.Start(ctx) }

// Client returns the manager's (cached) client.
func (c *Controller) Client() client.Client { return c.mgr.GetClient() }

// StatusWrites is the number of status updates this process has sent.
func (c *Controller) StatusWrites() int64 {
	if c.writer == nil {
		return 0
	}
	return c.writer.writes.Load()
}

// Runner is the pipeline this controller feeds: its State is what the admin server shows.
func (c *Controller) Runner() *pipeline.Runner { return c.pipe }

func (c *Controller) reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	res, translated, err := c.load(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	render := c.tenants != nil
	c.stale = c.stale || translated || render
	if c.stale {
		err = c.pipe.Run(res)
		var invalid *pipeline.InputError
		switch {
		case errors.As(err, &invalid):
			c.stale = false
			if c.pipe.Generation() == 0 {
				c.log.Error("cluster state rejected by translate; nothing served yet", "error", err)
			}
			return reconcile.Result{}, nil // retrying the same input cannot help; the next change will
		case err != nil:
			return reconcile.Result{}, err // retried with backoff
		}
		c.stale = false
	} else {
		c.pipe.TenantObjects(res)
	}
	if rendered := c.pipe.Rendered(); render && rendered != nil {
		c.tenants.Publish(res, rendered, c.pipe.Status())
	}
	return reconcile.Result{}, nil
}

// load lists every kind from the informer cache, or from the API server itself while the
// recovery watchdog says the cache may lag behind (recovery.go), and says whether a kind
// translate reads changed since the last load.
func (c *Controller) load(ctx context.Context) (*resources.Resources, bool, error) {
	direct := c.recovery != nil && c.recovery.direct()
	var objs [][]resources.Object
	var err error
	if direct {
		objs, err = c.listDirect(ctx)
	} else {
		objs, err = c.listCached(ctx)
	}
	if err != nil {
		return nil, false, err
	}
	res := &resources.Resources{}
	translated := false
	for i, k := range c.kinds {
		// A list's new objects are copied out of it (intern.go); the cache's are kept.
		kept, changed := c.interned.intern(i, objs[i], k.OwnStatus, direct)
		k.Set(res, kept)
		translated = translated || (changed && !k.RenderInput)
	}
	return res, translated, nil
}

// listDirect lists every kind straight from the API server, every kind at once: a change
// made during an outage must be served within a second of its return, and one round trip
// per kind in a row, on a loaded API server, can take longer than that alone.
func (c *Controller) listDirect(ctx context.Context) ([][]resources.Object, error) {
	ctx, cancel := context.WithTimeout(ctx, directTimeout)
	defer cancel()
	objs := make([][]resources.Object, len(c.kinds))
	var g errgroup.Group
	for i, k := range c.kinds {
		g.Go(func() error {
			list := k.NewList()
			if err := c.direct.List(ctx, list); err != nil {
				return fmt.Errorf("listing %ss: %w", k.Name, err)
			}
			var one resources.Resources
			if err := k.SetList(&one, list); err != nil {
				return err
			}
			objs[i] = k.Objects(&one)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return objs, nil
}
