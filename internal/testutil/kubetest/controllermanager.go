package kubetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/snigate/snigate/internal/testutil"
)

// GarbageCollectorControllers are the kube-controller-manager controllers that
// Options.GarbageCollector runs: the garbage collector, which deletes objects whose owners
// are gone (and holds foreground deletions until the blocking dependents are), and the
// namespace controller, which empties and removes a deleted namespace. Nothing else: a
// test's objects must change only by what the test and the code under test do.
var GarbageCollectorControllers = []string{"garbage-collector-controller", "namespace-controller"}

// controllerManagerUser is the identity kube-controller-manager runs as. It is in
// system:masters so that the garbage collector can read and delete every resource, CRDs
// included, without RBAC of its own.
const controllerManagerUser = "kube-controller-manager"

// RequireControllerManager stops the test (skip, or fail under CI=true) unless
// kube-controller-manager is in AssetsDir.
func RequireControllerManager(t testing.TB) {
	t.Helper()
	dir := AssetsDir()
	if _, err := os.Stat(filepath.Join(dir, "kube-controller-manager")); err != nil {
		testutil.Require(t, "kube-controller-manager in "+dir, fmt.Errorf("%w (run scripts/install-kube.sh)", err))
	}
}

// StartControllerManager runs the kube-controller-manager of AssetsDir against env's API
// server with only the given controllers (none given: GarbageCollectorControllers), and
// stops it in t.Cleanup, before the API server stops. Call it after env has started.
//
// It returns once the process is running, not once its controllers have caught up: the
// garbage collector first lists every resource, and it finds CRDs installed later only at
// its next discovery pass (every 30 s). Tests wait for its effects with Eventually.
//
// Its log goes to a file that is printed when the test fails; so is an early exit.
func StartControllerManager(t testing.TB, env *envtest.Environment, controllers ...string) {
	t.Helper()
	RequireControllerManager(t)
	if len(controllers) == 0 {
		controllers = GarbageCollectorControllers
	}
	user, err := env.AddUser(envtest.User{Name: controllerManagerUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("kube-controller-manager user: %v", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("kube-controller-manager kubeconfig: %v", err)
	}
	dir, err := os.MkdirTemp("", "snigate-kcm-")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(filepath.Join(AssetsDir(), "kube-controller-manager"),
		"--kubeconfig="+kubeconfigPath,
		"--controllers="+strings.Join(controllers, ","),
		// One instance per test API server: nothing to elect, and a lease would only slow
		// the start down.
		"--leader-elect=false",
		// No serving endpoint: the tests judge it by its effects, and a port is one more
		// thing that can clash between parallel tests.
		"--secure-port=0",
		// Every controller uses the kubeconfig's identity (system:masters) rather than a
		// ServiceAccount token of its own, which would need the token controller.
		"--use-service-account-credentials=false",
		// The garbage collector lists every resource before it collects anything; at the
		// default 20 requests per second that alone throttles its start by a second or more.
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--v=2",
	)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	testutil.DieWithParent(cmd.SysProcAttr) // a killed test run leaves no controller manager behind
	if err := cmd.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(dir)
		t.Fatalf("starting kube-controller-manager: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	t.Cleanup(func() {
		defer os.RemoveAll(dir)
		var early error
		select {
		case err := <-exited:
			early = fmt.Errorf("kube-controller-manager exited before the test ended: %v", err)
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		logFile.Close()
		if early != nil {
			t.Error(early)
		}
		if t.Failed() {
			printLog(t, logPath)
		}
	})
}

// printLog writes a log file into the test's output.
func printLog(t testing.TB, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Logf("reading %s: %v", path, err)
		return
	}
	t.Logf("--- %s ---\n%s", filepath.Base(path), data)
}
