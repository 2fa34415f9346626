package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/provision"
	"github.com/snigate/snigate/internal/source/cluster"
	"github.com/snigate/snigate/internal/translate"
)

const dataplaneUsage = `Usage: snigate dataplane --gateway NAMESPACE/NAME [flags]

The data plane of one Gateway, as "snigate controller --provision" deploys it (one Deployment
per Gateway, see config/README.md). It watches the API server read-only, translates that
Gateway like the controller does and serves its routing table. It writes nothing: no status,
no leader election; its admin status and condition metrics cover its Gateway and what
attaches to it. While the API server is unreachable it keeps serving its last snapshot; when
it returns, changes are picked up within a second (direct reads while the watches reconnect).

Flags:
`

func runDataplane(args []string) error {
	fs := flag.NewFlagSet("dataplane", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), dataplaneUsage)
		fs.PrintDefaults()
	}
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster config, then $KUBECONFIG or ~/.kube/config)")
	gateway := fs.String("gateway", "", "namespace/name of the Gateway to serve (required)")
	controllerName := fs.String("controller-name", translate.DefaultControllerName, "GatewayClass controllerName to answer to")
	rf := addRunFlags(fs)
	grace := shutdownGraceFlag(fs)
	adminGuard := adminAuthFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dataplane: unexpected arguments %q", fs.Args())
	}
	if *gateway == "" {
		return errors.New("dataplane: --gateway namespace/name is required")
	}
	lg, err := rf.logs()
	if err != nil {
		return err
	}
	defer lg.close()
	log := lg.log
	rc, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	m := metrics.New()
	lg.metrics(m)
	p := rf.newProxy(m, lg)
	defer paceGC()()
	c, err := cluster.New(cluster.Config{
		REST: rc, ControllerName: *controllerName, DefaultBindAddress: *rf.bind, Gateway: *gateway,
		Apply: p.Apply, Metrics: m, ReadOnly: true, Logger: log,
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
	log.Info("data plane starting", "gateway", *gateway)
	err = c.Start(ctx)
	log.Info("shutting down: draining connections", "timeout", *rf.drain)
	dctx, dcancel := context.WithTimeout(context.Background(), *rf.drain)
	defer dcancel()
	if p.Shutdown(dctx) != nil {
		log.Warn("drain timeout reached; closed remaining connections")
	}
	return err
}

// provisionFlags registers the flags of `snigate controller` that turn on data plane
// provisioning; the returned funcs give, after parsing, the options (nil: off) and the load
// balancer's pool (invalid: not given).
func provisionFlags(fs *flag.FlagSet) (func() *provision.Options, func() (netip.Prefix, error)) {
	on := fs.Bool("provision", false, "provision a data plane Deployment and LoadBalancer Service per Gateway (elected replica); status.addresses from the Service")
	pool := fs.String("load-balancer-addresses", "", "with --provision: the prefix the cluster's load balancer assigns from (e.g. 203.0.113.0/24); a Gateway asking for a static address outside it is Programmed=False/AddressNotUsable")
	image := fs.String("dataplane-image", envOr("SNIGATE_DATAPLANE_IMAGE", ""), "image of the provisioned data planes (default $SNIGATE_DATAPLANE_IMAGE)")
	pull := fs.String("dataplane-pull-policy", "", "imagePullPolicy of the provisioned data planes (Always, IfNotPresent, Never; empty: the cluster's default)")
	return func() *provision.Options {
			if !*on {
				return nil
			}
			return &provision.Options{Image: *image, ImagePullPolicy: corev1.PullPolicy(*pull)}
		}, func() (netip.Prefix, error) {
			if *pool == "" {
				return netip.Prefix{}, nil
			}
			p, err := netip.ParsePrefix(*pool)
			if err != nil {
				return p, fmt.Errorf("--load-balancer-addresses: %w", err)
			}
			return p, nil
		}
}
