package cluster

import (
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/resources"
)

func TestLocalAddresses(t *testing.T) {
	l, err := newLocalAddresses(netip.MustParsePrefix("127.0.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	gw := func(name string, age int, addrs ...string) *gwv1.Gateway {
		g := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))}}
		for _, a := range addrs {
			g.Spec.Addresses = append(g.Spec.Addresses, gwv1.GatewaySpecAddress{Value: a})
		}
		return g
	}
	addrOf := func(res *resources.Resources, name string) string {
		for _, g := range res.Gateways {
			if g.Name == name {
				if len(g.Spec.Addresses) != 1 {
					t.Fatalf("%s: addresses %+v", name, g.Spec.Addresses)
				}
				return g.Spec.Addresses[0].Value
			}
		}
		t.Fatalf("no Gateway %s", name)
		return ""
	}
	b, a, fixed := gw("b", 1), gw("a", 2), gw("fixed", 0, "10.0.0.1")
	in := &resources.Resources{Gateways: []*gwv1.Gateway{a, b, fixed}}
	out := l.assign(in)
	if got := addrOf(out, "b"); got != "127.0.0.2" {
		t.Errorf("oldest Gateway b got %s, want 127.0.0.2", got)
	}
	if got := addrOf(out, "a"); got != "127.0.0.3" {
		t.Errorf("a got %s, want 127.0.0.3", got)
	}
	if got := addrOf(out, "fixed"); got != "10.0.0.1" {
		t.Errorf("a Gateway with spec.addresses keeps them, got %s", got)
	}
	if len(a.Spec.Addresses) != 0 || len(b.Spec.Addresses) != 0 {
		t.Error("the input objects were modified")
	}
	// b goes away: a keeps its address, the next new Gateway takes b's.
	out = l.assign(&resources.Resources{Gateways: []*gwv1.Gateway{a, gw("c", 3)}})
	if addrOf(out, "a") != "127.0.0.3" || addrOf(out, "c") != "127.0.0.2" {
		t.Errorf("after deleting b: a %s, c %s; want 127.0.0.3, 127.0.0.2", addrOf(out, "a"), addrOf(out, "c"))
	}
	// An IPAddress entry without value asks for an address; a static one in the prefix is
	// never handed to another Gateway.
	empty := gw("empty", 4)
	empty.Spec.Addresses = []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType)}}
	out = l.assign(&resources.Resources{Gateways: []*gwv1.Gateway{a, gw("c", 3), gw("static", 5, "127.0.0.4"), empty}})
	if got := addrOf(out, "empty"); got != "127.0.0.5" {
		t.Errorf("a Gateway with an empty IPAddress got %s, want 127.0.0.5 (127.0.0.4 is static)", got)
	}
	if _, err := newLocalAddresses(netip.MustParsePrefix("127.0.0.1/32")); err == nil {
		t.Error("a /32 was accepted")
	}
}
