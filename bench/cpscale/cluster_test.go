//go:build linux

package cpscale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/bench/internal/procstat"
	"github.com/snigate/snigate/internal/source/cluster"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/dpnode"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// The set-up the steps share: an API server with an audit log of the controller's requests,
// the backend, the platform Gateway, and the controller process.

const (
	backendPort = 4433
	redisPort   = 6379 // the engine listener's port on the Gateway
	localPrefix = "127.0.60.0/24"
)

// dataPlaneImage is the image `snigate controller --provision` writes into the data plane
// Deployments of a provisioned run; the stand-in node (package dpnode) runs the benchmark's
// binary for it.
const dataPlaneImage = "snigate.dev/snigate:cpscale"

// controllerAuthUser is the user the controller's kubeconfig authenticates as; it
// impersonates the install's ServiceAccount (kubetest.ControllerUser).
const controllerAuthUser = "cpscale-controller"

// auditPolicy logs every request of the controller's kubeconfig, and nothing else. The API
// server matches audit rules on the authenticated user, before impersonation.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["` + controllerAuthUser + `"]
- level: None
`

type env struct {
	t          *testing.T
	kc         *kubetest.Cluster
	cl         client.Client
	bin        string
	kubeconfig string
	audit      string
	backend    *testutil.Host
	ca         *testutil.CA
	tenants    int // created so far
	// cgroup, with SNIGATE_CPSCALE_MEMORY_LIMIT: the controller runs in it, as in a
	// container with that memory limit.
	cgroup *testutil.Cgroup
	// node, with SNIGATE_CPSCALE_PROVISION: the controller runs with --provision and the
	// node runs the data planes it provisions, behind a load balancer.
	node *dpnode.Node
}

// newEnv starts a step's cluster; platform adds the platform Gateway the shared shape's
// tenants attach to. The one-tenant shape has none: its tenant renders a Gateway of its own,
// and with provisioned data planes an unused Gateway would be one more data plane behind the
// node's load balancer, which sends to every data plane alike.
func newEnv(t *testing.T, platform bool) *env {
	scheme, err := cluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, audit: filepath.Join(dir, "audit.log")}
	if keep := os.Getenv("SNIGATE_CPSCALE_KEEP"); keep != "" {
		e.audit = filepath.Join(keep, fmt.Sprintf("audit-%s.log", time.Now().Format("150405.000")))
	}
	e.kc = kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme, Options: kubetest.Options{
		CRDs: append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...),
		// A cluster's garbage collector: what a deleted exposure owned goes with it.
		GarbageCollector: true,
		APIServerFlags: map[string]string{
			"audit-policy-file": policy, "audit-log-path": e.audit, "audit-log-format": "json",
			"audit-log-mode": "blocking", "audit-log-maxsize": "0",
			// Room for a Service per tenant (the default /24 holds 254).
			"service-cluster-ip-range": "10.96.0.0/16",
		},
	}})
	e.cl = e.kc.Client
	if mib := memoryLimitMiB(t); mib > 0 {
		e.cgroup = testutil.MemoryCgroup(t, int64(mib)<<20)
	}
	e.bin = buildSnigate(t, e.kc.Root, dir)
	e.kubeconfig = controllerKubeconfig(t, e.kc.Env, dir)
	if provisioned() {
		// What a cluster runs the provisioned data planes with: kube-controller-manager's
		// Deployment and ReplicaSet controllers (the install's RBAC, the data plane's
		// ClusterRole among it, is applied already), and the node: kubelet, scheduler and
		// load balancer. The data planes reach the API server as an admin (their
		// ServiceAccount's name is known only once provisioned); the audit log counts the
		// controller's requests alone either way.
		kubetest.StartControllerManager(t, e.kc.Env, "deployment-controller", "replicaset-controller")
		e.node = dpnode.Start(t, dpnode.Config{Client: e.cl, Ports: []int{redisPort},
			Kubeconfig: adminKubeconfig(t, e.kc.Env, dir), Binary: e.bin, Image: dataPlaneImage,
			LogDir: os.Getenv("SNIGATE_CPSCALE_KEEP"), AssignIngress: true})
	}
	e.ca = testutil.NewCA(t)
	// The backend: a TLS echo in a network namespace (the API server refuses loopback
	// endpoints), serving a certificate for every tenant's names.
	e.backend = testutil.NetnsHost(t, "cps")
	cert := e.ca.Issue(t, "*.redis.example.test")
	certFile, keyFile := cert.WriteFiles(t, dir)
	e.backend.Start(t, e.bin, "echo", "--listen", fmt.Sprintf("%s:%d", e.backend.IP, backendPort), "--name", "db",
		"--cert", certFile, "--key", keyFile)
	e.create(&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"}, Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}})
	if !platform {
		return e
	}
	e.create(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}},
		&gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "shared"}, Spec: gwv1.GatewaySpec{
			GatewayClassName: "snigate",
			AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: ptr(gwv1.NamespacesFromAll)}},
			Listeners: []gwv1.Listener{{Name: "platform", Port: 18080, Protocol: gwv1.HTTPProtocolType,
				Hostname: ptr(gwv1.Hostname("platform.example.test"))}},
		}},
	)
	return e
}

func ptr[T any](v T) *T { return &v }

// memoryLimitMiB is SNIGATE_CPSCALE_MEMORY_LIMIT, the controller's container memory limit
// in MiB (0: none).
func memoryLimitMiB(t *testing.T) int {
	v := os.Getenv("SNIGATE_CPSCALE_MEMORY_LIMIT")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("SNIGATE_CPSCALE_MEMORY_LIMIT=%q: want a number of MiB", v)
	}
	return n
}

// provisioned says whether this run provisions data planes (SNIGATE_CPSCALE_PROVISION).
func provisioned() bool { return os.Getenv("SNIGATE_CPSCALE_PROVISION") != "" }

// buildSnigate builds the binary under test.
func buildSnigate(t *testing.T, root, dir string) string {
	bin := filepath.Join(dir, "snigate")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/snigate")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/snigate: %v\n%s", err, out)
	}
	return bin
}

// controllerKubeconfig writes a kubeconfig that impersonates the install's ServiceAccount.
func controllerKubeconfig(t *testing.T, e *envtest.Environment, dir string) string {
	return writeKubeconfig(t, e, controllerAuthUser, kubetest.ControllerUser, filepath.Join(dir, "kubeconfig"))
}

// adminKubeconfig writes an admin's kubeconfig, for the provisioned data planes.
func adminKubeconfig(t *testing.T, e *envtest.Environment, dir string) string {
	return writeKubeconfig(t, e, "cpscale-dataplane", "", filepath.Join(dir, "dataplane.kubeconfig"))
}

// writeKubeconfig writes to path the kubeconfig of a new user of e named name, an admin,
// that impersonates impersonate ("": nobody).
func writeKubeconfig(t *testing.T, e *envtest.Environment, name, impersonate, path string) string {
	user, err := e.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := kubetest.WriteKubeconfig(kc, impersonate, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// create creates objects, 8 at a time.
func (e *env) create(objs ...client.Object) {
	e.t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var mu sync.Mutex
	var first error
	for _, o := range objs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.cl.Create(ctx, o); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("creating %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		e.t.Fatal(first)
	}
}

// tenantName is tenant i's namespace and TenantGateway name.
func tenantName(i int) string { return fmt.Sprintf("t-%04d", i) }

func apex(tenant string) string { return tenant + ".example.test" }

// hostname is an exposure's subdomain hostname.
func hostname(tenant, release string) string { return release + ".redis." + apex(tenant) }

// addTenants creates tenants up to n, each with per exposures: its namespace, its
// TenantGateway on the platform Gateway, a TrustAnchor and its CA Secret, the Service of its
// databases (the backend, by an EndpointSlice), and the exposures. shared false gives the
// tenant a Gateway of its own.
func (e *env) addTenants(n, per int, shared bool) {
	var objs []client.Object
	ready := true
	for i := e.tenants; i < n; i++ {
		ns := tenantName(i)
		tg := &v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns}, Spec: v1alpha1.TenantGatewaySpec{
			Apex: apex(ns), DatabaseHostnames: v1alpha1.DatabaseHostnamesSubdomain}}
		if shared {
			tg.Spec.ParentGatewayRef = &v1alpha1.ParentGatewayReference{Namespace: "platform", Name: "shared"}
		}
		objs = append(objs,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			tg,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-ca"}, Data: map[string][]byte{"ca.crt": e.ca.CertPEM}},
			&v1alpha1.TrustAnchor{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-ca"}, Spec: v1alpha1.TrustAnchorSpec{
				SourceSecretRef: v1alpha1.SourceSecretRef{Name: "db-ca"}}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: corev1.ServiceSpec{
				Ports: []corev1.ServicePort{{Name: "redis", Port: redisPort, TargetPort: intstr.FromInt32(backendPort)}}}},
			&discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{e.backend.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("redis"), Port: ptr(int32(backendPort))}},
			},
		)
		for j := range per {
			objs = append(objs, exposure(ns, fmt.Sprintf("db-%d", j)))
		}
	}
	// Namespaces first: everything else lives in them.
	var nss, rest []client.Object
	for _, o := range objs {
		if _, ok := o.(*corev1.Namespace); ok {
			nss = append(nss, o)
		} else {
			rest = append(rest, o)
		}
	}
	e.create(nss...)
	e.create(rest...)
	e.tenants = n
}

func exposure(ns, name string) *v1alpha1.DatabaseExposure {
	return &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.DatabaseExposureSpec{
		Engine: v1alpha1.EngineRedis, BackendRef: v1alpha1.DatabaseBackendRef{Name: "db", Port: redisPort},
		TrustAnchorRef: &v1alpha1.LocalRef{Name: "db-ca"}}}
}

// controller is a running `snigate controller`.
type controller struct {
	cmd   *exec.Cmd
	admin string
	log   string
	done  chan error
}

func (e *env) startController() *controller {
	admin := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(e.t))
	dir := e.t.TempDir()
	if keep := os.Getenv("SNIGATE_CPSCALE_KEEP"); keep != "" {
		// The controller's log kept for reading after the run (where the time went).
		dir = keep
	}
	logName := fmt.Sprintf("controller-%s.log", time.Now().Format("150405.000"))
	c := &controller{admin: admin, log: filepath.Join(dir, logName), done: make(chan error, 1)}
	f, err := os.Create(c.log)
	if err != nil {
		e.t.Fatal(err)
	}
	args := []string{"controller", "--kubeconfig", e.kubeconfig, "--leader-elect=false",
		"--admin", admin, "--log-format", "json", "--access-log=false"}
	if e.node != nil {
		args = append(args, "--provision", "--dataplane-image", dataPlaneImage)
	} else {
		args = append(args, "--local-addresses", localPrefix)
	}
	c.cmd = exec.Command(e.bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = f, f
	if e.cgroup != nil {
		e.cgroup.Wrap(c.cmd)
	}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait(); f.Close() }()
	e.t.Cleanup(c.stop)
	return c
}

func (c *controller) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

func (c *controller) pid() int { return c.cmd.Process.Pid }

// metric sums the samples of a metric of the controller's /metrics.
func (c *controller) metric(name string) float64 {
	resp, err := http.Get("http://" + c.admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// stageTotals are the controller's snigate_pipeline_stage_seconds: by stage, the seconds
// and the observations so far.
func (c *controller) stageTotals() map[string][2]float64 {
	out := map[string][2]float64{}
	resp, err := http.Get("http://" + c.admin + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		i := 0
		switch name {
		case "snigate_pipeline_stage_seconds_sum":
		case "snigate_pipeline_stage_seconds_count":
			i = 1
		default:
			continue
		}
		_, rest, _ = strings.Cut(rest, `stage="`)
		stage, _, _ := strings.Cut(rest, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if ok && err == nil && stage != "" {
			t := out[stage]
			t[i] = v
			out[stage] = t
		}
	}
	return out
}

