// Package kubetest starts a real etcd and kube-apiserver for tests and helps them talk to it:
// the API server that scripts/install-kube.sh builds, with the Gateway API CRDs and the
// install manifests' RBAC, objects applied from YAML files, and a polling wait for the
// controller's effects.
//
// Most tests want StartCluster: an API server with the CRDs of config/crd/standard and the
// RBAC of the install manifests (namespace snigate-system, the controller's ServiceAccount
// and its roles), an admin client and config, and impersonation of the controller's
// ServiceAccount, which has those permissions and no more:
//
//	cluster := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme}) // stopped in t.Cleanup
//	cluster.Apply(t, "testdata/cluster.yaml")                                    // as admin
//	ctrl, err := cluster.New(cluster.Config{REST: cluster.As(kubetest.ControllerUser), ...})
//	kubetest.Eventually(t, 30*time.Second, "Gateway programmed", func() error { ... cluster.Client.Get(...) ... })
//
// StartAPIServer is the bare API server, for a test that brings its own RBAC or none.
//
// The API server alone collects no garbage: deleting an owner leaves its dependents. A test
// that must see them go sets Options.GarbageCollector, which runs kube-controller-manager's
// garbage collector beside it (StartControllerManager):
//
//	cluster := kubetest.StartCluster(t, kubetest.ClusterOptions{Options: kubetest.Options{GarbageCollector: true}})
//
// A missing binary (kube-apiserver, etcd, and kube-controller-manager when asked for) skips
// the test, or fails it under CI=true (testutil.Require).
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/snigate/snigate/internal/testutil"
)

// Version is the kube-apiserver that scripts/install-kube.sh builds.
const Version = "1.36.3"

// AssetsDir is where scripts/install-kube.sh leaves kube-apiserver and etcd, unless
// KUBEBUILDER_ASSETS says otherwise.
func AssetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "snigate", "kube-"+Version)
}

// RequireBinaries stops the test (skip, or fail under CI=true) unless kube-apiserver and
// etcd are in AssetsDir.
func RequireBinaries(t testing.TB) {
	t.Helper()
	dir := AssetsDir()
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			testutil.Require(t, bin+" in "+dir, fmt.Errorf("%w (run scripts/install-kube.sh)", err))
		}
	}
}

// Options configures StartAPIServer.
type Options struct {
	// CRDs are the files of the CRDs to install (StandardCRDs, KustomizedCRDs).
	CRDs []string
	// APIServerFlags are extra kube-apiserver flags, name without dashes → value, e.g.
	// "disable-admission-plugins": "ServiceAccount".
	APIServerFlags map[string]string
	// GarbageCollector runs kube-controller-manager beside the API server with its garbage
	// collector and namespace controller (StartControllerManager), so that deleting an owner
	// deletes what it owns, as in a real cluster; the API server alone never does.
	GarbageCollector bool
}

// StartAPIServer starts a private etcd and kube-apiserver with the CRDs of o.CRDs
// installed, and kube-controller-manager if o.GarbageCollector, and stops them in t.Cleanup.
// Env.Config is an admin (system:masters) config.
func StartAPIServer(t testing.TB, o Options) *envtest.Environment {
	t.Helper()
	RequireBinaries(t)
	if o.GarbageCollector {
		RequireControllerManager(t) // before the API server's start, so a skip costs nothing
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    AssetsDir(),
		CRDInstallOptions:        envtest.CRDInstallOptions{Paths: o.CRDs, ErrorIfPathMissing: true},
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	for name, value := range o.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Append(name, value)
	}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", AssetsDir(), err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the API server: %v", err)
		}
	})
	if o.GarbageCollector {
		StartControllerManager(t, env)
	}
	return env
}

// RepoRoot is the repository's root folder: the nearest folder above the working directory
// (a test's package folder) that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// StandardCRDs lists the Gateway API CRDs that the install manifests carry
// (config/crd/standard), without the ValidatingAdmissionPolicy file that sits beside them.
func StandardCRDs(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(RepoRoot(t), "config", "crd", "standard", "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/standard: %v", err)
	}
	return slices.DeleteFunc(files, func(f string) bool { return strings.Contains(filepath.Base(f), "_vap_") })
}

// SnigateCRDs lists snigate's own CRDs (config/crd/snigate: TenantGateway,
// DatabaseExposure, TrustAnchor).
func SnigateCRDs(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(RepoRoot(t), "config", "crd", "snigate", "snigate.dev_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/snigate: %v", err)
	}
	return files
}

