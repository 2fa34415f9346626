package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/source/cluster"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// databasesClusterAddr is the one address --local-addresses gives the tenant's Gateway: the
// MariaDB certificate names it (the mariadb client verifies the address it dials).
const databasesClusterAddr = "127.0.0.46"

// The job users come for, end to end on a real kube-apiserver with kube-controller-manager's
// garbage collector: `snigate controller` renders a TenantGateway, two PostgreSQL releases,
// a Redis and a MariaDB into one Gateway address, the databases run in network namespaces
// behind EndpointSlices, and real clients reach each by its name with verify-full against
// the TrustAnchor's published CA, read as an impersonated reader (who cannot read the
// source). The serial seen is the database's own; no SNI gets zero bytes; the certificate
// probe says Verified, MissingDNSNames, NotTLS and Expired where each is true; deleting
// one release keeps the other (and its open session), deleting the last closes the port.
func TestDatabaseExposureCluster(t *testing.T) {
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (network namespaces, and the Gateway binds port 80)", errors.New("not root"))
	}
	dbPsqlBin(t)
	redisCLI := testutil.Binary(t, "redis-cli", "/usr/bin")
	scheme, err := cluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: crds, GarbageCollector: true})
	kubeconfig := writeKubeconfig(t, env)
	cl, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	ca, next := testutil.NewCA(t), testutil.NewCA(t)
	names := func(release, engine string) []string {
		return []string{release + "." + engine + ".example.test", release + ".example.test"}
	}
	orders := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "orders.postgres.example.test",
		Cert: ca.Issue(t, names("orders", "postgres")...), Netns: testutil.NetnsHost(t, "orders")})
	billing := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "billing.postgres.example.test",
		Cert: ca.Issue(t, names("billing", "postgres")...), Netns: testutil.NetnsHost(t, "billing")})
	cache := testutil.StartRedis(t, testutil.RedisOptions{CA: ca, Name: "cache.redis.example.test",
		Cert: ca.Issue(t, names("cache", "redis")...), Netns: testutil.NetnsHost(t, "cache")})
	legacy := testutil.StartMariaDB(t, testutil.MariaDBOptions{CA: ca, Name: "legacy.mariadb.example.test",
		Cert: ca.Issue(t, "legacy.mariadb.example.test", databasesClusterAddr), Netns: testutil.NetnsHost(t, "legacy")})
	// Backends a client would refuse: one whose certificate lacks the names, one in
	// plaintext, one expired (echo servers, one namespace, three ports).
	bad := testutil.NetnsHost(t, "bad")
	dir := t.TempDir()
	wrongCert, wrongKey := ca.Issue(t, "somewhere.else.test").WriteFiles(t, filepath.Join(dir))
	expiredDir := filepath.Join(dir, "expired")
	os.Mkdir(expiredDir, 0o755)
	expiredCert, expiredKey := ca.IssueValid(t, time.Now().Add(-72*time.Hour), time.Now().Add(-24*time.Hour), names("expired", "redis")...).WriteFiles(t, expiredDir)
	badAddr := func(port int) string { return net.JoinHostPort(bad.IP.String(), strconv.Itoa(port)) }
	bad.Start(t, snigateBin, "echo", "--listen", badAddr(7001), "--name", "wrong", "--cert", wrongCert, "--key", wrongKey)
	bad.Start(t, snigateBin, "echo", "--listen", badAddr(7002), "--name", "plain")
	bad.Start(t, snigateBin, "echo", "--listen", badAddr(7003), "--name", "expired", "--cert", expiredCert, "--key", expiredKey)
	// A backend that rotates from a certificate of ca (7004) to one of next (7005).
	oldDir, newDir := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	os.Mkdir(oldDir, 0o755)
	os.Mkdir(newDir, 0o755)
	oldLeaf, newLeaf := ca.Issue(t, names("rotating", "custom")...), next.Issue(t, names("rotating", "custom")...)
	oldCert, oldKey := oldLeaf.WriteFiles(t, oldDir)
	newCert, newKey := newLeaf.WriteFiles(t, newDir)
	bad.Start(t, snigateBin, "echo", "--listen", badAddr(7004), "--name", "old", "--cert", oldCert, "--key", oldKey)
	bad.Start(t, snigateBin, "echo", "--listen", badAddr(7005), "--name", "new", "--cert", newCert, "--key", newKey)
	for _, p := range []int{7001, 7002, 7003, 7004, 7005} {
		waitListening(t, badAddr(p))
	}
	mariaPort := testutil.FreePorts(t, 1)[0]
	host := func(a string) string { h, _, _ := net.SplitHostPort(a); return h }

	exposure := func(name, engine string, port int, extra string) string {
		return fmt.Sprintf(`apiVersion: snigate.dev/v1alpha1
kind: DatabaseExposure
metadata: {name: %s, namespace: acme}
spec:
  engine: %s
  backendRef: {name: %s, port: %d}
%s`, name, engine, name, port, extra)
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
---
apiVersion: snigate.dev/v1alpha1
kind: TrustAnchor
metadata: {name: db, namespace: acme}
spec:
  sourceSecretRef: {name: db-ca}
  readers: [{kind: User, name: alice}]
`,
		exposure("orders", "postgres", 5432, "  trustAnchorRef: {name: db}\n"),
		exposure("billing", "postgres", 5432, "  trustAnchorRef: {name: db}\n"),
		exposure("cache", "redis", 6379, "  trustAnchorRef: {name: db}\n"),
		exposure("legacy", "mariadb", 3306, fmt.Sprintf("  port: %d\n", mariaPort)),
		exposure("wrongnames", "redis", 6379, ""),
		exposure("plaintext", "redis", 6379, ""),
		exposure("expired", "redis", 6379, ""),
		exposure("rotating", "custom", 7443, "  port: 7443\n  trustAnchorRef: {name: rot}\n"),
		`apiVersion: snigate.dev/v1alpha1
kind: TrustAnchor
metadata: {name: rot, namespace: acme}
spec:
  sourceSecretRef: {name: rot-ca}
`,
		fixture.ServiceYAML("acme", "rotating", 7443, 7004, bad.IP.String()),
		fixture.ServiceYAML("acme", "orders", 5432, orders.Port, host(orders.Addr)),
		fixture.ServiceYAML("acme", "billing", 5432, billing.Port, host(billing.Addr)),
		fixture.ServiceYAML("acme", "cache", 6379, cache.Port, host(cache.Addr)),
		fixture.ServiceYAML("acme", "legacy", 3306, legacy.Port, host(legacy.Addr)),
		fixture.ServiceYAML("acme", "wrongnames", 6379, 7001, bad.IP.String()),
		fixture.ServiceYAML("acme", "plaintext", 6379, 7002, bad.IP.String()),
		fixture.ServiceYAML("acme", "expired", 6379, 7003, bad.IP.String()),
	))
	// The CA's Secret as a platform keeps it: the certificate and, in another key, the key
	// a tenant must never read.
	if err := cl.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1ObjectMeta("acme", "db-ca"),
		Data:       map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": []byte("the CA's key: never for tenants")},
	}); err != nil {
		t.Fatal(err)
	}
	rotSource := &corev1.Secret{ObjectMeta: metav1ObjectMeta("acme", "rot-ca"), Data: map[string][]byte{"ca.crt": ca.CertPEM}}
	if err := cl.Create(context.Background(), rotSource); err != nil {
		t.Fatal(err)
	}

	startSnigate(t, "", "controller", "--kubeconfig", kubeconfig, "--leader-elect=false",
		"--local-addresses", "127.0.0.44/30") // the first address it hands out: .46
	ctx := context.Background()

	t.Run("every exposure's status, the probe's verdicts included", func(t *testing.T) {
		want := map[string]struct{ reason, inMessage string }{
			"orders": {v1alpha1.ReasonVerified, ""}, "billing": {v1alpha1.ReasonVerified, ""},
			"cache": {v1alpha1.ReasonVerified, ""}, "legacy": {v1alpha1.ReasonVerified, ""},
			"wrongnames": {v1alpha1.ReasonMissingDNSNames, "wrongnames.redis.example.test, wrongnames.example.test"},
			"plaintext":  {v1alpha1.ReasonNotTLS, ""}, "expired": {v1alpha1.ReasonExpired, ""},
			"rotating": {v1alpha1.ReasonVerified, ""},
		}
		kubetest.Eventually(t, clusterWait, "the exposures' status", func() error {
			var list v1alpha1.DatabaseExposureList
			if err := cl.List(ctx, &list, client.InNamespace("acme")); err != nil {
				return err
			}
			var problems []string
			for _, d := range list.Items {
				w := want[d.Name]
				if !meta.IsStatusConditionTrue(d.Status.Conditions, v1alpha1.ConditionProgrammed) {
					problems = append(problems, d.Name+" not Programmed")
				}
				c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionCertificateVerified)
				if c == nil || c.Reason != w.reason || !strings.Contains(c.Message, w.inMessage) {
					problems = append(problems, fmt.Sprintf("%s: CertificateVerified %+v, want %s naming %q", d.Name, c, w.reason, w.inMessage))
				}
				if d.Status.Port == 0 || len(d.Status.Addresses) == 0 || d.Status.Addresses[0] != databasesClusterAddr {
					problems = append(problems, fmt.Sprintf("%s: port %d addresses %v", d.Name, d.Status.Port, d.Status.Addresses))
				}
			}
			if len(list.Items) != len(want) {
				problems = append(problems, fmt.Sprintf("%d exposures", len(list.Items)))
			}
			if len(problems) > 0 {
				return errors.New(strings.Join(problems, "; "))
			}
			return nil
		})
		var d v1alpha1.DatabaseExposure
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders"}, &d); err != nil {
			t.Fatal(err)
		}
		sc := d.Status.ServerCertificate
		if sc == nil || sc.Serial != orders.Cert.SerialHex() || !sc.CoversHostnames || sc.ChainsToTrustAnchor == nil || !*sc.ChainsToTrustAnchor {
			t.Errorf("orders serverCertificate %+v, want its serial, covering, chaining to the anchor", sc)
		}
	})

	// The TrustAnchor's bundle, read as the reader.
	alice, err := client.New(kubetest.Impersonate(env.Config, "alice"), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	anchorFile := filepath.Join(t.TempDir(), "db.tenant-ca.crt")
	t.Run("the reader reads the published CA, not its source", func(t *testing.T) {
		kubetest.Eventually(t, clusterWait, "db.tenant-ca readable by alice", func() error {
			var s corev1.Secret
			if err := alice.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "db.tenant-ca"}, &s); err != nil {
				return err
			}
			if len(s.Data) != 1 || len(s.Data["ca.crt"]) == 0 {
				return fmt.Errorf("keys of the published Secret: %v", s.Data)
			}
			return os.WriteFile(anchorFile, s.Data["ca.crt"], 0o644)
		})
		var s corev1.Secret
		if err := alice.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "db-ca"}, &s); !apierrors.IsForbidden(err) {
			t.Errorf("alice reading the source Secret: %v, want forbidden", err)
		}
	})
	addr := databasesClusterAddr
	kubetest.Eventually(t, clusterWait, "the Gateway serving on "+addr+":5432", func() error {
		_, err := testutil.PeerCertPostgres(ctx, net.JoinHostPort(addr, "5432"), orders.Name)
		return err
	})
	anchored := func(pg *testutil.Postgres, extra ...string) string {
		return pg.ConnString(addr, 5432, append([]string{"sslrootcert=" + anchorFile}, extra...)...)
	}

	t.Run("psql verify-full with the published CA, and pgx direct", func(t *testing.T) {
		for _, pg := range []*testutil.Postgres{orders, billing} {
			if r := dbPsql(t, anchored(pg), "select name from instance"); r.err != nil || strings.TrimSpace(r.stdout) != pg.Name {
				t.Errorf("psql to %s: %v", pg.Name, r)
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			conn, err := pgxConnect(cctx, testutil.PgxConfig(t, anchored(pg, "sslnegotiation=direct"), addr))
			if err == nil {
				var name string
				err = conn.QueryRow(cctx, "select name from instance").Scan(&name)
				if name != pg.Name {
					err = fmt.Errorf("instance %q", name)
				}
				conn.Close(cctx)
			}
			cancel()
			if err != nil {
				t.Errorf("pgx direct to %s: %v", pg.Name, err)
			}
		}
	})

	t.Run("redis-cli --tls --sni and mariadb --ssl through tcp-legacy", func(t *testing.T) {
		r := dbRun(t, redisCLI, "--tls", "--sni", cache.Name, "--cacert", anchorFile, "-h", addr, "-p", "6379", "GET", "name")
		if r.err != nil || strings.TrimSpace(r.stdout) != cache.Name {
			t.Errorf("redis-cli: %v", r)
		}
		args := append(legacy.ClientArgs(addr, mariaPort), "--ssl-verify-server-cert", "-e", "SELECT name FROM instance")
		if m := dbRun(t, legacy.Client, args...); m.err != nil || strings.TrimSpace(m.stdout) != legacy.Name {
			t.Errorf("mariadb through tcp-legacy: %v", m)
		}
	})

	t.Run("the serial seen is each database's own", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, c := range []struct {
			name, file string
			get        func() (string, error)
		}{
			{orders.Name, orders.CertFile, func() (string, error) {
				crt, err := testutil.PeerCertPostgres(cctx, net.JoinHostPort(addr, "5432"), orders.Name)
				return serialOf(crt, err)
			}},
			{billing.Name, billing.CertFile, func() (string, error) {
				crt, err := testutil.PeerCertPostgres(cctx, net.JoinHostPort(addr, "5432"), billing.Name)
				return serialOf(crt, err)
			}},
			{cache.Name, cache.CertFile, func() (string, error) {
				crt, err := testutil.PeerCertTLS(cctx, net.JoinHostPort(addr, "6379"), cache.Name)
				return serialOf(crt, err)
			}},
			{legacy.Name, legacy.CertFile, func() (string, error) {
				crt, err := testutil.PeerCertMySQL(cctx, net.JoinHostPort(addr, strconv.Itoa(mariaPort)), legacy.Name)
				return serialOf(crt, err)
			}},
		} {
			want := certFileSerial(t, c.file)
			if got, err := c.get(); err != nil || got != want {
				t.Errorf("%s: serial %s (%v), want %s", c.name, got, err, want)
			}
		}
	})

	t.Run("no SNI is closed with zero bytes on every engine port", func(t *testing.T) {
		for _, port := range []int{5432, 6379} {
			addrRejectedTLS(t, addr, port, &tls.Config{InsecureSkipVerify: true})
		}
	})

	t.Run("CA rotation keeps a client pinned to the old CA working until the backend switches", func(t *testing.T) {
		bundle := func(want ...*testutil.CA) func() error {
			return func() error {
				var sec corev1.Secret
				if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "rot.tenant-ca"}, &sec); err != nil {
					return err
				}
				var got []string
				for rest := sec.Data["ca.crt"]; ; {
					var blk *pem.Block
					if blk, rest = pem.Decode(rest); blk == nil {
						break
					}
					got = append(got, string(blk.Bytes))
				}
				if len(got) != len(want) {
					return fmt.Errorf("%d CAs published, want %d", len(got), len(want))
				}
				for i, c := range want {
					if got[i] != string(c.Cert.Raw) {
						return fmt.Errorf("CA %d is not the expected one", i)
					}
				}
				return nil
			}
		}
		dial := func(roots []byte) (string, error) {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(roots)
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", net.JoinHostPort(addr, "7443"),
				&tls.Config{ServerName: "rotating.custom.example.test", RootCAs: pool})
			if err != nil {
				return "", err
			}
			defer c.Close()
			return fixture.SerialHex(c.ConnectionState().PeerCertificates[0].SerialNumber), nil
		}
		kubetest.Eventually(t, clusterWait, "the first bundle", bundle(ca))
		oldBundle := ca.CertPEM

		rotSource.Data["ca.crt"] = next.CertPEM
		if err := cl.Update(ctx, rotSource); err != nil {
			t.Fatal(err)
		}
		// The backend still serves ca's chain (the probe read it): ca stays next to next.
		kubetest.Eventually(t, clusterWait, "both CAs while the backend serves the old chain", bundle(next, ca))
		if got, err := dial(oldBundle); err != nil || got != oldLeaf.SerialHex() {
			t.Errorf("a client pinned to the old CA: %s, %v", got, err)
		}
		// The backend switches to next's certificate (its endpoint moves to 7005).
		var es discoveryv1.EndpointSlice
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "rotating-1"}, &es); err != nil {
			t.Fatal(err)
		}
		es.Ports[0].Port = ptrTo(int32(7005))
		if err := cl.Update(ctx, &es); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, clusterWait, "the old CA dropped once no backend uses it", bundle(next))
		if got, err := dial(next.CertPEM); err != nil || got != newLeaf.SerialHex() {
			t.Errorf("a client with the new bundle: %s, %v", got, err)
		}
	})

	t.Run("deleting one release keeps the other; the last takes the listener and the port", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		session, err := pgxConnect(cctx, testutil.PgxConfig(t, anchored(orders), addr))
		if err != nil {
			t.Fatal(err)
		}
		defer session.Close(cctx)
		if err := cl.Delete(ctx, &v1alpha1.DatabaseExposure{ObjectMeta: metav1ObjectMeta("acme", "billing")}); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, clusterWait, "billing fails closed", func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "5432"), ioTimeout)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := testutil.PeerCertPostgres(cctx, net.JoinHostPort(addr, "5432"), billing.Name); err == nil {
				return errors.New("billing still answers")
			}
			return nil
		})
		var name string
		if err := session.QueryRow(cctx, "select name from instance").Scan(&name); err != nil || name != orders.Name {
			t.Errorf("the open session to orders: %q, %v", name, err)
		}
		if r := dbPsql(t, anchored(orders), "select 1"); r.err != nil {
			t.Errorf("orders after billing went: %v", r)
		}
		listeners := func() (string, error) {
			var gw gwv1.Gateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &gw); err != nil {
				return "", err
			}
			var ls []string
			for _, l := range gw.Spec.Listeners {
				ls = append(ls, string(l.Name))
			}
			return strings.Join(ls, " "), nil
		}
		if got, err := listeners(); err != nil || !strings.Contains(got, "tls-postgres") {
			t.Errorf("listeners after billing went: %q %v, want tls-postgres kept", got, err)
		}
		if err := cl.Delete(ctx, &v1alpha1.DatabaseExposure{ObjectMeta: metav1ObjectMeta("acme", "orders")}); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, clusterWait, "port 5432 closed", func() error {
			got, err := listeners()
			if err != nil {
				return err
			}
			if strings.Contains(got, "tls-postgres") {
				return fmt.Errorf("listeners %q", got)
			}
			if c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "5432"), ioTimeout); err == nil {
				c.Close()
				return errors.New("5432 still accepts")
			}
			return nil
		})
		r := dbRun(t, redisCLI, "--tls", "--sni", cache.Name, "--cacert", anchorFile, "-h", addr, "-p", "6379", "PING")
		if r.err != nil || !strings.Contains(r.stdout, "PONG") {
			t.Errorf("Redis after the PostgreSQL releases went: %v", r)
		}
	})
}

func serialOf(crt *x509.Certificate, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return fixture.SerialHex(crt.SerialNumber), nil
}

func ptrTo[T any](v T) *T { return &v }

func metav1ObjectMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