// profile saves a CPU profile of the controller over the next seconds.
func (c *controller) profile(path string, seconds int) {
	c.save(path, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds))
}

// save saves what the controller's admin listener answers at path (a profile) to file.
func (c *controller) save(file, path string) {
	resp, err := http.Get("http://" + c.admin + path)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if f, err := os.Create(file); err == nil {
		io.Copy(f, resp.Body)
		f.Close()
	}
}

// generation is the generation of the last configuration the controller applied, from its
// log (0 before the first). Read from the log, not /metrics: at 10 000 exposures a scrape
// costs the controller about 160 ms of CPU (snigate_object_condition has a series per
// condition of every object), and its garbage was collected during the very trial it was
// read for; Prometheus scrapes every 15 s or so, the trials read it twice every 3 s.
func (c *controller) generation() float64 {
	b, _ := os.ReadFile(c.log)
	const applied = `"msg":"configuration applied","generation":`
	i := bytes.LastIndex(b, []byte(applied))
	if i < 0 {
		return 0
	}
	rest := b[i+len(applied):]
	if j := bytes.IndexAny(rest, ",}"); j >= 0 {
		rest = rest[:j]
	}
	g, _ := strconv.ParseFloat(string(rest), 64)
	return g
}

func (c *controller) tail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// usage is the controller's RSS (MiB) and CPU time so far (seconds).
func (c *controller) usage() (rss, cpu float64) {
	pids := procstat.Tree(c.pid())
	return float64(procstat.RSS(pids)) / (1 << 20), float64(procstat.CPU(pids)) / 1e9
}

