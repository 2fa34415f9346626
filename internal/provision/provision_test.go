package provision

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/translate"
)

func gateway(name string, ports ...int32) *gwv1.Gateway {
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, UID: types.UID("uid-" + name)},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "snigate"},
	}
	for i, p := range ports {
		gw.Spec.Listeners = append(gw.Spec.Listeners, gwv1.Listener{
			Name: gwv1.SectionName("l" + string(rune('a'+i))), Protocol: gwv1.TLSProtocolType, Port: gwv1.PortNumber(p),
		})
	}
	return gw
}

func TestName(t *testing.T) {
	if got := Name(gateway("edge")); got != "edge-snigate" {
		t.Errorf("Name = %q, want edge-snigate (GEP-1762: <gateway>-<class>)", got)
	}
	for _, n := range []string{strings.Repeat("a", 60), "1edge"} {
		got := Name(gateway(n))
		if !strings.HasPrefix(got, "snigate-") || len(got) > 63 {
			t.Errorf("Name(%q) = %q: want a valid DNS-1035 label snigate-<hash>", n, got)
		}
		if got2 := Name(gateway(n)); got2 != got {
			t.Errorf("Name not stable: %q, %q", got, got2)
		}
	}
}

func TestPortsDistinctSortedNoUDP(t *testing.T) {
	gw := gateway("edge", 8443, 443, 443)
	gw.Spec.Listeners = append(gw.Spec.Listeners, gwv1.Listener{Name: "dns", Protocol: gwv1.UDPProtocolType, Port: 53})
	got := Ports(gw)
	if len(got) != 2 || got[0] != 443 || got[1] != 8443 {
		t.Errorf("Ports = %v, want [443 8443]", got)
	}
	svc := Service(gw)
	if len(svc.Spec.Ports) != 2 || *svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("Service spec %+v", svc.Spec)
	}
	if Service(gateway("none")) != nil {
		t.Error("a Gateway without TCP listener ports got a Service")
	}
}

func TestReplicas(t *testing.T) {
	gw := gateway("edge")
	for v, want := range map[string]int32{"": 1, "3": 3, " 0 ": 0, "-1": 1, "x": 1} {
		gw.Annotations = nil
		if v != "" {
			gw.Annotations = map[string]string{ReplicasAnnotation: v}
		}
		got, err := Replicas(gw)
		if got != want || (err != nil) != (v == "-1" || v == "x") {
			t.Errorf("%q: Replicas = %d, %v; want %d", v, got, err, want)
		}
	}
}

// translate finds the Service that provision creates for a Gateway: the Gateway's addresses
// are its load balancer's, and a Gateway without any is Programmed=False/AddressNotAssigned.
func TestAddresses(t *testing.T) {
	withAddr, noAddr, other := gateway("a", 443), gateway("b", 8443), gateway("c", 9443)
	for _, gw := range []*gwv1.Gateway{withAddr, noAddr, other} {
		gw.Generation = 4
		gw.Spec.Listeners[0].TLS = &gwv1.ListenerTLSConfig{Mode: ptr(gwv1.TLSModePassthrough)}
	}
	svc := func(gw *gwv1.Gateway, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: gw.Namespace, Name: Name(gw),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: gwv1.GroupVersion.String(), Kind: "Gateway",
				Name: gw.Name, UID: gw.UID, Controller: ptr(true)}}}}
		s.Status.LoadBalancer.Ingress = ingress
		return s
	}
	// Service c-snigate exists but belongs to someone else: not ours to read.
	foreign := svc(other, corev1.LoadBalancerIngress{IP: "198.51.100.1"})
	foreign.OwnerReferences = nil
	r := translate.Translate(&resources.Resources{
		Gateways: []*gwv1.Gateway{withAddr, noAddr, other},
		Services: []*corev1.Service{
			svc(withAddr, corev1.LoadBalancerIngress{IP: "192.0.2.7"}, corev1.LoadBalancerIngress{Hostname: "lb.example.test"}),
			svc(noAddr), foreign,
		},
	}, translate.Options{ProvisionedAddresses: true})
	if len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	st := r.Status
	a := st.Gateways[0].Status
	if len(a.Addresses) != 2 || a.Addresses[0].Value != "192.0.2.7" || *a.Addresses[0].Type != gwv1.IPAddressType ||
		a.Addresses[1].Value != "lb.example.test" || *a.Addresses[1].Type != gwv1.HostnameAddressType {
		t.Errorf("a: addresses %+v", a.Addresses)
	}
	if c := meta.FindStatusCondition(a.Conditions, "Programmed"); c.Status != metav1.ConditionTrue {
		t.Errorf("a: Programmed %+v", c)
	}
	for _, gs := range st.Gateways[1:] {
		if len(gs.Status.Addresses) != 0 {
			t.Errorf("%s: addresses %+v, want none", gs.Name, gs.Status.Addresses)
		}
		c := meta.FindStatusCondition(gs.Status.Conditions, "Programmed")
		if c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.GatewayReasonAddressNotAssigned) || c.ObservedGeneration != 4 {
			t.Errorf("%s: Programmed %+v, want False/AddressNotAssigned", gs.Name, c)
		}
	}
}

// The ports of the ListenerSets a Gateway allows count in its Service; those of a set of
// another parent or of a namespace it does not allow do not.
func TestAttachedSetsPorts(t *testing.T) {
	gw := gateway("edge", 443)
	gw.Spec.AllowedListeners = &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: ptr(gwv1.NamespacesFromSelector),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "yes"}}}}
	set := func(ns, parent string, port gwv1.PortNumber) gwv1.ListenerSet {
		return gwv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, Spec: gwv1.ListenerSetSpec{
			ParentRef: gwv1.ParentGatewayReference{Name: gwv1.ObjectName(parent), Namespace: ptr(gwv1.Namespace(gw.Namespace))},
			Listeners: []gwv1.ListenerEntry{{Name: "l", Port: port, Protocol: gwv1.TCPProtocolType}},
		}}
	}
	labels := map[string]map[string]string{"a": {"tenant": "yes"}, "b": {"tenant": "yes"}, "c": {}}
	sets := AttachedSets(gw, []gwv1.ListenerSet{set("a", "edge", 5432), set("b", "edge", 5432), set("b", "other", 6000), set("c", "edge", 7000)},
		func(ns string) k8slabels.Set { return labels[ns] })
	if got := Ports(gw, sets...); !slices.Equal(got, []int32{443, 5432}) {
		t.Errorf("Ports = %v, want [443 5432]", got)
	}
}

// A Gateway's first static IPAddress is asked of the load balancer.
func TestServiceStaticAddress(t *testing.T) {
	gw := gateway("edge", 443)
	if svc := Service(gw); svc.Spec.LoadBalancerIP != nil {
		t.Errorf("no spec.addresses, loadBalancerIP %q", *svc.Spec.LoadBalancerIP)
	}
	gw.Spec.Addresses = []gwv1.GatewaySpecAddress{{Type: ptr(gwv1.HostnameAddressType), Value: "lb.example.com"},
		{Type: ptr(gwv1.IPAddressType), Value: "203.0.113.7"}, {Value: "203.0.113.8"}}
	if svc := Service(gw); svc.Spec.LoadBalancerIP == nil || *svc.Spec.LoadBalancerIP != "203.0.113.7" {
		t.Errorf("loadBalancerIP %v, want 203.0.113.7", svc.Spec.LoadBalancerIP)
	}
}
