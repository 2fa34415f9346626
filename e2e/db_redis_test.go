package e2e

import (
	"context"
	"crypto/tls"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/snigate/snigate/internal/testutil"
)

// Two real Redis servers (TLS only) behind one snigate TLS Passthrough port, chosen by SNI:
// redis-cli needs --sni (it never derives SNI from -h); go-redis sends the TLS ServerName.
func TestDBRedis(t *testing.T) {
	t.Parallel()
	needBinary(t)
	cli := testutil.Binary(t, "redis-cli", "/usr/bin")
	ca := testutil.NewCA(t)
	servers := []*testutil.Redis{
		testutil.StartRedis(t, testutil.RedisOptions{CA: ca, Name: "redis-a.db.test"}),
		testutil.StartRedis(t, testutil.RedisOptions{CA: ca, Name: "redis-b.db.test"}),
	}
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("redis", port, "")),
		routeYAML("redis-a", "redis", []string{servers[0].Name}, to("svc-redis-a")),
		routeYAML("redis-b", "redis", []string{servers[1].Name}, to("svc-redis-b")),
		serviceYAML("svc-redis-a", servers[0].Port),
		serviceYAML("svc-redis-b", servers[1].Port),
	))
	g := startGateway(t, dir)
	portArg := strconv.Itoa(port)

	for _, r := range servers {
		t.Run(r.Name, func(t *testing.T) {
			t.Run("redis-cli --tls --sni", func(t *testing.T) {
				res := dbRun(t, cli, "--tls", "--sni", r.Name, "--cacert", ca.File, "-h", "127.0.0.1", "-p", portArg, "GET", "name")
				if res.err != nil || strings.TrimSpace(res.stdout) != r.Name {
					t.Fatalf("redis-cli --sni %s GET name: want %q\n%s", r.Name, r.Name, res)
				}
			})
			t.Run("go-redis", func(t *testing.T) {
				var serial *big.Int
				cfg := r.TLSConfig()
				cfg.VerifyConnection = func(cs tls.ConnectionState) error {
					serial = cs.PeerCertificates[0].SerialNumber
					return nil
				}
				c := redis.NewClient(&redis.Options{Addr: addr(port), TLSConfig: cfg, DialTimeout: ioTimeout, MaxRetries: -1, PoolSize: 1})
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				got, err := c.Get(ctx, "name").Result()
				if err != nil || got != r.Name {
					t.Fatalf("go-redis GET name through the gateway with SNI %s: %q, %v", r.Name, got, err)
				}
				if serial == nil || serial.Cmp(r.Cert.Serial) != 0 {
					t.Fatalf("go-redis saw certificate serial %X, want %s's %s", serial, r.Name, r.Cert.SerialHex())
				}
			})
			t.Run("certificate serial", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cert, err := testutil.PeerCertTLS(ctx, addr(port), r.Name)
				if err != nil {
					t.Fatal(err)
				}
				if cert.SerialNumber.Cmp(r.Cert.Serial) != 0 {
					t.Fatalf("serial %X, want %s", cert.SerialNumber, r.Cert.SerialHex())
				}
			})
		})
	}

	// Without --sni, redis-cli sends no SNI: the gateway closes without a byte.
	t.Run("no SNI", func(t *testing.T) {
		t.Run("redis-cli --tls without --sni", func(t *testing.T) {
			before := g.rejected(t, "no_sni")
			res := dbRun(t, cli, "--tls", "--cacert", ca.File, "-h", "127.0.0.1", "-p", portArg, "GET", "name")
			if strings.Contains(res.stdout, ".db.test") {
				t.Fatalf("redis-cli without --sni reached a server\n%s", res)
			}
			if res.err == nil || !strings.Contains(res.stdout+res.stderr, "Could not connect") {
				t.Fatalf("redis-cli without --sni: want a connection failure\n%s", res)
			}
			t.Logf("redis-cli without --sni (%v): %s", res.err, strings.TrimSpace(res.stdout+res.stderr))
			g.waitRejected(t, "no_sni", before+1)
		})
		t.Run("crypto/tls without ServerName gets zero bytes", func(t *testing.T) {
			before := g.rejected(t, "no_sni")
			expectRejectedTLS(t, port, &tls.Config{InsecureSkipVerify: true})
			g.waitRejected(t, "no_sni", before+1)
		})
	})
}
