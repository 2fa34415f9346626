// Package kubetest starts a real etcd and kube-apiserver for tests and helps them talk to it:
// the API server that scripts/install-kube.sh builds, objects applied from YAML files, and a
// polling wait for the controller's effects.
//
//	env := kubetest.StartAPIServer(t, crdFiles...) // stopped in t.Cleanup
//	cl, _ := client.New(env.Config, client.Options{Scheme: scheme})
//	kubetest.ApplyFile(t, cl, "config/rbac/role.yaml")
//	kubetest.Eventually(t, 30*time.Second, "Gateway programmed", func() error { ... })
//
// A missing binary skips the test, or fails it under CI=true (testutil.Require).
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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

// StartAPIServer starts a private etcd and kube-apiserver with the CRDs of crdFiles
// installed, and stops them in t.Cleanup.
func StartAPIServer(t testing.TB, crdFiles ...string) *envtest.Environment {
	t.Helper()
	RequireBinaries(t)
	env := &envtest.Environment{
		BinaryAssetsDirectory:    AssetsDir(),
		CRDInstallOptions:        envtest.CRDInstallOptions{Paths: crdFiles, ErrorIfPathMissing: true},
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", AssetsDir(), err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the API server: %v", err)
		}
	})
	return env
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
