package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/source/cluster"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// externalDNSBinary is the external-dns that scripts/install-external-dns.sh builds, or the
// one SNIGATE_EXTERNAL_DNS's folder holds. Missing: skip, or fail under CI=true.
func externalDNSBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SNIGATE_EXTERNAL_DNS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "snigate", "external-dns")
	}
	bin := filepath.Join(dir, "external-dns")
	if _, err := os.Stat(bin); err != nil {
		testutil.Require(t, "external-dns in "+dir, fmt.Errorf("%w (run scripts/install-external-dns.sh)", err))
	}
	return bin
}

// Clients reach an exposure by name, so the name must resolve to the Gateway's address. On a
// real kube-apiserver `snigate controller` renders a TenantGateway and five DatabaseExposures
// (TLSRoutes, and a TCPRoute for MariaDB) and writes the Gateway's status.addresses; the real
// external-dns, with the args and RBAC of examples/external-dns (its gateway-tlsroute source,
// impersonating its ServiceAccount), publishes them through RFC 2136 to a DNS server the test
// runs. Every TLS exposure's every hostname, and every member's of the Kafka exposure (a
// TLSRoute per broker), then resolves, through that server, to the Gateway's address and
// nothing else; a name of no exposure does not resolve; deleting an
// exposure takes its names out, and a new one's names come in. MariaDB's name is published
// by the gateway-tcproute source, from the annotation on its TCPRoute, once the TCPRoute CRD
// serves v1alpha2 as well (what external-dns watches; the Gateway API v1.6 CRDs no longer
// serve it by default): the opt-in docs/databases.md, "DNS", gives, done here as a user does.
func TestExternalDNSCluster(t *testing.T) {
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (the Gateway binds ports 80 and 443)", errors.New("not root"))
	}
	externalDNS := externalDNSBinary(t)
	scheme, err := cluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	// The garbage collector deletes a deleted exposure's TLSRoute (it owns it), as in a cluster.
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: crds, GarbageCollector: true})
	kubeconfig := writeKubeconfig(t, env)
	cl, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	mariaPort := testutil.FreePorts(t, 1)[0]

	// The backends are never dialled by a client here: Services without endpoints are enough
	// for the routes to be accepted (the probe says Unreachable, which DNS does not care for).
	service := func(name string, port int) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: acme}\nspec:\n  ports: [{name: db, port: %d}]\n", name, port)
	}
	exposure := func(name, engine string, port int, extra string) string {
		return fmt.Sprintf("apiVersion: snigate.dev/v1alpha1\nkind: DatabaseExposure\nmetadata: {name: %s, namespace: acme}\nspec:\n  engine: %s\n  backendRef: {name: %s, port: %d}\n%s",
			name, engine, name, port, extra) + "---\n" + service(name, port)
	}
	apply(t, cl, fixture.Docs(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: snigate}
spec: {controllerName: snigate.dev/gateway-controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: acme}
---
apiVersion: snigate.dev/v1alpha1
kind: TenantGateway
metadata: {name: acme, namespace: acme}
spec:
  apex: example.test
`,
		exposure("orders", "postgres", 5432, ""),
		exposure("billing", "postgres", 5432, ""),
		exposure("cache", "redis", 6379, ""),
		// A clustered engine: a broker's own names come from its member, each a TLSRoute of
		// its own that external-dns publishes like the exposure's.
		exposure("events", "kafka", 9093, "  members:\n"+
			"  - {name: b0, backendRef: {name: events-b0, port: 9093}}\n"+
			"  - {name: b1, backendRef: {name: events-b1, port: 9093}}\n"),
		service("events-b0", 9093), service("events-b1", 9093),
		exposure("legacy", "mariadb", 3306, fmt.Sprintf("  port: %d\n", mariaPort)),
	))
	// The names docs/databases.md promises (databaseHostnames "both", the default; MariaDB's
	// TCPRoute the subdomain name only): the test checks the controller's status says the
	// same, so that neither can drift without failing here.
	want := map[string][]string{
		"orders":  {"orders.postgres.example.test", "orders.example.test"},
		"billing": {"billing.postgres.example.test", "billing.example.test"},
		"cache":   {"cache.redis.example.test", "cache.example.test"},
		"events":  {"events.kafka.example.test", "events.example.test"},
		"legacy":  {"legacy.mariadb.example.test"},
	}
	// The members' names: <member>.<release>.<engine>.<apex> and the flat one.
	members := map[string][]string{
		"b0": {"b0.events.kafka.example.test", "b0.events.example.test"},
		"b1": {"b1.events.kafka.example.test", "b1.events.example.test"},
	}

	startSnigate(t, "", "controller", "--kubeconfig", kubeconfig, "--leader-elect=false",
		"--local-addresses", "127.0.7.0/24")
	ctx := context.Background()

	var gwAddr string
	kubetest.Eventually(t, clusterWait, "the Gateway's address and every exposure Programmed with its hostnames", func() error {
		var gw gwv1.Gateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &gw); err != nil {
			return err
		}
		if len(gw.Status.Addresses) != 1 || !strings.HasPrefix(gw.Status.Addresses[0].Value, "127.0.7.") {
			return fmt.Errorf("Gateway status.addresses %v, want one of 127.0.7.0/24", gw.Status.Addresses)
		}
		gwAddr = gw.Status.Addresses[0].Value
		var list v1alpha1.DatabaseExposureList
		if err := cl.List(ctx, &list, client.InNamespace("acme")); err != nil {
			return err
		}
		var problems []string
		for _, d := range list.Items {
			if !meta.IsStatusConditionTrue(d.Status.Conditions, v1alpha1.ConditionProgrammed) {
				problems = append(problems, d.Name+" not Programmed")
			}
			if !slices.Equal(d.Status.Hostnames, want[d.Name]) {
				problems = append(problems, fmt.Sprintf("%s: hostnames %v, want %v", d.Name, d.Status.Hostnames, want[d.Name]))
			}
			if d.Name == "events" {
				if len(d.Status.Members) != len(members) {
					problems = append(problems, fmt.Sprintf("events: members %+v, want %d", d.Status.Members, len(members)))
				}
				for _, m := range d.Status.Members {
					if !slices.Equal(m.Hostnames, members[m.Name]) {
						problems = append(problems, fmt.Sprintf("events member %s: hostnames %v, want %v", m.Name, m.Hostnames, members[m.Name]))
					}
				}
			}
		}
		if len(list.Items) != len(want) {
			problems = append(problems, fmt.Sprintf("%d exposures, want %d", len(list.Items), len(want)))
		}
		return errors.Join(problemErrs(problems)...)
	})

	zone := startTestZone(t, "example.test.", "external-dns", "c25pZ2F0ZS1leHRlcm5hbC1kbnMtdGVzdC1rZXk=")
	// external-dns as examples/external-dns deploys it, as its ServiceAccount (RBAC from the
	// same file), pointed at the test's DNS server.
	kubetest.ApplyFile(t, cl, filepath.Join(kubetest.RepoRoot(t), "examples", "external-dns", "external-dns.yaml"))
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	serveTCPRouteV1alpha2(t, env)
	saKubeconfig := filepath.Join(t.TempDir(), "external-dns.kubeconfig")
	if err := kubetest.WriteKubeconfig(kc, "system:serviceaccount:external-dns:external-dns", saKubeconfig); err != nil {
		t.Fatal(err)
	}
	metrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePorts(t, 1)[0]))
	dnsHost, dnsPort, _ := net.SplitHostPort(zone.addr)
	args := exampleExternalDNSArgs(t, map[string]string{"--rfc2136-host": dnsHost, "--rfc2136-port": dnsPort})
	// A short interval: --events already syncs on every change, this bounds a missed one.
	args = append(args, "--kubeconfig="+saKubeconfig, "--metrics-address="+metrics, "--interval=5s", "--log-level=debug",
		"--source=gateway-tcproute") // the opt-in for MySQL/MariaDB names
	cmd := exec.Command(externalDNS, args...)
	// The TSIG secret the way the example passes it: an environment variable. Any other
	// EXTERNAL_DNS_* of the environment would set a flag behind the test's back.
	cmd.Env = slices.DeleteFunc(testutil.CleanEnv(), func(kv string) bool { return strings.HasPrefix(kv, "EXTERNAL_DNS_") })
	cmd.Env = append(cmd.Env, "EXTERNAL_DNS_RFC2136_TSIG_SECRET="+zone.secret)
	testutil.StartProcess(t, cmd, "external-dns", func() error {
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})

	// resolves checks that every name resolves, through the zone's server and Go's own
	// resolver (a client's view, not the zone's table), to exactly the Gateway's address,
	// and that every name of gone does not resolve at all.
	resolves := func(what string, names, gone []string) {
		t.Helper()
		kubetest.Eventually(t, clusterWait, what, func() error {
			var problems []string
			for _, name := range names {
				addrs, err := zone.lookup(name)
				if err != nil || !slices.Equal(addrs, []string{gwAddr}) {
					problems = append(problems, fmt.Sprintf("%s: %v %v, want [%s]", name, addrs, err, gwAddr))
				}
			}
			for _, name := range gone {
				var dnsErr *net.DNSError
				if addrs, err := zone.lookup(name); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
					problems = append(problems, fmt.Sprintf("%s: %v %v, want not found", name, addrs, err))
				}
			}
			return errors.Join(problemErrs(problems)...)
		})
	}
	all := func(skip ...string) []string {
		var names []string
		for exposure, hosts := range want {
			if !slices.Contains(skip, exposure) {
				names = append(names, hosts...)
			}
		}
		if !slices.Contains(skip, "events") {
			for _, hosts := range members {
				names = append(names, hosts...)
			}
		}
		slices.Sort(names)
		return names
	}

	t.Run("every exposure's and every member's hostnames at the Gateway's address", func(t *testing.T) {
		resolves("every hostname resolving to the Gateway", all(), []string{"nothing.postgres.example.test", "nothing.example.test", "nothing.mariadb.example.test"})
		// Published by this external-dns (its TXT registry's ownership records beside them),
		// not by anything else the server was told.
		if owned := zone.txtOwnedBy("snigate"); owned == 0 {
			t.Errorf("no TXT ownership record of owner snigate in the zone:\n%s", zone.dump())
		}
	})

	t.Run("a deleted exposure's names go, a new one's come", func(t *testing.T) {
		billing := &v1alpha1.DatabaseExposure{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "billing"}, billing); err != nil {
			t.Fatal(err)
		}
		if err := cl.Delete(ctx, billing); err != nil {
			t.Fatal(err)
		}
		apply(t, cl, exposure("ledger", "redis", 6379, ""))
		want["ledger"] = []string{"ledger.redis.example.test", "ledger.example.test"}
		resolves("billing's names gone, ledger's in, the others kept", all("billing"), want["billing"])
	})
	if t.Failed() {
		t.Logf("zone at the end:\n%s", zone.dump())
	}
}

// problemErrs turns problem strings into errors for errors.Join (nil for none).
func problemErrs(problems []string) []error {
	var errs []error
	for _, p := range problems {
		errs = append(errs, errors.New(p))
	}
	return errs
}

// serveTCPRouteV1alpha2 makes the TCPRoute CRD serve v1alpha2 beside v1, as
// docs/databases.md tells a user to for external-dns's gateway-tcproute source (the same
// schema: the API server converts by changing apiVersion), and waits until it is served.
func serveTCPRouteV1alpha2(t *testing.T, env *envtest.Environment) {
	t.Helper()
	ctx := context.Background()
	cs, err := apiextensionsclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := cs.ApiextensionsV1().CustomResourceDefinitions()
	const name = "tcproutes.gateway.networking.k8s.io"
	patch := `[{"op": "test", "path": "/spec/versions/1/name", "value": "v1alpha2"},
	           {"op": "replace", "path": "/spec/versions/1/served", "value": true}]`
	if _, err := crds.Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("serving TCPRoute v1alpha2: %v", err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1alpha2", Resource: "tcproutes"}
	kubetest.Eventually(t, clusterWait, "TCPRoute v1alpha2 served", func() error {
		_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		return err
	})
}

// exampleExternalDNSArgs reads the container args of the Deployment in
// examples/external-dns/external-dns.yaml and replaces the values of the flags in override
// (those that name the DNS server): the test runs what the example deploys.
func exampleExternalDNSArgs(t *testing.T, override map[string]string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(t), "examples", "external-dns", "external-dns.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			t.Fatalf("no Deployment in examples/external-dns/external-dns.yaml: %v", err)
		}
		if u.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if len(containers) != 1 {
			t.Fatalf("the example Deployment has %d containers, want 1", len(containers))
		}
		raw, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		args := slices.Clone(raw)
		seen := map[string]bool{}
		for i, a := range args {
			flag, _, _ := strings.Cut(a, "=")
			if v, ok := override[flag]; ok {
				args[i], seen[flag] = flag+"="+v, true
			}
		}
		for flag := range override {
			if !seen[flag] {
				t.Fatalf("the example's args have no %s: %v", flag, raw)
			}
		}
		return args
	}
}

// testZone is an authoritative DNS server for one zone that takes RFC 2136 updates and
// serves AXFR, both signed with one TSIG key (HMAC-SHA256), as BIND does with an
// update-policy for that key, and answers plain queries: external-dns writes and lists
// through it, the test resolves through it.
type testZone struct {
	zone, key, secret string
	addr              string // TCP HOST:PORT
	soa               dns.RR

	mu  sync.Mutex
	rrs []dns.RR
}

func startTestZone(t *testing.T, zone, key, secret string) *testZone {
	t.Helper()
	z := &testZone{zone: zone, key: dns.Fqdn(key), secret: secret}
	var err error
	z.soa, err = dns.NewRR(zone + " 300 IN SOA ns1." + zone + " hostmaster." + zone + " 1 60 60 3600 60")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z.addr = ln.Addr().String()
	srv := &dns.Server{Listener: ln, Handler: z, TsigSecret: map[string]string{z.key: secret},
		// miekg/dns answers NOTIMP to UPDATE by default (and refuses its multi-RR sections).
		MsgAcceptFunc: func(h dns.Header) dns.MsgAcceptAction {
			if int(h.Bits>>11)&0xF == dns.OpcodeUpdate {
				return dns.MsgAccept
			}
			return dns.DefaultMsgAcceptFunc(h)
		}}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() {
		if err := srv.ActivateAndServe(); err != nil {
			t.Logf("test DNS server: %v", err)
		}
	}()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return z
}

func (z *testZone) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	signed := r.IsTsig() != nil && w.TsigStatus() == nil
	reply := func() {
		if signed {
			m.SetTsig(z.key, dns.HmacSHA256, 300, time.Now().Unix())
		}
		_ = w.WriteMsg(m)
	}
	if len(r.Question) != 1 || !dns.IsSubDomain(z.zone, strings.ToLower(r.Question[0].Name)) {
		m.Rcode = dns.RcodeNotAuth
		reply()
		return
	}
	q := r.Question[0]
	switch {
	case r.Opcode == dns.OpcodeUpdate:
		if !signed { // only the key may change the zone
			m.Rcode = dns.RcodeRefused
			reply()
			return
		}
		m.Rcode = z.update(r.Ns)
		reply()
	case q.Qtype == dns.TypeAXFR:
		if !signed {
			m.Rcode = dns.RcodeRefused
			reply()
			return
		}
		z.mu.Lock()
		records := append(append([]dns.RR{z.soa}, z.rrs...), z.soa)
		z.mu.Unlock()
		ch := make(chan *dns.Envelope, 1)
		ch <- &dns.Envelope{RR: records}
		close(ch)
		tr := new(dns.Transfer)
		tr.TsigSecret = map[string]string{z.key: z.secret}
		_ = tr.Out(w, r, ch)
	default:
		name := strings.ToLower(q.Name)
		exists := name == z.zone
		z.mu.Lock()
		for _, rr := range z.rrs {
			if strings.ToLower(rr.Header().Name) != name {
				continue
			}
			exists = true
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, dns.Copy(rr))
			}
		}
		z.mu.Unlock()
		if !exists {
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{z.soa}
		}
		reply()
	}
}

// update applies an UPDATE's update section (RFC 2136 2.5): class IN adds an RR, class ANY
// deletes an RRset (or every RRset of the name for type ANY), class NONE deletes one RR.
func (z *testZone) update(section []dns.RR) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, rr := range section {
		h := rr.Header()
		if !dns.IsSubDomain(z.zone, strings.ToLower(h.Name)) {
			return dns.RcodeNotZone
		}
		same := func(o dns.RR) bool { return strings.EqualFold(o.Header().Name, h.Name) }
		switch h.Class {
		case dns.ClassINET:
			if !slices.ContainsFunc(z.rrs, func(o dns.RR) bool { return dns.IsDuplicate(o, rr) }) {
				z.rrs = append(z.rrs, dns.Copy(rr))
			}
		case dns.ClassANY:
			z.rrs = slices.DeleteFunc(z.rrs, func(o dns.RR) bool {
				return same(o) && (h.Rrtype == dns.TypeANY || o.Header().Rrtype == h.Rrtype)
			})
		case dns.ClassNONE:
			in := dns.Copy(rr)
			in.Header().Class = dns.ClassINET
			z.rrs = slices.DeleteFunc(z.rrs, func(o dns.RR) bool { return dns.IsDuplicate(o, in) })
		default:
			return dns.RcodeFormatError
		}
	}
	return dns.RcodeSuccess
}

// lookup resolves name's addresses the way a Go client does, asking only the zone's server.
func (z *testZone) lookup(name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", z.addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, dns.Fqdn(name))
	slices.Sort(addrs)
	return addrs, err
}

// txtOwnedBy counts the zone's TXT records that name owner as external-dns's owner.
func (z *testZone) txtOwnedBy(owner string) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	n := 0
	for _, rr := range z.rrs {
		if txt, ok := rr.(*dns.TXT); ok && strings.Contains(strings.Join(txt.Txt, ""), "external-dns/owner="+owner) {
			n++
		}
	}
	return n
}

// dump lists the zone's records, for failure messages.
func (z *testZone) dump() string {
	z.mu.Lock()
	defer z.mu.Unlock()
	var b strings.Builder
	for _, rr := range z.rrs {
		b.WriteString(rr.String() + "\n")
	}
	return b.String()
}
