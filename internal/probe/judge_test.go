package probe

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snigate/snigate/api/v1alpha1"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	valid := func(a authority, names ...string) tls.Certificate {
		return a.leaf(t, now.Add(-day), now.Add(30*day), names...)
	}
	root := newAuthority(t, "tenant root", now.Add(-365*day), now.Add(365*day))
	other := newAuthority(t, "other root", now.Add(-365*day), now.Add(365*day))
	inter := root.intermediate(t, "tenant intermediate", now.Add(-100*day), now.Add(100*day))
	expiredInter := root.intermediate(t, "old intermediate", now.Add(-100*day), now.Add(-day))
	expiredRoot := newAuthority(t, "expired root", now.Add(-365*day), now.Add(-2*day))
	both := []string{perEngine, flat}

	clientOnly := sign(t, root, &x509.Certificate{
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames: both, NotBefore: now.Add(-day), NotAfter: now.Add(day),
	})
	cnOnly := sign(t, root, &x509.Certificate{
		Subject:  pkix.Name{CommonName: perEngine}, // what a legacy certificate carries
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore: now.Add(-day), NotAfter: now.Add(day),
	})
	selfSigned := sign(t, authority{}, &x509.Certificate{
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: both, NotBefore: now.Add(-day), NotAfter: now.Add(day),
	})
	selfAnchor := authority{cert: selfSigned.Leaf}
	withIP := sign(t, root, &x509.Certificate{
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{flat}, IPAddresses: []net.IP{net.ParseIP("10.0.0.5")}, NotBefore: now.Add(-day), NotAfter: now.Add(day),
	})

	for _, tc := range []struct {
		name      string
		cert      tls.Certificate
		hostnames []string
		roots     *authority // nil: no trust anchor
		at        time.Time  // zero: now
		reason    string
		msg       string // the whole message, or (with "...") a part of it
		covers    bool
		chains    *bool
	}{
		{name: "verified", cert: valid(root, both...), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonVerified, msg: "...names " + perEngine + ", " + flat + " and is valid until 2026-10-01T12:00:00Z; its chain leads to the trust anchor", covers: true, chains: ptr(true)},
		{name: "verified without trust anchor", cert: valid(other, both...), hostnames: both,
			reason: v1alpha1.ReasonVerified, msg: "...its chain was not checked (no trust anchor)", covers: true},
		{name: "wildcard covers one label", cert: valid(root, "*.pg.acme.example.com", flat), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonVerified, covers: true, chains: ptr(true)},
		{name: "wildcard covers one label only", cert: valid(root, "*.acme.example.com"), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonMissingDNSNames, msg: "the certificate names [*.acme.example.com]; add " + perEngine, chains: ptr(true)},
		{name: "hostnames compare without case and trailing dot", cert: valid(root, both...), hostnames: []string{"Orders.PG.acme.example.com.", perEngine, "", flat}, roots: &root,
			reason: v1alpha1.ReasonVerified, msg: "...names " + perEngine + ", " + flat + " and", covers: true, chains: ptr(true)},
		{name: "missing both", cert: valid(root, "other.example.com", "more.example.com"), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonMissingDNSNames, msg: "the certificate names [other.example.com more.example.com]; add " + perEngine + ", " + flat, chains: ptr(true)},
		{name: "missing the flat name", cert: valid(root, perEngine), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonMissingDNSNames, msg: "the certificate names [" + perEngine + "]; add " + flat, chains: ptr(true)},
		{name: "common name does not count", cert: cnOnly, hostnames: both, roots: &root,
			reason: v1alpha1.ReasonMissingDNSNames, msg: `the certificate names no DNS names (its common name "` + perEngine + `" does not count: clients match only subjectAltName); add ` + perEngine + ", " + flat, chains: ptr(true)},
		{name: "IP SAN", cert: withIP, hostnames: []string{"10.0.0.5", flat, "10.0.0.6"}, roots: &root,
			reason: v1alpha1.ReasonMissingDNSNames, msg: "the certificate names [" + flat + " 10.0.0.5]; add 10.0.0.6", chains: ptr(true)},
		{name: "no hostnames to cover", cert: valid(root, flat), roots: &root,
			reason: v1alpha1.ReasonVerified, msg: "...) is valid until 2026-10-01T12:00:00Z; its chain leads", covers: true, chains: ptr(true)},

		{name: "expired", cert: root.leaf(t, now.Add(-90*day), now.Add(-time.Second), both...), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonExpired, msg: "...expired at 2026-09-01T11:59:59Z: renew it", covers: true, chains: ptr(true)},
		{name: "expired and missing a name: expired first", cert: root.leaf(t, now.Add(-90*day), now.Add(-day), perEngine), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonExpired, chains: ptr(true)},
		{name: "expired, other CA: expired first, does not chain", cert: other.leaf(t, now.Add(-90*day), now.Add(-day), both...), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonExpired, covers: true, chains: ptr(false)},
		{name: "valid at its last second", cert: root.leaf(t, now.Add(-90*day), now, both...), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonVerified, covers: true, chains: ptr(true)},
		{name: "not yet valid", cert: root.leaf(t, now.Add(time.Hour), now.Add(90*day), both...), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonNotYetValid, msg: "...valid only from 2026-09-01T13:00:00Z, and it is 2026-09-01T12:00:00Z now", covers: true, chains: ptr(true)},
		{name: "not yet valid, no trust anchor", cert: other.leaf(t, now.Add(time.Hour), now.Add(90*day), both...), hostnames: both,
			reason: v1alpha1.ReasonNotYetValid, covers: true},

		{name: "other CA", cert: valid(other, both...), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonUnknownAuthority, msg: `...issued by "CN=other root", does not chain to the trust anchor; the server sent no intermediate certificate: if "CN=other root" is an intermediate CA, the server must send it after its own certificate; otherwise serve a certificate that the trust anchor's CA issued, or update the TrustAnchor`, covers: true, chains: ptr(false)},
		{name: "intermediate served", cert: withChain(valid(inter, both...), inter), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonVerified, covers: true, chains: ptr(true)},
		{name: "intermediate not served", cert: valid(inter, both...), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonUnknownAuthority, msg: `...the server sent no intermediate certificate: if "CN=tenant intermediate" is an intermediate CA, the server must send it after its own certificate`, covers: true, chains: ptr(false)},
		{name: "intermediate expired", cert: withChain(expiredInter.leaf(t, now.Add(-50*day), now.Add(50*day), both...), expiredInter), hostnames: both, roots: &root,
			reason: v1alpha1.ReasonExpired, msg: `the CA certificate "CN=old intermediate" on the way to the trust anchor expired at 2026-08-31T12:00:00Z: renew it, or serve a chain through a current one`, covers: true, chains: ptr(true)},
		{name: "trust anchor expired", cert: valid(expiredRoot, both...), hostnames: both, roots: &expiredRoot,
			reason: v1alpha1.ReasonExpired, msg: `...the CA certificate "CN=expired root"`, covers: true, chains: ptr(true)},
		{name: "not for server authentication", cert: clientOnly, hostnames: both, roots: &root,
			reason: v1alpha1.ReasonUnknownAuthority, msg: "...does not allow server authentication", covers: true, chains: ptr(false)},
		{name: "self-signed leaf as its own trust anchor", cert: selfSigned, hostnames: both, roots: &selfAnchor,
			reason: v1alpha1.ReasonVerified, covers: true, chains: ptr(true)},
		{name: "self-signed leaf, another trust anchor", cert: selfSigned, hostnames: both, roots: &root,
			reason: v1alpha1.ReasonUnknownAuthority, msg: "...; serve a certificate that the trust anchor's CA issued", covers: true, chains: ptr(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var roots *x509.CertPool
			if tc.roots != nil {
				roots = tc.roots.pool()
			}
			at := tc.at
			if at.IsZero() {
				at = now
			}
			chain := parsedChain(tc.cert)
			r := Judge(chain, tc.hostnames, roots, at)
			if r.Reason != tc.reason {
				t.Fatalf("reason %s (%s), want %s", r.Reason, r.Message, tc.reason)
			}
			if part, ok := strings.CutPrefix(tc.msg, "..."); ok {
				if !strings.Contains(r.Message, part) {
					t.Errorf("message %q lacks %q", r.Message, part)
				}
			} else if tc.msg != "" && r.Message != tc.msg {
				t.Errorf("message\n  %q\nwant\n  %q", r.Message, tc.msg)
			}
			leaf := chain[0]
			sum := sha256.Sum256(leaf.Raw)
			want := &v1alpha1.ServerCertificate{
				Serial:              serialHex(leaf.SerialNumber),
				SHA256:              hex.EncodeToString(sum[:]),
				NotBefore:           metav1.NewTime(leaf.NotBefore),
				NotAfter:            metav1.NewTime(leaf.NotAfter),
				DNSNames:            leaf.DNSNames,
				Issuer:              leaf.Issuer.String(),
				CoversHostnames:     tc.covers,
				ChainsToTrustAnchor: tc.chains,
			}
			if tc.reason == v1alpha1.ReasonMissingDNSNames {
				want.CoversHostnames = false
			}
			if d := cmp.Diff(want, r.Certificate); d != "" {
				t.Errorf("certificate (-want +got):\n%s", d)
			}
			if len(r.Chain) != len(chain) {
				t.Errorf("chain of %d, served %d", len(r.Chain), len(chain))
			}
		})
	}

	t.Run("no certificate", func(t *testing.T) {
		if r := Judge(nil, []string{flat}, nil, now); r.Reason != v1alpha1.ReasonUnreachable || r.Certificate != nil {
			t.Fatalf("%+v", r)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func TestSerialHex(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{0: "00", 10: "0A", 0x123: "0123", 0xabcdef: "ABCDEF", -0x1f: "-1F"} {
		if got := serialHex(big.NewInt(in)); got != want {
			t.Errorf("serialHex(%#x) = %s, want %s", in, got, want)
		}
	}
	if serialHex(nil) != "" {
		t.Error("nil serial")
	}
}
