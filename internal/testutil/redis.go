package testutil

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures StartRedis. Every field is optional.
type RedisOptions struct {
	// Name identifies the instance: the value of its key "name" and the DNS name of the
	// certificate made when Cert is nil. Default "redis.test".
	Name string
	CA   *CA   // default: a new CA
	Cert *Cert // default: CA.Issue(Name)
	// Netns runs the server inside that network namespace, listening on its IP: a backend
	// an EndpointSlice can name. Default: the host, on 127.0.0.1.
	Netns *Host
}

// Redis is a running private redis-server that speaks TLS only (port 0, tls-port Port) on
// 127.0.0.1 (or RedisOptions.Netns's IP), without client certificates. Key "name" holds Name.
type Redis struct {
	Name string
	Port int
	Addr string // 127.0.0.1:Port
	Dir  string
	CA   *CA
	Cert *Cert
	// CertFile is the server's certificate file (tls-cert-file).
	CertFile string
	LogPath  string

	proc *process
}

// StartRedis starts a private Redis and returns when it answers PING over TLS. It is stopped
// in t.Cleanup.
func StartRedis(t testing.TB, o RedisOptions) *Redis {
	t.Helper()
	bin := Binary(t, "redis-server", "/usr/bin")
	if o.Name == "" {
		o.Name = "redis.test"
	}
	if o.CA == nil {
		o.CA = NewCA(t)
	}
	if o.Cert == nil {
		o.Cert = o.CA.Issue(t, o.Name)
	}
	dir := serverDir(t, "redis", nil)
	r := &Redis{Name: o.Name, Dir: dir, CA: o.CA, Cert: o.Cert, LogPath: filepath.Join(dir, "redis.log")}
	certPath, keyPath, err := o.Cert.writeFilesFor(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	caPath := o.CA.WriteFile(t, dir)
	r.CertFile = certPath

	r.Port = withPortRetry(t, func(port int) error {
		r.Port = port
		bind := bindIP(o.Netns)
		r.Addr = net.JoinHostPort(bind, strconv.Itoa(port))
		conf := []string{
			"bind " + bind,
			"port 0",
			fmt.Sprintf("tls-port %d", port),
			"tls-cert-file " + certPath,
			"tls-key-file " + keyPath,
			"tls-ca-cert-file " + caPath,
			"tls-auth-clients no",
			"dir " + dir,
			`save ""`,
			"appendonly no",
			"daemonize no",
			`logfile ""`,
			"protected-mode no",
		}
		confPath := filepath.Join(dir, "redis.conf")
		if err := writeFile(confPath, []byte(strings.Join(conf, "\n")+"\n"), 0o644, nil); err != nil {
			return err
		}
		cmd := command(nil, dir, bin, confPath)
		if o.Netns != nil {
			cmd = o.Netns.Command(bin, confPath)
			cmd.Dir = dir
		}
		proc, err := startProcess(cmd, "redis-server "+o.Name, r.LogPath, syscall.SIGTERM)
		if err != nil {
			return err
		}
		r.proc = proc
		err = proc.waitReady(r.ping, func(log string) bool { return strings.Contains(log, "Address already in use") })
		if err != nil {
			proc.stop()
		}
		return err
	})
	t.Cleanup(func() {
		r.proc.stop()
		if t.Failed() {
			t.Logf("redis %s log (%s):\n%s", r.Name, r.LogPath, r.proc.logTail())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := r.Client(r.Addr)
	defer c.Close()
	if err := c.Set(ctx, "name", r.Name, 0).Err(); err != nil {
		t.Fatalf("redis %s: SET name: %v", r.Name, err)
	}
	return r
}

// TLSConfig trusts the instance's CA and verifies (and sends as SNI) Name.
func (r *Redis) TLSConfig() *tls.Config { return r.CA.ClientConfig(r.Name) }

// Client returns a go-redis client that dials addr (the instance or a gateway in front of it)
// and negotiates TLS with SNI Name against the CA. The caller closes it.
func (r *Redis) Client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:        addr,
		TLSConfig:   r.TLSConfig(),
		DialTimeout: 5 * time.Second,
		MaxRetries:  -1,
	})
}

func (r *Redis) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := r.Client(r.Addr)
	defer c.Close()
	return c.Ping(ctx).Err()
}
