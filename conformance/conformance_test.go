//go:build linux

// Package conformance runs the upstream Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance v1.6.3, profiles GATEWAY-TLS, GATEWAY-HTTP and
// GATEWAY-TCP) against snigate, twice, each time on a fresh kube-apiserver + etcd (envtest)
// with the real `snigate controller` binary and a stand-in for the missing node
// (kubelet_test.go) that runs the echo-basic backends in network namespaces:
//
//   - TestConformance: the controller's local proxy serves every Gateway on its own
//     127.0.0.N address (report.yaml);
//
//   - TestConformanceProvisioned: the controller provisions a data plane per Gateway, and
//     the stand-in runs those `snigate dataplane` Pods behind a stand-in load balancer
//     (provisioned_test.go; report-provisioned.yaml).
//
//     SNIGATE_CONFORMANCE=1 go test ./conformance -run TestConformance -timeout 40m -v
//
// Needs root (network namespaces, ports 80 and 443) and the binaries of
// scripts/install-kube.sh. See docs/conformance.md.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/apis/v1alpha2"
	"sigs.k8s.io/gateway-api/apis/v1alpha3"
	"sigs.k8s.io/gateway-api/apis/v1beta1"
	xv1alpha1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/utils/config"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
	"github.com/snigate/snigate/internal/translate"
)

const (
	gatewayClassName = "gateway-conformance"
	repoRoot         = ".."
	// localAddresses is the prefix the controller hands out, one address per Gateway.
	localAddresses = "127.0.0.0/24"
	// loadBalancerPool is the provisioned run's load balancer pool (provisioned_test.go).
	loadBalancerPool = "127.0.1.0/24"
)

// harness is one way of running snigate under the suite.
type harness struct {
	name string // artifacts folder, report suffix
	// args of `snigate controller` beyond the kubeconfig and logging.
	args []string
	// usable and unusable static addresses for GatewayStaticAddresses.
	usable, unusable string
	// provisioned: the controller provisions a data plane per Gateway, which the kubelet
	// stand-in runs behind a stand-in load balancer.
	provisioned bool
}

// TestConformance runs the suite against `snigate controller` with its local proxy serving
// every Gateway, each on its own 127.0.0.N (--local-addresses).
func TestConformance(t *testing.T) {
	run(t, harness{
		name: "local",
		args: []string{"--local-addresses", localAddresses, "--hello-timeout", "5s"},
		// The local proxy binds 127.0.0.0/24: an address there that it never hands out is
		// usable, one outside it is not.
		usable: "127.0.0.250", unusable: "192.0.2.1",
	})
}

// TestConformanceProvisioned runs the suite against snigate as a cluster runs it:
// `snigate controller --proxy=false --provision` writes status and provisions a Deployment,
// a LoadBalancer Service and a ServiceAccount per Gateway, and the traffic goes through the
// `snigate dataplane` processes the kubelet stand-in runs for those Deployments, on the
// addresses its stand-in load balancer assigns (provisioned_test.go). GatewayInfrastructure
// is claimed here only: it is about the objects provisioning generates.
func TestConformanceProvisioned(t *testing.T) {
	run(t, harness{
		name: "provisioned",
		args: []string{"--proxy=false", "--provision", "--dataplane-image", dataPlaneImage,
			"--load-balancer-addresses", loadBalancerPool},
		// The load balancer assigns from 127.0.1.0/24 and hands out .2-.200 by itself.
		usable: "127.0.1.250", unusable: "192.0.2.1",
		provisioned: true,
	})
}

