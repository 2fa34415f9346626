package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snigate/snigate/bench/internal/pgsrv"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// client is tenant B's client: once is a connection with its first query (connect, one
// query, close), open a held connection whose query function is timed on its own.
type client interface {
	once(port int) error
	open(port int) (query func() error, closeConn func(), err error)
}

// opTimeout bounds each of B's operations (not the phase: one running at its end counts).
const opTimeout = 10 * time.Second

// pgClient is pgx as libpq connects: SSLRequest, then TLS verify-full with the SNI.
type pgClient struct{ ca *fixture.CA }

func (c *pgClient) connect(port int) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=verify-full connect_timeout=10",
		sniB, port, pgsrv.User, pgsrv.Database))
	if err != nil {
		return nil, err
	}
	cfg.TLSConfig = c.ca.ClientConfig(sniB)
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

func selectOne(conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func (c *pgClient) once(port int) error {
	conn, err := c.connect(port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return selectOne(conn)
}

func (c *pgClient) open(port int) (func() error, func(), error) {
	conn, err := c.connect(port)
	if err != nil {
		return nil, nil, err
	}
	return func() error { return selectOne(conn) }, func() { conn.Close(context.Background()) }, nil
}

// tlsClient completes a TLS handshake with B's SNI (verified) and echoes 16 bytes.
type tlsClient struct{ ca *fixture.CA }

func (c *tlsClient) dial(port int) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: opTimeout}
	conn, err := tls.DialWithDialer(d, "tcp", fmt.Sprintf("127.0.0.1:%d", port), c.ca.ClientConfig(sniB))
	if err != nil {
		return nil, err
	}
	return conn, nil
}

var query16 = []byte("SELECT 1;-- 16 b")

func roundTrip(conn *tls.Conn) error {
	conn.SetDeadline(time.Now().Add(opTimeout))
	if _, err := conn.Write(query16); err != nil {
		return err
	}
	var got [16]byte
	_, err := io.ReadFull(conn, got[:])
	return err
}

func (c *tlsClient) once(port int) error {
	conn, err := c.dial(port)
	if err != nil {
		return err
	}
	defer conn.Close()
	return roundTrip(conn)
}

func (c *tlsClient) open(port int) (func() error, func(), error) {
	conn, err := c.dial(port)
	if err != nil {
		return nil, nil, err
	}
	return func() error { return roundTrip(conn) }, func() { conn.Close() }, nil
}

// startPostgres starts a private PostgreSQL for tenant name on port (CPU 0) at priority nice;
// init creates the database B's client uses. It returns its stop.
func startPostgres(work, name string, port int, cert *fixture.Cert, nice int, init bool) func() {
	srv, err := pgsrv.Start(filepath.Join(work, "pg-"+name), port, cert, "0")
	if err != nil {
		log.Fatal(err)
	}
	if nice != 0 {
		// Children (a backend per connection) inherit the postmaster's priority.
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, srv.Proc.Pid(), nice); err != nil {
			log.Fatal(err)
		}
	}
	if init {
		if err := srv.Init(1); err != nil {
			log.Fatal(err)
		}
	}
	return srv.Stop
}

// startEcho starts this binary as a TLS echo server for tenant name on port (CPU 0) at
// priority nice. It returns its stop.
func startEcho(work, name string, port int, cert *fixture.Cert, nice int) func() {
	certFile, keyFile, err := cert.WriteFiles(work, "echo-"+name, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command("nice", "-n", fmt.Sprint(nice), "taskset", "-c", "0", self,
		"--serve-echo", fmt.Sprintf("127.0.0.1:%d", port), "--cert", certFile, "--key", keyFile)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("echo server %s: %v", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return func() { cmd.Process.Kill(); cmd.Wait() }
}

// echoServer serves TLS on addr with the certificate, echoing every byte, until killed.
func echoServer(addr, certFile, keyFile string) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}
