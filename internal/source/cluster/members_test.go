package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	snitest "github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// A Kafka-like cluster as one DatabaseExposure with members, on the real API server: the
// bootstrap Service has three ready endpoints (TLS servers on 127.0.0.1-3, one port), the
// third serving a certificate without the bootstrap name. The certificate probe reads
// every endpoint: CertificateVerified is False naming that endpoint and its serial, and
// status.endpoints lists all three serials. Each member's route is applied, owned by the
// exposure; a member whose Service does not exist says BackendNotFound while the others
// serve.
func TestMembersAndEveryEndpointProbed(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	kc := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme, Options: kubetest.Options{CRDs: crds}})
	cl, ctx := kc.Client, context.Background()

	const bootstrap = "events.kafka.acme.example.test"
	ca := snitest.NewCA(t)
	var certs []tls.Certificate
	serialOf := map[string]string{} // by the first DNS name
	for _, names := range [][]string{
		{"broker-0." + bootstrap, bootstrap},
		{"broker-1." + bootstrap, bootstrap},
		{"broker-2." + bootstrap}, // lacks the bootstrap name
	} {
		c := ca.Issue(t, names...)
		certs = append(certs, c.TLS)
		serialOf[names[0]] = c.SerialHex()
	}
	addrs := tlsServers(t, hostAddress(t), certs)
	serials := make([]string, 3)
	bad := -1
	for i, c := range certs {
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		serials[i] = serialOf[leaf.DNSNames[0]]
		if len(leaf.DNSNames) == 1 {
			bad = i
		}
	}

	member := func(name, svc string) v1alpha1.DatabaseMember {
		return v1alpha1.DatabaseMember{Name: name, BackendRef: v1alpha1.DatabaseBackendRef{Name: svc, Port: 9093}}
	}
	objs := []client.Object{
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"}, Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme"}},
		&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme"}, Spec: v1alpha1.TenantGatewaySpec{
			Apex: "acme.example.test", DatabaseHostnames: v1alpha1.DatabaseHostnamesSubdomain}},
		&v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "events"}, Spec: v1alpha1.DatabaseExposureSpec{
			Engine: v1alpha1.EngineKafka, BackendRef: v1alpha1.DatabaseBackendRef{Name: "events", Port: 9093},
			Members: []v1alpha1.DatabaseMember{member("broker-0", "events-0"), member("broker-9", "events-9")}}},
	}
	// The bootstrap Service over the three servers (a slice each: their ports differ), and
	// broker-0's over the first alone.
	for _, s := range []struct {
		name  string
		addrs []string
	}{{"events", addrs}, {"events-0", addrs[:1]}} {
		objs = append(objs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: s.name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "kafka", Port: 9093}}}})
		for i, a := range s.addrs {
			host, p, _ := net.SplitHostPort(a)
			port, _ := strconv.Atoi(p)
			objs = append(objs, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: fmt.Sprintf("%s-%d", s.name, i),
				Labels: map[string]string{discoveryv1.LabelServiceName: s.name}}, AddressType: discoveryv1.AddressTypeIPv4,
				Ports:     []discoveryv1.EndpointPort{{Name: ptrTo("kafka"), Port: ptrTo(int32(port))}},
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}}})
		}
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := New(Config{REST: kc.As(kubetest.ControllerUser), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c)

	kubetest.Eventually(t, 60*time.Second, "the verdicts on every endpoint", func() error {
		var d v1alpha1.DatabaseExposure
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "events"}, &d); err != nil {
			return err
		}
		st := d.Status
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionCertificateVerified)
		named := fmt.Sprintf("%s (serial %s): MissingDNSNames", addrs[bad], serials[bad])
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonMissingDNSNames || !strings.Contains(c.Message, named) ||
			!strings.Contains(c.Message, "1 of 3 endpoints") {
			return fmt.Errorf("CertificateVerified %+v; want False MissingDNSNames naming %q", c, named)
		}
		if len(st.Endpoints) != 3 {
			return fmt.Errorf("status.endpoints %+v; want three", st.Endpoints)
		}
		for i, e := range st.Endpoints {
			if e.Address != addrs[i] || e.Serial != serials[i] {
				return fmt.Errorf("endpoint %d: %+v; want %s with serial %s", i, e, addrs[i], serials[i])
			}
		}
		// broker-0's Service is the first server: verified when it carries broker-0's name.
		want0 := v1alpha1.ReasonVerified
		if serials[0] != serialOf["broker-0."+bootstrap] {
			want0 = v1alpha1.ReasonMissingDNSNames
		}
		if len(st.Members) != 2 || st.Members[0].Route != "events.broker-0" || st.Members[0].Certificate != want0 ||
			len(st.Members[0].Endpoints) != 1 || st.Members[0].Endpoints[0].Serial != serials[0] {
			return fmt.Errorf("members %+v; want broker-0 %s with serial %s", st.Members, want0, serials[0])
		}
		if m := st.Members[1]; m.Reason != v1alpha1.ReasonBackendNotFound || !strings.Contains(m.Message, "events-9") {
			return fmt.Errorf("broker-9: %+v; want BackendNotFound naming its Service", m)
		}
		if mc := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionMembersAccepted); mc == nil || mc.Reason != v1alpha1.ReasonBackendNotFound {
			return fmt.Errorf("MembersAccepted %+v", mc)
		}
		return nil
	})
	var routes gwv1.TLSRouteList
	if err := cl.List(ctx, &routes, client.InNamespace("acme")); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range routes.Items {
		ref := metav1.GetControllerOf(&r)
		if ref == nil || ref.Kind != "DatabaseExposure" || ref.Name != "events" {
			t.Errorf("route %s is not controlled by the exposure: %+v", r.Name, ref)
		}
		got[r.Name] = string(r.Spec.Hostnames[0])
	}
	if len(got) != 3 || got["events"] != bootstrap || got["events.broker-0"] != "broker-0."+bootstrap || got["events.broker-9"] != "broker-9."+bootstrap {
		t.Errorf("routes %v; want the bootstrap's and one per member", got)
	}
}

// hostAddress is a non-loopback IPv4 address of this machine: the API server refuses
// loopback addresses in EndpointSlices, and the probe must reach the servers at the
// addresses the slices give.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("no non-loopback IPv4 address to serve the test's backends on")
	return ""
}

// tlsServers serves certs[i] on host, each on a port of its own, handshaking and closing;
// it returns their addresses, in port order (the order the probe and the data plane take
// them) with certs sorted to match.
func tlsServers(t *testing.T, host string, certs []tls.Certificate) []string {
	t.Helper()
	type server struct {
		l    net.Listener
		cert tls.Certificate
	}
	var servers []server
	for _, c := range certs {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		servers = append(servers, server{l, c})
	}
	slices.SortFunc(servers, func(a, b server) int { return a.l.Addr().(*net.TCPAddr).Port - b.l.Addr().(*net.TCPAddr).Port })
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i], certs[i] = s.l.Addr().String(), s.cert
		cfg := &tls.Config{Certificates: []tls.Certificate{s.cert}}
		go func() {
			for {
				conn, err := s.l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer conn.Close()
					_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
					_ = tls.Server(conn, cfg).Handshake()
				}()
			}
		}()
	}
	return addrs
}