func run(t *testing.T, h harness) {
	if os.Getenv("SNIGATE_CONFORMANCE") != "1" {
		// scripts/test.sh (and so CI) runs it on its own, with SNIGATE_CONFORMANCE=1, after
		// the other packages: under CI=true the gate missing is a broken setup, not a skip.
		testutil.Require(t, "SNIGATE_CONFORMANCE=1 (the Gateway API conformance suite, docs/conformance.md; scripts/test.sh sets it)",
			errors.New("not set"))
	}
	if os.Geteuid() != 0 {
		testutil.Require(t, "root", errors.New("network namespaces and ports 80/443 need root"))
	}
	kubetest.RequireBinaries(t)
	_, err := exec.LookPath("ip")
	testutil.Require(t, "iproute2", err)
	// One run per machine: two runs would bind the same 127.0.0.N:80/443 and each would
	// delete the other's network namespaces as leftovers of a killed run.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "snigate-conformance.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("another conformance run is in progress on this machine (%s is locked): %v", lock.Name(), err)
	}
	started := time.Now()

	// Artifacts: binaries, logs, Pod files. Kept after the run for diagnosis.
	art, err := filepath.Abs(filepath.Join(envOr("SNIGATE_CONFORMANCE_ARTIFACTS", "_artifacts"), h.name))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(art)
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("artifacts (logs, binaries): %s", art)
	logFile, err := os.Create(filepath.Join(art, "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, nil))
	crlog.SetLogger(zap.New(zap.WriteTo(logFile), zap.UseDevMode(true)))

	snigate := filepath.Join(art, "snigate")
	echo := filepath.Join(art, "echo-basic")
	goBuild(t, snigate, "./cmd/snigate")
	goBuild(t, echo, "sigs.k8s.io/gateway-api/conformance/echo-basic")

	// A fresh API server and etcd, with the standard-channel CRDs of the install manifests.
	// No ServiceAccount admission: there is no token controller to create the default
	// ServiceAccounts the Pods of the suite's Deployments would need.
	// A /16 of Service addresses: the provisioned run adds a LoadBalancer Service per
	// Gateway to the suite's own.
	apiOpts := kubetest.Options{
		CRDs: kubetest.StandardCRDs(t),
		APIServerFlags: map[string]string{
			"disable-admission-plugins": "ServiceAccount", "service-cluster-ip-range": "10.96.0.0/16",
		},
	}
	var env *envtest.Environment
	if h.provisioned {
		// With the install's RBAC: the controller and every data plane run as their own
		// ServiceAccounts (impersonated), with what the manifests grant them and no more.
		env = kubetest.StartCluster(t, kubetest.ClusterOptions{Options: apiOpts}).Env
	} else {
		env = kubetest.StartAPIServer(t, apiOpts)
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "conformance", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(art, "kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ctrlKC := kcPath
	if h.provisioned {
		ctrlKC = filepath.Join(art, "kubeconfig-controller")
		if err := kubetest.WriteKubeconfig(kubeconfig, kubetest.ControllerUser, ctrlKC); err != nil {
			t.Fatal(err)
		}
	}

	// The suite builds per-test clients from ClientOptions, which (empty) use client-go's
	// global scheme: register the Gateway API types there, as conformance.DefaultOptions does.
	scheme := clientgoscheme.Scheme
	for _, add := range []func(*runtime.Scheme) error{
		apiextensionsv1.AddToScheme, gwv1.Install, v1beta1.Install,
		v1alpha2.Install, v1alpha3.Install, xv1alpha1.Install,
	} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cfg := user.Config()
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The GatewayClass the suite uses, answered by snigate.
	if err := cl.Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayClassName},
		Spec:       gwv1.GatewayClassSpec{ControllerName: translate.DefaultControllerName},
	}); err != nil {
		t.Fatal(err)
	}

	// snigate controller, the real binary: status for everything, and either a local proxy
	// that serves every Gateway on its own loopback address or provisioned data planes.
	ctrlLog, err := os.Create(filepath.Join(art, "snigate.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctrl := exec.Command(snigate, append([]string{"controller", "--kubeconfig", ctrlKC,
		"--leader-elect=false", "--admin", "127.0.0.1:0",
		"--log-level", envOr("SNIGATE_CONFORMANCE_LOG_LEVEL", "info")}, h.args...)...)
	ctrl.Stdout, ctrl.Stderr = ctrlLog, ctrlLog
	ctrl.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ctrl.Start(); err != nil {
		t.Fatal(err)
	}
	ctrlDone := make(chan error, 1)
	go func() { ctrlDone <- ctrl.Wait(); ctrlLog.Close() }()
	t.Cleanup(func() {
		_ = ctrl.Process.Signal(syscall.SIGTERM)
		select {
		case <-ctrlDone:
		case <-time.After(40 * time.Second):
			_ = ctrl.Process.Kill()
			t.Error("snigate controller did not stop within 40s of SIGTERM")
		}
	})

	// The stand-in for the node: Pods, echo-basic processes, EndpointSlices.
	cleanupStale(log)
	kctx, kstop := context.WithCancel(ctx)
	// The stand-ins have a client of their own, without client-side throttling: they
	// poll every 250 ms and must not slow the suite's own requests down.
	kcfg := rest.CopyConfig(cfg)
	kcfg.QPS, kcfg.Burst = -1, 0
	kcl, err := client.New(kcfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := newKubelet(kcl, echo, filepath.Join(art, "pods"), log.With("component", "kubelet"))
	if h.provisioned {
		k.dp = &dataPlanes{image: dataPlaneImage, snigate: snigate, kubeconfig: kubeconfig,
			pool: netip.MustParsePrefix(loadBalancerPool), assigned: map[types.NamespacedName]netip.Addr{}}
	}
	kdone := make(chan struct{})
	go func() { k.Run(kctx); close(kdone) }()
	t.Cleanup(func() { kstop(); <-kdone })

	// The suite checks the class itself; waiting here gives a clearer error when the
	// controller does not come up.
	var gc gwv1.GatewayClass
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := cl.Get(ctx, client.ObjectKey{Name: gatewayClassName}, &gc)
		if err == nil && meta.IsStatusConditionTrue(gc.Status.Conditions, string(gwv1.GatewayClassConditionStatusAccepted)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GatewayClass %s not Accepted within 60s (see %s): %v %+v", gatewayClassName, filepath.Join(art, "snigate.log"), err, gc.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}

	report, err := filepath.Abs(reportPath(envOr("SNIGATE_CONFORMANCE_REPORT", "report.yaml"), h))
	if err != nil {
		t.Fatal(err)
	}
	opts := suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName:     gatewayClassName,
			CleanupBaseResources: false, // no namespace controller; every run starts on a fresh etcd
			CleanupTestResources: true,
			Mode:                 "default",
			TimeoutConfig:        config.DefaultTimeoutConfig(),
			ReportOutputPath:     report,
			ConformanceProfiles: []suite.ConformanceProfileName{
				suite.GatewayTLSConformanceProfileName, suite.GatewayHTTPConformanceProfileName,
				suite.GatewayTCPConformanceProfileName,
			},
			Implementation: confv1.Implementation{
				Organization: "snigate",
				Project:      "snigate",
				URL:          "https://github.com/snigate/snigate",
				Version:      version(),
				Contact:      []string{"https://github.com/snigate/snigate/issues"},
			},
			UsableNetworkAddresses:   []gwv1.GatewaySpecAddress{{Type: new(gwv1.IPAddressType), Value: h.usable}},
			UnusableNetworkAddresses: []gwv1.GatewaySpecAddress{{Type: new(gwv1.IPAddressType), Value: h.unusable}},
			RunTest:                  os.Getenv("SNIGATE_CONFORMANCE_RUN_TEST"),
			SkipTests:                splitList(os.Getenv("SNIGATE_CONFORMANCE_SKIP_TESTS")),
		},
		Client:     cl,
		Clientset:  cs,
		RestConfig: cfg,
		ManifestFS: []fs.FS{&conformance.Manifests},
	}
	// Supported features come from the GatewayClass status that snigate writes (the suite
	// infers them), except with RunTest, where the suite does not infer: then the same list
	// from translate.Features.
	if opts.RunTest != "" {
		for _, f := range translate.Features(translate.Options{ProvisionedAddresses: h.provisioned}) {
			opts.SupportedFeatures = append(opts.SupportedFeatures, features.FeatureName(f.Name))
		}
	}
	t.Logf("published supportedFeatures: %v", gc.Status.SupportedFeatures)
	t.Cleanup(func() { t.Logf("conformance run took %s", time.Since(started).Round(time.Second)) })
	conformance.RunConformanceWithOptions(t, opts)
}

// reportPath is where run h writes its report: path for the local run, path with
// "-<name>" before its extension for the others (report.yaml -> report-provisioned.yaml).
func reportPath(path string, h harness) string {
	if h.name == "local" {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + h.name + ext
}

func goBuild(t *testing.T, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
}

func version() string {
	out, err := exec.Command("git", "-C", repoRoot, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "dev"
	}
	return "dev-" + strings.TrimSpace(string(out))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, f)
	}
	return out
}