// KustomizedCRDs renders the CRDs exactly as `kubectl apply -k config/default` installs them,
// printer column patches included, into one file in a test temp dir. It needs kubectl (its
// built-in kustomize).
func KustomizedCRDs(t testing.TB) []string {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	testutil.Require(t, "kubectl (renders config/crd with kustomize)", err)
	crds, err := exec.Command(kubectl, "kustomize", filepath.Join(RepoRoot(t), "config", "crd")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/crd: %v", err)
	}
	crdFile := filepath.Join(t.TempDir(), "crds.yaml")
	if err := os.WriteFile(crdFile, crds, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{crdFile}
}

// ControllerUser is the controller's ServiceAccount in the install manifests.
const ControllerUser = "system:serviceaccount:snigate-system:snigate"

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Options of the API server. CRDs nil: StandardCRDs.
	Options
	// Scheme is the scheme of Cluster.Client; nil: client-go's (core types only).
	Scheme *runtime.Scheme
	// Manifests are more files to apply after the RBAC, relative to the repository root
	// (e.g. config/gatewayclass/gatewayclass.yaml).
	Manifests []string
}

// Cluster is an API server with the install manifests' RBAC applied.
type Cluster struct {
	Env *envtest.Environment
	// Config is an admin (system:masters) config, for the test's own setup and checks.
	Config *rest.Config
	// Client is an admin client with ClusterOptions.Scheme.
	Client client.Client
	// Root is the repository root (RepoRoot).
	Root string
}

// rbacFiles are the install manifests' RBAC: config/controller/namespace.yaml and every
// file of config/rbac/kustomization.yaml.
var rbacFiles = []string{
	"config/controller/namespace.yaml",
	"config/rbac/service_account.yaml",
	"config/rbac/role.yaml",
	"config/rbac/leader_election_role.yaml",
	"config/rbac/dataplane.yaml",
	"config/rbac/admin_reader.yaml",
}

// StartCluster starts an API server (StartAPIServer) and applies the install manifests'
// RBAC: namespace snigate-system, the controller's ServiceAccount with its ClusterRole and
// leader-election Role, and the data plane's ClusterRole. A controller that runs as
// ControllerUser (Cluster.As) has those permissions and nothing more, so a permission the
// manifests lack fails the test. Everything is stopped in t.Cleanup.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	root := RepoRoot(t)
	if o.CRDs == nil {
		o.CRDs = StandardCRDs(t)
	}
	env := StartAPIServer(t, o.Options)
	scheme := o.Scheme
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	cl, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Env: env, Config: env.Config, Client: cl, Root: root}
	for _, f := range append(slices.Clone(rbacFiles), o.Manifests...) {
		c.Apply(t, filepath.Join(root, f))
	}
	return c
}

// Impersonate returns a copy of cfg that impersonates user: what RBAC grants that user is
// what it may do.
func Impersonate(cfg *rest.Config, user string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	return c
}

// WriteKubeconfig writes kubeconfig to path with every user of it impersonating user (none
// when user is ""): a binary under test then runs as that identity, with what RBAC grants it
// (a ServiceAccount's "system:serviceaccount:<namespace>:<name>", ControllerUser).
func WriteKubeconfig(kubeconfig []byte, user, path string) error {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return err
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// As returns a config that impersonates user (ControllerUser, or a data plane's
// "system:serviceaccount:<namespace>:<name>"): what that identity may do is what RBAC grants
// it.
func (c *Cluster) As(user string) *rest.Config { return Impersonate(c.Config, user) }

// Apply creates every object of a multi-document YAML file with the admin client (ApplyFile).
func (c *Cluster) Apply(t testing.TB, path string) {
	t.Helper()
	ApplyFile(t, c.Client, path)
}

// ApplyFile creates every object of a multi-document YAML file.
func ApplyFile(t testing.TB, cl client.Client, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := cl.Create(context.Background(), &u); err != nil {
			t.Fatalf("%s: creating %s %s: %v", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// Eventually retries check every 100 ms until it returns nil, and fails the test with
// check's last error once timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CertManagerCRDs lists cert-manager's Issuer, ClusterIssuer and Certificate CRDs from its
// Go module (the version in go.mod): with them the controller renders cert-manager's
// objects and holds no HTTPS listener back for a missing cert-manager.
func CertManagerCRDs(t testing.TB) []string {
	t.Helper()
	return certManagerCRDs(t, "cert-manager.io_issuers.yaml", "cert-manager.io_clusterissuers.yaml", "cert-manager.io_certificates.yaml")
}

// AllCertManagerCRDs lists every CRD cert-manager's controller needs to run (the
// CertificateRequests, Orders and Challenges it creates too), for tests that run it.
func AllCertManagerCRDs(t testing.TB) []string {
	t.Helper()
	return certManagerCRDs(t, "cert-manager.io_issuers.yaml", "cert-manager.io_clusterissuers.yaml", "cert-manager.io_certificates.yaml",
		"cert-manager.io_certificaterequests.yaml", "acme.cert-manager.io_orders.yaml", "acme.cert-manager.io_challenges.yaml")
}

func certManagerCRDs(t testing.TB, names ...string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		testutil.Require(t, "the cert-manager module (go mod download)", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	var files []string
	for _, name := range names {
		files = append(files, filepath.Join(dir, name))
	}
	return files
}
