package render

import (
	"crypto/x509"

	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/internal/testutil"
)

// The pools parsed from TrustAnchor bundles are kept from one call to the next while the
// bundle stays the same, parsed again when it changes, and forgotten once no call uses them.
func TestPoolsKeepParsedBundles(t *testing.T) {
	ca1, ca2 := testutil.NewCA(t), testutil.NewCA(t)
	a, b := types.NamespacedName{Namespace: "t1", Name: "db-ca"}, types.NamespacedName{Namespace: "t2", Name: "db-ca"}
	var kept Pools
	call := func(bundles map[types.NamespacedName][]byte) map[types.NamespacedName]*x509.CertPool {
		used := map[types.NamespacedName]*x509.CertPool{}
		for k, pem := range bundles {
			used[k] = kept.parse(k, pem)
		}
		kept.keepOnly(used)
		return used
	}
	first := call(map[types.NamespacedName][]byte{a: ca1.CertPEM, b: ca1.CertPEM})
	if first[a] == first[b] {
		t.Fatal("two TrustAnchors share a pool")
	}
	// The same bytes in a new slice (a Secret decoded again) are the same bundle.
	second := call(map[types.NamespacedName][]byte{a: append([]byte(nil), ca1.CertPEM...), b: ca2.CertPEM})
	if second[a] != first[a] {
		t.Error("an unchanged bundle was parsed again")
	}
	if second[b] == first[b] {
		t.Fatal("a changed bundle kept its old pool")
	}
	if !second[b].Equal(poolOf(ca2.CertPEM)) {
		t.Error("the changed bundle's pool does not hold its new CA")
	}
	call(map[types.NamespacedName][]byte{b: ca2.CertPEM})
	if _, ok := kept.m[a]; ok || len(kept.m) != 1 {
		t.Errorf("kept %d pools after a call that used one: %v", len(kept.m), kept.m)
	}
}

func poolOf(pem []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}
