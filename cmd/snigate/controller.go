package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/proxy"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/source/cluster"
	"github.com/snigate/snigate/internal/translate"
)

// controllerUsage documents `snigate controller`.
const controllerUsage = `Usage: snigate controller [flags]

Runs snigate against a Kubernetes API server: watches the Gateway API and core objects,
translates them like "snigate serve" does with files, writes the status of every object of
snigate's GatewayClasses (one elected replica writes), and, unless --proxy=false, serves the
routing table in this process.

  snigate controller --kubeconfig ~/.kube/config --gateway infra/edge
      one process: controller + data plane for the Gateway infra/edge
  snigate controller --proxy=false
      status only (in a Pod: in-cluster config, Lease in $POD_NAMESPACE)

Without --gateway the local proxy serves every Gateway of snigate's classes.

Flags:
`

func runController(args []string) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), controllerUsage)
		fs.PrintDefaults()
	}
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster config, then $KUBECONFIG or ~/.kube/config)")
	gateway := fs.String("gateway", "", "namespace/name of the one Gateway the local proxy serves (default: all of snigate's)")
	serveProxy := fs.Bool("proxy", true, "serve the routing table in this process (off with --provision: the data planes serve)")
	controllerName := fs.String("controller-name", translate.DefaultControllerName, "GatewayClass controllerName to answer to")
	leaderElect := fs.Bool("leader-elect", true, "elect one replica to write status (Lease "+cluster.DefaultLeaderElectionID+")")
	leaseNS := fs.String("leader-election-namespace", envOr("POD_NAMESPACE", "default"), "namespace of the leader election Lease")
	leaseDuration := fs.Duration("leader-elect-lease-duration", 15*time.Second, "how long a Lease holder that stopped renewing keeps it before another replica may take it")
	renewDeadline := fs.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the holder keeps trying to renew before it stops its elected work (with --proxy, the proxy keeps serving and the replica campaigns again)")
	retryPeriod := fs.Duration("leader-elect-retry-period", 2*time.Second, "how often a replica tries to take or renew the Lease")
	probes := fs.String("health-probe-address", "", "address for the controller's /healthz and /readyz (empty disables)")
	rf := addRunFlags(fs)
	grace := shutdownGraceFlag(fs)
	adminGuard := adminAuthFlag(fs)
	localAddrs := fs.String("local-addresses", "", "prefix (e.g. 127.0.0.0/24) giving each Gateway without spec.addresses its own address, bound locally and written to status.addresses (tests, conformance)")
	provisionOpts, lbPool := provisionFlags(fs) // dataplane.go
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("controller: unexpected arguments %q", fs.Args())
	}
	lg, err := rf.logs()
	if err != nil {
		return err
	}
	defer lg.close()
	log := lg.log
	var local netip.Prefix
	if *localAddrs != "" {
		if local, err = netip.ParsePrefix(*localAddrs); err != nil {
			return fmt.Errorf("--local-addresses: %w", err)
		}
	}
	pool, err := lbPool()
	if err != nil {
		return err
	}
	if provisionOpts() != nil {
		// The provisioned data planes serve every Gateway, each on its own Pods; a local
		// proxy would bind all of them on this host's addresses at once.
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "proxy" })
		if explicit && *serveProxy {
			return errors.New("controller: --provision serves traffic from the provisioned data planes; drop --proxy (or set --proxy=false)")
		}
		*serveProxy = false
	}
	rc, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	m := metrics.New()
	lg.metrics(m)
	defer collectWhenIdle()()
	var p *proxy.Proxy
	var apply func(*snapshot.Snapshot) error
	if *serveProxy {
		p = rf.newProxy(m, lg)
		defer paceGC()()
		apply = p.Apply
	}
	c, err := cluster.New(cluster.Config{
		REST: rc, ControllerName: *controllerName, DefaultBindAddress: *rf.bind, Gateway: *gateway,
		Apply: apply, Metrics: m, LeaderElection: *leaderElect, LeaderElectionNamespace: *leaseNS,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
		HealthProbeAddress: *probes, Logger: log, LocalAddresses: local,
		Provision: provisionOpts(), LoadBalancerAddresses: pool,
	})
	if err != nil {
		return err
	}
	guard, err := adminGuard(rc)
	if err != nil {
		return err
	}
	sd := &shutdown{grace: *grace, log: log}
	closeAdmin, err := startAdmin(rf, m, sd.state(c.Runner().State), log, guard)
	if err != nil {
		return err
	}
	defer closeAdmin()

	ctx, stop := sd.context()
	defer stop()
	log.Info("controller starting", "controllerName", *controllerName, "gateway", *gateway, "proxy", *serveProxy)
	err = c.Start(ctx)
	if p != nil {
		log.Info("shutting down: draining connections", "timeout", *rf.drain)
		dctx, dcancel := context.WithTimeout(context.Background(), *rf.drain)
		if p.Shutdown(dctx) != nil {
			log.Warn("drain timeout reached; closed remaining connections")
		}
		dcancel()
	}
	return err
}

// restConfig: an explicit --kubeconfig wins; then the in-cluster config; then the usual
// kubeconfig loading rules ($KUBECONFIG, ~/.kube/config).
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		} else if !errors.Is(err, rest.ErrNotInCluster) {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
