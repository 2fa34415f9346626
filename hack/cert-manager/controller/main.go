// Command controller runs cert-manager's controllers (v1.21.2) against a Kubernetes API
// server, for snigate's certificate tests.
//
// Why this file exists: cert-manager publishes its controllers as packages of the
// github.com/cert-manager/cert-manager module, but its own main (cmd/controller) is a module
// that is never published to the Go module proxy (it replaces cert-manager with a relative
// path), so `go install` cannot build it. This main does what upstream's does with the
// public packages only: build a controller.ContextFactory, construct every registered
// controller, run them, and start the shared informers. No metrics server, no leader
// election, no webhook: the tests run one instance beside a test API server.
//
//	controller --kubeconfig FILE --cluster-resource-namespace NS \
//	    [--acme-http01-solver-nameservers HOST:PORT] [--dns01-recursive-nameservers HOST:PORT]
//
// scripts/install-cert-manager.sh builds it once per machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// The controllers upstream enables by default, minus ingress-shim (no Ingresses here),
	// plus gateway-shim (Gateway API support on). Importing a package registers it.
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmechallenges"
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmeorders"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/gateways"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/acme"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// The issuer kinds the tests use.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/acme"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	var (
		kubeconfig      = flag.String("kubeconfig", "", "kubeconfig of the API server")
		clusterNS       = flag.String("cluster-resource-namespace", "cert-manager", "namespace of ClusterIssuers' Secrets")
		http01NS        = flag.String("acme-http01-solver-nameservers", "", "comma-separated HOST:PORT DNS servers for the HTTP-01 self check")
		dns01NS         = flag.String("dns01-recursive-nameservers", "", "comma-separated HOST:PORT DNS servers for the DNS-01 self check")
		solverImage     = flag.String("acme-http01-solver-image", "quay.io/jetstack/cert-manager-acmesolver:v1.21.2", "image named in HTTP-01 solver Pods")
		checkRetry      = flag.Duration("check-retry-period", 2*time.Second, "wait between HTTP-01/DNS-01 self checks")
		minBackoff      = flag.Duration("certificate-request-minimum-backoff", 5*time.Second, "first wait after a failed issuance")
		workers         = flag.Int("workers", 5, "workers per controller")
		version         = flag.Bool("version", false, "print the version and exit")
		controllersFlag = flag.String("controllers", "", "comma-separated controllers to run (default: every linked one)")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if *version {
		fmt.Println("cert-manager-controller v1.21.2")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background(), "cert-manager")
	if err := run(ctx, options{
		kubeconfig: *kubeconfig, clusterNS: *clusterNS, http01NS: split(*http01NS), dns01NS: split(*dns01NS),
		solverImage: *solverImage, checkRetry: *checkRetry, minBackoff: *minBackoff, workers: *workers,
		controllers: split(*controllersFlag),
	}); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager controller:", err)
		os.Exit(1)
	}
}

type options struct {
	kubeconfig, clusterNS, solverImage string
	http01NS, dns01NS, controllers     []string
	checkRetry, minBackoff             time.Duration
	workers                            int
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func run(ctx context.Context, o options) error {
	opts := controller.ContextOptions{
		Kubeconfig:         o.kubeconfig,
		KubernetesAPIQPS:   50,
		KubernetesAPIBurst: 100,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: o.clusterNS},
		ACMEOptions: controller.ACMEOptions{
			HTTP01SolverImage:                 o.solverImage,
			HTTP01SolverResourceRequestCPU:    resource.MustParse("10m"),
			HTTP01SolverResourceRequestMemory: resource.MustParse("64Mi"),
			HTTP01SolverResourceLimitsCPU:     resource.MustParse("100m"),
			HTTP01SolverResourceLimitsMemory:  resource.MustParse("64Mi"),
			ACMEHTTP01SolverRunAsNonRoot:      true,
			HTTP01SolverNameservers:           o.http01NS,
			DNS01Nameservers:                  o.dns01NS,
			DNS01CheckAuthoritative:           len(o.dns01NS) == 0,
			DNS01CheckRetryPeriod:             o.checkRetry,
		},
		SchedulerOptions: controller.SchedulerOptions{MaxConcurrentChallenges: 60},
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: o.minBackoff,
			CertificateRequestMaximumBackoffDuration: 8 * o.minBackoff,
		},
		ConfigOptions: controller.ConfigOptions{EnableGatewayAPI: true},
	}
	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	names := make([]string, 0, len(controller.Known()))
	for name := range controller.Known() {
		if len(o.controllers) == 0 || slices.Contains(o.controllers, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		c, err := controller.Known()[name](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		g.Go(func() error { return c.Run(o.workers, ctx) })
	}
	klog.InfoS("cert-manager controllers running", "controllers", names, "gatewayAPI", base.GatewaySolverEnabled)
	// Informers start after every controller has asked for the ones it needs, as upstream.
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	if base.GatewaySolverEnabled {
		base.GWShared.Start(ctx.Done())
	}
	return g.Wait()
}