// dataPlaneUsage is the provisioned data planes' RSS (MiB, all of them) and CPU time so far
// (seconds), and how many run (zero without SNIGATE_CPSCALE_PROVISION).
func (e *env) dataPlaneUsage() (rss, cpu float64, n int) {
	if e.node == nil {
		return 0, 0, 0
	}
	var pids []int
	for _, pid := range e.node.PIDs() {
		pids = append(pids, procstat.Tree(pid)...)
	}
	return float64(procstat.RSS(pids)) / (1 << 20), float64(procstat.CPU(pids)) / 1e9, len(e.node.PIDs())
}

// controlPlaneCPU is the CPU seconds the test's kube-apiserver and etcd have used so far:
// what the API server's side of a step costs, beside the controller's.
func controlPlaneCPU() float64 {
	var pids []int
	for _, pid := range procstat.Tree(os.Getpid()) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if name := strings.TrimSpace(string(comm)); name == "kube-apiserver" || name == "etcd" {
			pids = append(pids, pid)
		}
	}
	return float64(procstat.CPU(pids)) / 1e9
}

// gatewayAddress waits for the Gateway's address in its status.
func (e *env) gatewayAddress(ns, name string, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		var gw gwv1.Gateway
		if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &gw); err == nil && len(gw.Status.Addresses) > 0 {
			return gw.Status.Addresses[0].Value
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("Gateway %s/%s has no address after %v", ns, name, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// programmed counts the DatabaseExposures whose Programmed condition is True.
func (e *env) programmed() (int, int, error) {
	var list v1alpha1.DatabaseExposureList
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.cl.List(ctx, &list); err != nil {
		return 0, 0, err
	}
	n := 0
	for i := range list.Items {
		if meta.IsStatusConditionTrue(list.Items[i].Status.Conditions, v1alpha1.ConditionProgrammed) {
			n++
		}
	}
	return n, len(list.Items), nil
}

// pendingProbes counts the DatabaseExposures whose backend certificate has not been probed.
func (e *env) pendingProbes() (int, error) {
	var list v1alpha1.DatabaseExposureList
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.cl.List(ctx, &list); err != nil {
		return 0, err
	}
	n := 0
	for i := range list.Items {
		c := meta.FindStatusCondition(list.Items[i].Status.Conditions, v1alpha1.ConditionCertificateVerified)
		if c == nil || c.Reason == v1alpha1.ReasonPending {
			n++
		}
	}
	return n, nil
}

// auditEvent is what the audit log says of one request.
type auditEvent struct {
	Verb      string `json:"verb"`
	Stage     string `json:"stage"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	Received metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// auditSize is the audit log's length now: where requests starts reading for a trial, so
// that no trial reads the convergence's requests again.
func (e *env) auditSize() int64 {
	fi, err := os.Stat(e.audit)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// requests counts the controller's requests received in [from, to] by "verb resource",
// reading the audit log from offset.
func (e *env) requests(offset int64, from, to time.Time) map[string]int {
	f, err := os.Open(e.audit)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	out := map[string]int{}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var ev auditEvent
			if json.Unmarshal(line, &ev) == nil && ev.Stage == "ResponseComplete" &&
				!ev.Received.Time.Before(from) && !ev.Received.Time.After(to) {
				res := ev.ObjectRef.Resource
				if ev.ObjectRef.Subresource != "" {
					res += "/" + ev.ObjectRef.Subresource
				}
				out[ev.Verb+" "+res]++
			}
		}
		if err == io.EOF {
			return out
		}
		if err != nil {
			return out
		}
	}
}

// randomTenant picks one of the tenants created so far.
func (e *env) randomTenant() string { return tenantName(rand.IntN(e.tenants)) }
