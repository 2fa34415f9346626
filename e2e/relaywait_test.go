package e2e

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// The relay's loops wait on epoll by default, spinning up to 10 µs (--spin), and on
// io_uring with --io-uring (the machines this suite runs on allow it). Either way
// passthrough connections carry their bytes both ways and their client's half-close and
// reset, and every connection ends, its sockets closed (a ring's polls hold sockets open
// until taken off).
func TestRelayWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, wait string
		spin       any // the log's spin attribute (nil: none)
		flags      []string
	}{
		{"io_uring", "io_uring", nil, []string{"--io-uring"}},
		{"epoll", "epoll", "10µs", nil},
		{"epoll-no-spin", "epoll", "0s", []string{"--spin=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testRelayWait(t, tc.wait, tc.spin, tc.flags...)
		})
	}
}

func testRelayWait(t *testing.T, want string, spin any, flags ...string) {
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "ring.test")
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	echoPort := startEcho(t, "ring", cert)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("route-ring", "tls", []string{"ring.test"}, backendRef{"svc-ring", 1}),
		serviceYAML("svc-ring", echoPort),
	))
	g := startGateway(t, dir, flags...)
	rec := g.waitLog(t, "the relay's wait", 1, func(rec map[string]any, raw string) bool {
		return rec["wait"] != nil
	})
	if rec["wait"] != want {
		if want == "io_uring" {
			testutil.Require(t, "io_uring with min_wait (Linux 6.12+, allowed by seccomp)", fmt.Errorf("%v", rec))
		}
		t.Fatalf("the relay waits on %v, want %s: %v", rec["wait"], want, rec)
	}
	if rec["spin"] != spin {
		t.Fatalf("the relay's loops spin %v, want %v: %v", rec["spin"], spin, rec)
	}

	const (
		n       = 300
		workers = 8
	)
	cfg := ca.ClientConfig("ring.test")
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	deadline := time.Now().Add(2 * time.Minute)
	var (
		mu       sync.Mutex
		failures []error
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if time.Now().After(deadline) {
					return
				}
				err := ringSession(port, cfg, i)
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d connections failed; first: %v", len(failures), n, failures[0])
	}
	g.waitGauges(t, "no connection left open", func(m map[string]float64) bool {
		return m["snigate_active_connections"] == 0
	})
	// And no socket either: the relay's to the backend, and so the backend's, are gone (or
	// in TIME_WAIT), the reset ones included, whose reset leaves only when the ring lets go.
	end := time.Now().Add(10 * time.Second)
	for {
		open := openSockets(t, echoPort)
		if len(open) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d sockets to or from the backend still open: %v", len(open), open[:min(len(open), 5)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openSockets lists the TCP sockets (IPv4) with port at either end that are neither
// listening nor in TIME_WAIT, from /proc/net/tcp.
func openSockets(t *testing.T, port int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	hexPort := fmt.Sprintf(":%04X", port)
	var open []string
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] == "06" || f[3] == "0A" {
			continue
		}
		if strings.HasSuffix(f[1], hexPort) || strings.HasSuffix(f[2], hexPort) {
			open = append(open, f[1]+" "+f[2]+" state "+f[3])
		}
	}
	return open
}

// ringSession makes one connection: a TLS handshake with the backend through the relay,
// an echo, then (by i) a half-close answered by the backend's close, or a reset.
func ringSession(port int, cfg *tls.Config, i int) error {
	s, err := tryTLS(port, cfg)
	if err != nil {
		return err
	}
	defer s.raw.Close()
	msg := fmt.Sprintf("hello %d\n", i)
	if _, err := s.tls.Write([]byte(msg)); err != nil {
		return err
	}
	line, err := s.br.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.Contains(line, fmt.Sprintf("hello %d", i)) {
		return fmt.Errorf("echo %q for %q", line, msg)
	}
	if i%2 == 1 {
		s.raw.SetLinger(0) // the close is a reset
		return nil
	}
	// The client's half-close reaches the backend, which ends its side: the client sees the
	// end of the stream (a close_notify, then EOF).
	if err := s.tls.CloseWrite(); err != nil {
		return err
	}
	if err := s.raw.CloseWrite(); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, s.br); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("after the half-close: %w", err)
	}
	return nil
}
