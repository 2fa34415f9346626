package render

// Conflicts between tenants: names rendered that another owner holds, and the namespace
// trees and hostnames of TenantGateways that overlap.

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/api/v1alpha1"
)

// nameInUse names an object at a rendered name that t does not own, or "".
func (r *renderer) nameInUse(t *v1alpha1.TenantGateway) string {
	if r.askBool(question{kind: qForeignGateway, key: keyOf(t), owner: keyOf(t), uid: t.UID}) {
		return fmt.Sprintf("Gateway %s/%s exists and is not this TenantGateway's: rename one of them", t.Namespace, t.Name)
	}
	if r.askBool(question{kind: qForeignListenerSet, key: keyOf(t), owner: keyOf(t), uid: t.UID}) {
		return fmt.Sprintf("ListenerSet %s/%s exists and is not this TenantGateway's: rename one of them", t.Namespace, t.Name)
	}
	if r.askBool(question{kind: qForeignHTTPRoute, key: nsName{t.Namespace, redirectName(t)}, owner: keyOf(t), uid: t.UID}) {
		return fmt.Sprintf("HTTPRoute %s/%s exists and is not this TenantGateway's: rename one of them", t.Namespace, redirectName(t))
	}
	return ""
}

// certificateNameInUse names an existing Issuer or Certificate at a name b rendered that t
// does not own, or "". Their names depend on the routes (one Certificate per HTTPS hostname),
// so this runs after the build, not with nameInUse.
func (r *renderer) certificateNameInUse(t *v1alpha1.TenantGateway, b *build) string {
	for _, want := range b.issuers {
		if r.askBool(question{kind: qForeignIssuer, key: keyOf(want), owner: keyOf(t), uid: t.UID}) {
			return fmt.Sprintf("Issuer %s/%s exists and is not this TenantGateway's: rename it, or name it in spec.certificates.issuerRef", want.Namespace, want.Name)
		}
	}
	for _, want := range b.certs {
		if r.askBool(question{kind: qForeignCertificate, key: keyOf(want), owner: keyOf(t), uid: t.UID}) {
			return fmt.Sprintf("Certificate %s/%s exists and is not this TenantGateway's: rename one of them", want.Namespace, want.Name)
		}
	}
	return ""
}

// ownedBy reports whether o's controller is t (by UID when t has one, as in a cluster).
func ownedBy(o metav1.Object, t *v1alpha1.TenantGateway) bool { return ownedByName(o, t.Name, t.UID) }

// ownedByName reports whether o's controller is TenantGateway name (by uid when not empty).
func ownedByName(o metav1.Object, name string, uid types.UID) bool {
	ref := metav1.GetControllerOf(o)
	return ref != nil && ref.Kind == "TenantGateway" && ref.Name == name && (uid == "" || ref.UID == uid)
}

// tree is t's namespaces: its own, its children (labelled snigate.dev/gateway=<ns>) and
// the attached ones, sorted; children maps each child with an apex under t's to that apex.
type tree struct {
	namespaces []string
	children   []child
}

type child struct{ namespace, apex string }

func (r *renderer) tree(t *v1alpha1.TenantGateway) tree {
	seen := map[string]bool{t.Namespace: true}
	var tr tree
	for _, ns := range r.ask(question{kind: qLabelled, key: nsName{namespace: t.Namespace}}).([]*corev1.Namespace) {
		if ns.Name == t.Namespace {
			continue
		}
		seen[ns.Name] = true
		if apex := ns.Labels[LabelHost]; apex != "" && apex != t.Spec.Apex && strings.HasSuffix(apex, "."+t.Spec.Apex) {
			tr.children = append(tr.children, child{ns.Name, apex})
		}
	}
	for _, ns := range t.Spec.AttachedNamespaces {
		seen[ns] = true
	}
	for ns := range seen {
		tr.namespaces = append(tr.namespaces, ns)
	}
	slices.Sort(tr.namespaces)
	slices.SortFunc(tr.children, func(a, b child) int { return strings.Compare(a.apex, b.apex) })
	return tr
}

// overlaps names passthrough entries whose hostnames overlap (equal, or one wildcard
// covering the other), or "". Each entry has a port of its own, so snigate would route them
// apart; but one name reaching two backends depending on the port is almost always a
// mistake, and the certificates of both would name it.
func overlaps(t *v1alpha1.TenantGateway) string {
	type entry struct{ what, host string }
	var es []entry
	for _, s := range t.Spec.TLSPassthroughServices {
		es = append(es, entry{"tlsPassthroughServices[" + s + "]", s + "." + t.Spec.Apex})
	}
	for _, l := range t.Spec.TLSPassthroughListeners {
		es = append(es, entry{"tlsPassthroughListeners[" + l.Name + "]", l.Hostname})
	}
	var found []string
	for i := range es {
		for j := i + 1; j < len(es); j++ {
			if hostsOverlap(es[i].host, es[j].host) {
				found = append(found, fmt.Sprintf("%s (%s) and %s (%s)", es[i].what, es[i].host, es[j].what, es[j].host))
			}
		}
	}
	if len(found) == 0 {
		return ""
	}
	return "hostnames overlap: " + strings.Join(found, "; ")
}

// hostsOverlap reports whether some name matches both hostnames (exact or "*." wildcards,
// which match one or more labels, as Gateway API listener hostnames do).
func hostsOverlap(a, b string) bool {
	if a == b {
		return true
	}
	covers := func(w, h string) bool {
		suffix, ok := strings.CutPrefix(w, "*")
		return ok && strings.HasSuffix(h, suffix) && len(h) > len(suffix)
	}
	return covers(a, b) || covers(b, a)
}
