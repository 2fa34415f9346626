package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snigate/snigate/internal/testutil"
)

// Established connections survive five live upgrades in a row, on both relay waits: a
// PostgreSQL session in an open transaction keeps its backend (pg_backend_pid unchanged)
// and commits after; a TCP stream checksummed both ways loses, duplicates and reorders no
// byte; a TLS passthrough session keeps its conversation; and new connections every few
// milliseconds never fail. The drain deadline is short (2 s) and the held connections
// outlive it: had they stayed with an old process, they would have been cut.
func TestUpgradeEstablished(t *testing.T) {
	needBinary(t)
	dbPsqlBin(t)
	for _, wait := range []struct{ name, flag string }{{"epoll", ""}, {"io_uring", "--io-uring"}} {
		t.Run(wait.name, func(t *testing.T) { testUpgradeEstablished(t, wait.flag) })
	}
}

func testUpgradeEstablished(t *testing.T, waitFlag string) {
	ca := testutil.NewCA(t)
	pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: dbPGA})
	ports := testutil.FreePorts(t, 3)
	tlsPort, pgPort, tcpPort := ports[0], ports[1], ports[2]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", tlsPort, ""), passthrough("postgres", pgPort, ""), listener{Name: "stream", Protocol: "TCP", Port: tcpPort}),
		routeYAML("route-a", "tls", []string{"a.test"}, to("svc-a")),
		routeYAML("pg", "postgres", []string{dbPGA}, to("svc-pg")),
		streamRouteYAML(),
		serviceYAML("svc-a", startEcho(t, "echo-a", ca.Issue(t, "a.test"))),
		serviceYAML("svc-pg", pg.Port),
		serviceYAML("svc-echo", startRawEcho(t)),
	))
	g := serveForUpgrade(t, dir, waitFlag)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := pgx.ConnectConfig(ctx, testutil.PgxConfig(t, pg.ConnString("127.0.0.1", pgPort), "127.0.0.1"))
	if err != nil {
		t.Fatalf("pgx through the gateway: %v", err)
	}
	defer db.Close(context.Background())
	var pid0 uint32
	if err := db.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "create table upgrade_held (n int)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "insert into upgrade_held values (1)"); err != nil {
		t.Fatal(err)
	}

	held := dialTLS(t, tlsPort, ca.ClientConfig("a.test"))
	held.roundTrip("before the upgrades\n")
	st := startStream(t, tcpPort)
	h := startHammer(tlsPort, ca.ClientConfig("a.test"))

	for i := range 5 {
		time.Sleep(200 * time.Millisecond)
		g.upgradeOK(t, i%2 == 1)
		held.roundTrip(fmt.Sprintf("after upgrade %d\n", i+1))
		var pid uint32
		if err := tx.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatalf("the transaction's session after upgrade %d: %v", i+1, err)
		}
		if pid != pid0 {
			t.Fatalf("pg_backend_pid %d after upgrade %d, was %d: the session was replaced", pid, i+1, pid0)
		}
	}
	time.Sleep(200 * time.Millisecond)
	h.finish(t)
	if _, err := tx.Exec(ctx, "insert into upgrade_held values (2)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after five upgrades: %v", err)
	}
	var n int
	if err := db.QueryRow(ctx, "select count(*) from upgrade_held").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows committed: %d, %v; want 2", n, err)
	}
	st.finish(t)
	held.finish()

	// Every upgrade took the held connections over, rather than leaving them to drain.
	var taken []int
	whole, err := os.ReadFile(g.log) // every process's lines (logText keeps the last 300)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(whole), "\n") {
		var rec struct {
			Msg   string `json:"msg"`
			Pairs int    `json:"pairs"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "upgrade: took over" {
			taken = append(taken, rec.Pairs)
		}
	}
	if len(taken) != 5 {
		t.Fatalf("%d upgrades logged taking connections over, want 5: %v", len(taken), taken)
	}
	for i, n := range taken {
		if n < 3 {
			t.Errorf("upgrade %d took %d connections over, want the 3 held at least", i+1, n)
		}
	}
	if !strings.Contains(string(whole), `"wait":"io_uring"`) && waitFlag != "" {
		t.Logf("io_uring asked for, the relay waits on epoll here (the machine refuses io_uring)")
	}
}

// startRawEcho runs a plain TCP backend that echoes every byte, and returns its port.
func startRawEcho(t *testing.T) int {
	t.Helper()
	ln := testutil.Listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// stream writes pseudo-random bytes through the gateway to an echo backend and reads them
// back, hashing both sides, until finish.
type stream struct {
	c           *net.TCPConn
	stop        chan struct{}
	wg          sync.WaitGroup
	sent, got   hash.Hash
	nSent, nGot int64
	wErr, rErr  error
}

func startStream(t *testing.T, port int) *stream {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr(port), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &stream{c: c.(*net.TCPConn), stop: make(chan struct{}), sent: sha256.New(), got: sha256.New()}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		rng := rand.New(rand.NewPCG(7, 8))
		buf := make([]byte, 48<<10)
		for {
			select {
			case <-s.stop:
				s.c.CloseWrite()
				return
			default:
			}
			for i := range buf {
				buf[i] = byte(rng.Uint32())
			}
			n := 1 + rng.IntN(len(buf))
			s.c.SetWriteDeadline(time.Now().Add(ioTimeout))
			if _, err := s.c.Write(buf[:n]); err != nil {
				s.wErr = err
				return
			}
			s.sent.Write(buf[:n])
			s.nSent += int64(n)
			time.Sleep(time.Millisecond)
		}
	}()
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			s.c.SetReadDeadline(time.Now().Add(ioTimeout))
			n, err := s.c.Read(buf)
			s.got.Write(buf[:n])
			s.nGot += int64(n)
			if err == io.EOF {
				return
			}
			if err != nil {
				s.rErr = err
				return
			}
		}
	}()
	return s
}

// finish ends the stream (a half-close), reads the echo to its end and compares.
func (s *stream) finish(t *testing.T) {
	t.Helper()
	close(s.stop)
	s.wg.Wait()
	if s.wErr != nil || s.rErr != nil {
		t.Fatalf("stream through the upgrades: write %v, read %v (%d bytes sent, %d echoed)", s.wErr, s.rErr, s.nSent, s.nGot)
	}
	if s.nSent < 1<<20 {
		t.Errorf("only %d bytes streamed: the test did not test", s.nSent)
	}
	if s.nGot != s.nSent || string(s.got.Sum(nil)) != string(s.sent.Sum(nil)) {
		t.Fatalf("the echo of %d bytes came back as %d bytes, or other bytes (sha256 differs)", s.nSent, s.nGot)
	}
	t.Logf("stream: %d bytes each way, checksums equal", s.nSent)
}

// streamRouteYAML is the TCPRoute of the upgrade tests' "stream" listener, to svc-echo.
func streamRouteYAML() string {
	return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata:
  name: stream
  namespace: default
spec:
  parentRefs:
  - name: %s
    sectionName: stream
  rules:
  - backendRefs:
    - name: svc-echo
      port: %d
`, gatewayName, servicePort)
}

// serveForUpgrade serves dir with a pid file and a 2 s drain (shorter than the held
// sessions: a connection left behind would be cut), on the relay wait waitFlag selects.
func serveForUpgrade(t *testing.T, dir, waitFlag string) *upgradeGateway {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "snigate.pid")
	args := []string{"--pid-file", pidFile, "--drain-timeout", "2s"}
	if waitFlag != "" {
		args = append(args, waitFlag)
	}
	g := &upgradeGateway{gateway: startGateway(t, dir, args...), pidFile: pidFile}
	g.stopTakenOver(t)
	g.waitPIDFile(t)
	return g
}
