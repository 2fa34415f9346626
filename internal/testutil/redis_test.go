package testutil

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRedis(t *testing.T) {
	t.Parallel()
	ca := NewCA(t)
	one := StartRedis(t, RedisOptions{CA: ca, Name: "one.cache.test"})
	two := StartRedis(t, RedisOptions{CA: ca, Name: "two.cache.test"})
	cli := Binary(t, "redis-cli", "/usr/bin")
	for _, r := range []*Redis{one, two} {
		t.Run(r.Name, func(t *testing.T) {
			t.Run("redis-cli", func(t *testing.T) {
				out, errOut, err := run(t, 15*time.Second, nil, cli, "--tls", "--sni", r.Name, "--cacert", r.CA.File,
					"-h", "127.0.0.1", "-p", fmt.Sprint(r.Port), "GET", "name")
				if err != nil || out != r.Name {
					t.Fatalf("redis-cli: %v %q %s", err, out, errOut)
				}
			})
			t.Run("redis-cli without TLS", func(t *testing.T) {
				out, errOut, err := run(t, 15*time.Second, nil, cli, "-h", "127.0.0.1", "-p", fmt.Sprint(r.Port), "GET", "name")
				if err == nil && out == r.Name {
					t.Fatalf("plaintext client got an answer: %q %s", out, errOut)
				}
			})
			t.Run("go-redis", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				c := r.Client(r.Addr)
				defer c.Close()
				if name, err := c.Get(ctx, "name").Result(); err != nil || name != r.Name {
					t.Fatalf("GET name: %q %v", name, err)
				}
			})
			t.Run("served certificate", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				cert, err := PeerCertTLS(ctx, r.Addr, r.Name)
				checkSerial(t, "PeerCertTLS", cert, err, r.Cert)
				if got := opensslSerial(t, r.Addr, r.Name); got != r.Cert.SerialHex() || !serialRE.MatchString(got) {
					t.Fatalf("openssl: serial %s, want %s", got, r.Cert.SerialHex())
				}
			})
		})
	}
	if strings.EqualFold(one.Addr, two.Addr) {
		t.Fatal("one address for two instances")
	}
}
