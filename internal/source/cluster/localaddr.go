package cluster

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/resources"
)

// localAddresses gives every Gateway without spec.addresses (or with only IPAddress entries
// without a value) an address of its own from a
// prefix (Config.LocalAddresses, for example 127.0.0.0/24), for a local proxy that serves
// many Gateways on one machine: each Gateway binds its address, which translate then reports
// in status.addresses, so Gateways on the same port with overlapping hostnames stay apart.
//
// A Gateway keeps its address for as long as it exists; new Gateways take the lowest free
// address in the order (creationTimestamp, namespace/name); a deleted Gateway's address is
// free again. The prefix's first two addresses (network and .1) are never handed out.
// Only the controller's in-memory copy of the Gateway changes, never the API object.
type localAddresses struct {
	prefix netip.Prefix
	byGW   map[types.NamespacedName]netip.Addr
	used   map[netip.Addr]bool
	// copies are the last copies handed out, by the Gateway they were made of: the same
	// Gateway at the same address gets the very same copy (translate's memo keys on it).
	copies map[*gwv1.Gateway]*gwv1.Gateway
}

func newLocalAddresses(p netip.Prefix) (*localAddresses, error) {
	if !p.IsValid() || p.Bits() > p.Addr().BitLen()-2 {
		return nil, fmt.Errorf("cluster: LocalAddresses %s: want a prefix with room for addresses", p)
	}
	return &localAddresses{prefix: p.Masked(), byGW: map[types.NamespacedName]netip.Addr{}, used: map[netip.Addr]bool{},
		copies: map[*gwv1.Gateway]*gwv1.Gateway{}}, nil
}

// assign returns res with each Gateway that has no spec.addresses replaced by a copy that
// requests its own address. A Gateway that does not fit (prefix exhausted) is left as it is.
func (l *localAddresses) assign(res *resources.Resources) *resources.Resources {
	seen := map[types.NamespacedName]bool{}
	var fresh []*gwv1.Gateway
	for _, g := range res.Gateways {
		key := types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
		seen[key] = true
		if _, ok := l.byGW[key]; !ok && wantsAddress(g) {
			fresh = append(fresh, g)
		}
	}
	// Static addresses in the prefix are their Gateways': never handed out to another.
	static := map[netip.Addr]bool{}
	for _, g := range res.Gateways {
		for _, a := range g.Spec.Addresses {
			if ip, err := netip.ParseAddr(a.Value); err == nil {
				static[ip.Unmap()] = true
			}
		}
	}
	for key, a := range l.byGW {
		if !seen[key] {
			delete(l.byGW, key)
			delete(l.used, a)
		}
	}
	slices.SortFunc(fresh, func(a, b *gwv1.Gateway) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, g := range fresh {
		for a := l.prefix.Addr().Next().Next(); a.IsValid() && l.prefix.Contains(a); a = a.Next() {
			if !l.used[a] && !static[a] {
				l.used[a] = true
				l.byGW[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = a
				break
			}
		}
	}
	out := *res
	out.Gateways = make([]*gwv1.Gateway, len(res.Gateways))
	copies := make(map[*gwv1.Gateway]*gwv1.Gateway, len(l.copies))
	for i, g := range res.Gateways {
		out.Gateways[i] = g
		a, ok := l.byGW[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}]
		if !ok || !wantsAddress(g) {
			continue
		}
		c := l.copies[g]
		if c == nil || c.Spec.Addresses[0].Value != a.String() {
			c = g.DeepCopy()
			c.Spec.Addresses = []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType), Value: a.String()}}
		}
		copies[g] = c
		out.Gateways[i] = c
	}
	l.copies = copies
	return &out
}

// wantsAddress: g has no spec.addresses, or only IPAddress entries without a value (the
// Gateway API's GatewayAddressEmpty: "an address of this type, any one").
func wantsAddress(g *gwv1.Gateway) bool {
	for _, a := range g.Spec.Addresses {
		if a.Value != "" || (a.Type != nil && *a.Type != gwv1.IPAddressType) {
			return false
		}
	}
	return true
}
