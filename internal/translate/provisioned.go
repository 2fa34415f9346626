package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ProvisionedName is the name of every object provisioned for gw (internal/provision), its
// LoadBalancer Service among them: <gateway>-<class> (GEP-1762), or, when that is no valid
// Service name (a DNS-1035 label of at most 63 characters), snigate-<hash of gateway and
// class>. It lives here, not in provision, because translate reads that Service for the
// Gateway's addresses (Options.ProvisionedAddresses) and provision imports translate.
func ProvisionedName(gw *gwv1.Gateway) string {
	n := gw.Name + "-" + string(gw.Spec.GatewayClassName)
	if len(validation.IsDNS1035Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(gw.Name + "/" + string(gw.Spec.GatewayClassName)))
	return "snigate-" + hex.EncodeToString(sum[:])[:16]
}

// provisionedAddresses are the addresses of gw's provisioned Service as its load balancer
// lists them (IP or hostname from status.loadBalancer.ingress, in that order), and the
// Service's name. A Service of that name that gw does not control is someone else's: its
// addresses are not gw's.
func (t *translator) provisionedAddresses(gw *gateway) ([]gwv1.GatewayStatusAddress, nsName) {
	key := nsName{gw.key.ns, ProvisionedName(gw.obj)}
	svc := t.services[key]
	if svc == nil || !metav1.IsControlledBy(svc, gw.obj) {
		return nil, key
	}
	var out []gwv1.GatewayStatusAddress
	for _, in := range svc.Status.LoadBalancer.Ingress {
		switch {
		case in.IP != "":
			out = append(out, gwv1.GatewayStatusAddress{Type: ptr(gwv1.IPAddressType), Value: in.IP})
		case in.Hostname != "":
			out = append(out, gwv1.GatewayStatusAddress{Type: ptr(gwv1.HostnameAddressType), Value: in.Hostname})
		}
	}
	return out, key
}

// addressNotAssigned is the Programmed=False message of a Gateway whose provisioned Service
// has no load balancer address yet.
func addressNotAssigned(svc nsName) string {
	return fmt.Sprintf("waiting for a load balancer to assign an address to Service %s "+
		"(status.loadBalancer.ingress); the cluster needs a load balancer implementation", svc)
}
