package e2e

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/echo"
	"github.com/snigate/snigate/internal/testutil"
)

// Weights: a 90/10 split measured over 1000 connections, and a weight-0 backend gets none.
func TestWeights(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "w.test")
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("route-w", "tls", []string{"w.test"},
			backendRef{"svc-heavy", 90}, backendRef{"svc-light", 10}, backendRef{"svc-zero", 0}),
		serviceYAML("svc-heavy", startEcho(t, "heavy", cert)),
		serviceYAML("svc-light", startEcho(t, "light", cert)),
		serviceYAML("svc-zero", startEcho(t, "zero", cert)),
	))
	startGateway(t, dir)

	const (
		n       = 1000
		workers = 8
		budget  = 2 * time.Minute
	)
	cfg := ca.ClientConfig("w.test")
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	var (
		mu       sync.Mutex
		counts   = map[string]int{}
		failures []error
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(budget)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if time.Now().After(deadline) {
					return
				}
				s, err := tryTLS(port, cfg)
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					counts[s.hello.Name]++
				}
				mu.Unlock()
				if s != nil {
					s.raw.Close()
				}
			}
		}()
	}
	wg.Wait()

	t.Logf("greetings over %d connections: %v", n, counts)
	if len(failures) > 0 {
		t.Errorf("%d of %d connections failed; first: %v", len(failures), n, failures[0])
	}
	if total := counts["heavy"] + counts["light"] + counts["zero"]; total != n {
		t.Fatalf("%d greetings in %v, want %d", total, budget, n)
	}
	// Binomial(1000, 0.1): mean 100, standard deviation 9.5. 50..150 is more than five
	// deviations either way: a correct 90/10 split fails this about once in ten million runs.
	if l := counts["light"]; l < 50 || l > 150 {
		t.Errorf("weight-10 backend got %d of %d connections, want 50..150 (10%% ± 5)", l, n)
	}
	if z := counts["zero"]; z != 0 {
		t.Errorf("weight-0 backend got %d connections, want 0", z)
	}
}

// Half-close travels both ways: the client stops sending, still receives every echoed byte,
// then EOF, in both modes. In passthrough the client sends a bare TCP FIN (no close_notify), so
// only the gateway's CloseWrite can tell the backend the client is done.
func TestHalfClose(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	ports := testutil.FreePorts(t, 2)
	ptPort, termPort := ports[0], ports[1]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("pt", ptPort, ""), terminate("term", termPort, "", "cert-term")),
		secretYAML("cert-term", ca.Issue(t, "term.test")),
		routeYAML("route-pt", "pt", []string{"pt.test"}, to("svc-tls")),
		routeYAML("route-term", "term", []string{"term.test"}, to("svc-plain")),
		serviceYAML("svc-tls", startEcho(t, "echo-tls", ca.Issue(t, "pt.test"))),
		serviceYAML("svc-plain", startEcho(t, "echo-plain", nil)),
	))
	startGateway(t, dir)

	payload := make([]byte, 1<<20) // more than the socket buffers on the way hold
	rand.Read(payload)

	for _, tc := range []struct {
		name       string
		port       int
		sni        string
		closeWrite func(tc *tls.Conn, raw *net.TCPConn) error
	}{
		{"passthrough, bare FIN", ptPort, "pt.test", func(_ *tls.Conn, raw *net.TCPConn) error { return raw.CloseWrite() }},
		{"passthrough, close_notify then FIN", ptPort, "pt.test", func(tc *tls.Conn, raw *net.TCPConn) error {
			tc.CloseWrite()
			return raw.CloseWrite()
		}},
		{"terminate, close_notify then FIN", termPort, "term.test", func(tc *tls.Conn, raw *net.TCPConn) error {
			tc.CloseWrite()
			return raw.CloseWrite()
		}},
		{"terminate, bare FIN", termPort, "term.test", func(_ *tls.Conn, raw *net.TCPConn) error { return raw.CloseWrite() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", addr(tc.port), ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			raw := c.(*net.TCPConn)
			defer raw.Close()
			raw.SetDeadline(time.Now().Add(2 * ioTimeout))
			conn := tls.Client(raw, ca.ClientConfig(tc.sni))
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("greeting: %v", err)
			}
			if _, err := echo.ParseGreeting(line); err != nil {
				t.Fatal(err)
			}

			sent := make(chan error, 1)
			go func() {
				if _, err := conn.Write(payload); err != nil {
					sent <- err
					return
				}
				sent <- tc.closeWrite(conn, raw)
			}()
			got, err := io.ReadAll(br)
			if werr := <-sent; werr != nil {
				t.Fatalf("write then half-close: %v", werr)
			}
			if err != nil {
				t.Fatalf("read after half-close: %v (%d of %d bytes echoed)", err, len(got), len(payload))
			}
			if string(got) != string(payload) {
				t.Fatalf("echoed %d bytes, want the %d sent, identical", len(got), len(payload))
			}
			// TLS said EOF; the TCP stream must be at EOF too, not merely quiet.
			if n, closed, err := drain(raw, ioTimeout); !closed || n != 0 {
				t.Errorf("raw stream after TLS EOF: %d more bytes, closed=%v (%v)", n, closed, err)
			}
		})
	}
}
