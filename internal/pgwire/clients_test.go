package pgwire

// Real clients against a fake server that speaks just enough PostgreSQL: these tests pin down
// what psql (Debian's libpq) and pgx really send first, and that both show the gateway's
// ErrorResponse to the user. See shared/docs/protocols.md for the facts they check.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

const (
	testMessage = "this endpoint requires TLS with a host name"
	testHint    = "connect with sslmode=require host=<name>"
)

// first is what a client sent first on one connection.
type first struct {
	kind   Kind
	packet []byte
	// extra: bytes arrived after an 8-byte request before the server answered it.
	extra bool
	// After 'S' and a TLS handshake:
	sni   string
	alpn  []string
	inner Kind // the packet inside TLS
}

// readFirst reads and classifies the first packet of conn. For TLS it returns a conn that
// replays the bytes already read.
func readFirst(conn net.Conn) (first, net.Conn, error) {
	var f first
	buf := make([]byte, 0, 64)
	for {
		kind, n, err := Classify(buf)
		if errors.Is(err, ErrIncomplete) {
			more := make([]byte, n-len(buf))
			if _, err := io.ReadFull(conn, more); err != nil {
				return f, conn, err
			}
			buf = append(buf, more...)
			continue
		}
		if err != nil {
			return f, conn, fmt.Errorf("classify % x: %w", buf, err)
		}
		f.kind = kind
		switch kind {
		case KindTLS:
			return f, &prefixConn{Conn: conn, r: io.MultiReader(bytes.NewReader(buf), conn)}, nil
		case KindSSLRequest, KindGSSENCRequest:
			f.packet = buf
			_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			var b [1]byte
			if k, _ := conn.Read(b[:]); k > 0 {
				f.extra = true
			}
			_ = conn.SetReadDeadline(time.Time{})
			return f, conn, nil
		default: // startup, cancel: read the whole packet
			rest := make([]byte, n-len(buf))
			if _, err := io.ReadFull(conn, rest); err != nil {
				return f, conn, err
			}
			f.packet = append(buf, rest...)
			return f, conn, nil
		}
	}
}

type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// fakeServer accepts connections and hands the i-th one to serve; what serve returns is
// collected, in order of connection.
type fakeServer struct {
	addr string
	mu   sync.Mutex
	got  []first
}

func startFake(t *testing.T, serve func(i int, conn net.Conn) first) *fakeServer {
	t.Helper()
	l, err := fixture.Listen()
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeServer{addr: l.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
				f := serve(i, conn)
				fs.mu.Lock()
				fs.got = append(fs.got, f)
				fs.mu.Unlock()
			}()
		}
	}()
	return fs
}

func (fs *fakeServer) firsts() []first {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]first(nil), fs.got...)
}

// wait returns the records once n connections were served (the client may exit before the
// server's goroutine recorded the last one), or after 5 s whatever is there.
func (fs *fakeServer) wait(n int) []first {
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := fs.firsts()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (fs *fakeServer) port() string {
	_, p, _ := net.SplitHostPort(fs.addr)
	return p
}

// answerTLS says 'S', does the server side of TLS and answers the first packet inside it
// with the test ErrorResponse.
func answerTLS(t *testing.T, cert tls.Certificate, conn net.Conn, f *first) {
	if _, err := conn.Write([]byte{SSLAccept}); err != nil {
		t.Error(err)
		return
	}
	serveTLS(t, cert, conn, f)
}

func serveTLS(t *testing.T, cert tls.Certificate, conn net.Conn, f *first) {
	tc := tls.Server(conn, &tls.Config{
		Certificates: []tls.Certificate{cert},
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			f.sni, f.alpn = h.ServerName, h.SupportedProtos
			return nil, nil
		},
		NextProtos: []string{"postgresql"},
	})
	if err := tc.Handshake(); err != nil {
		t.Logf("tls handshake: %v", err)
		return
	}
	inner, _, err := readFirst(tc)
	if err != nil {
		t.Errorf("inside TLS: %v", err)
		return
	}
	f.inner = inner.kind
	tc.Write(ErrorResponse(SQLStateInvalidAuthorization, testMessage, testHint))
	tc.Close()
}

func psqlBinary(t *testing.T) string {
	t.Helper()
	dir, err := testutil.PostgresBinDir()
	testutil.Require(t, "PostgreSQL client (psql)", err)
	return testutil.Binary(t, "psql", dir)
}

// psql runs psql against the fake server with the given sslmode and returns its stderr.
func psql(t *testing.T, fs *fakeServer, settings string) string {
	t.Helper()
	bin := psqlBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := fmt.Sprintf("host=fake.db.test hostaddr=127.0.0.1 port=%s user=alice dbname=app connect_timeout=5 %s", fs.port(), settings)
	cmd := exec.CommandContext(ctx, bin, "-X", "-At", "-d", cs, "-c", "SELECT 1")
	cmd.Env = append(testutil.CleanEnv(), "HOME="+t.TempDir(), "PGPASSWORD=x") // no ~/.postgresql/root.crt
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("psql %s succeeded against the fake server", settings)
	}
	return stderr.String()
}

func wantMessage(t *testing.T, stderr string) {
	t.Helper()
	if !strings.Contains(stderr, "FATAL:  "+testMessage) || !strings.Contains(stderr, "HINT:  "+testHint) {
		t.Fatalf("psql did not show the ErrorResponse:\n%s", stderr)
	}
}

func TestPsqlWire(t *testing.T) {
	cert := testutil.NewCA(t).Issue(t, "fake.db.test").TLS

	t.Run("sslmode=require sends a bare SSLRequest, then SNI without ALPN", func(t *testing.T) {
		fs := startFake(t, func(_ int, conn net.Conn) first {
			f, conn, err := readFirst(conn)
			if err != nil {
				t.Error(err)
				return f
			}
			if f.kind == KindSSLRequest {
				answerTLS(t, cert, conn, &f)
			}
			return f
		})
		stderr := psql(t, fs, "sslmode=require")
		wantMessage(t, stderr)
		got := fs.wait(1)
		if len(got) != 1 {
			t.Fatalf("%d connections: %+v", len(got), got)
		}
		f := got[0]
		if f.kind != KindSSLRequest || string(f.packet) != SSLRequest || f.extra {
			t.Fatalf("first packet %v % x (extra bytes: %v)", f.kind, f.packet, f.extra)
		}
		if f.sni != "fake.db.test" || len(f.alpn) != 0 || f.inner != KindStartup {
			// libpq ≤ 16 offers no ALPN; ≥ 17 offers "postgresql".
			t.Logf("psql: SNI %q, ALPN %q, inner %v", f.sni, f.alpn, f.inner)
			if f.sni != "fake.db.test" || f.inner != KindStartup {
				t.Fatal("wrong SNI or inner packet")
			}
		}
	})

	t.Run("sslmode=prefer retries in plaintext when TLS fails; the ErrorResponse reaches the user", func(t *testing.T) {
		fs := startFake(t, func(i int, conn net.Conn) first {
			f, conn, err := readFirst(conn)
			if err != nil {
				t.Error(err)
				return f
			}
			switch f.kind {
			case KindSSLRequest: // say yes, then drop the TLS attempt like an unroutable SNI
				conn.Write([]byte{SSLAccept})
				buf := make([]byte, 5)
				io.ReadFull(conn, buf)
			case KindStartup:
				conn.Write(ErrorResponse(SQLStateInvalidAuthorization, testMessage, testHint))
			}
			return f
		})
		wantMessage(t, psql(t, fs, "sslmode=prefer"))
		got := fs.wait(2)
		if len(got) != 2 || got[0].kind != KindSSLRequest || got[1].kind != KindStartup {
			t.Fatalf("connections: %+v", got)
		}
		if !bytes.Contains(got[1].packet, []byte("user\x00alice\x00")) || !bytes.HasPrefix(got[1].packet[4:], []byte{0, 3, 0, 0}) {
			t.Fatalf("plaintext startup % x", got[1].packet)
		}
	})

	t.Run("sslmode=disable sends a StartupMessage", func(t *testing.T) {
		fs := startFake(t, func(_ int, conn net.Conn) first {
			f, conn, _ := readFirst(conn)
			if f.kind == KindStartup {
				conn.Write(ErrorResponse(SQLStateInvalidAuthorization, testMessage, testHint))
			}
			return f
		})
		wantMessage(t, psql(t, fs, "sslmode=disable"))
		if got := fs.wait(1); len(got) != 1 || got[0].kind != KindStartup {
			t.Fatalf("connections: %+v", got)
		}
	})

	t.Run("sslmode=allow retries with SSLRequest after an ErrorResponse", func(t *testing.T) {
		fs := startFake(t, func(_ int, conn net.Conn) first {
			f, conn, _ := readFirst(conn)
			switch f.kind {
			case KindStartup:
				conn.Write(ErrorResponse(SQLStateInvalidAuthorization, testMessage, testHint))
			case KindSSLRequest:
				answerTLS(t, cert, conn, &f)
			}
			return f
		})
		wantMessage(t, psql(t, fs, "sslmode=allow"))
		got := fs.wait(2)
		if len(got) != 2 || got[0].kind != KindStartup || got[1].kind != KindSSLRequest || got[1].sni != "fake.db.test" {
			t.Fatalf("connections: %+v", got)
		}
	})

	t.Run("gssencmode=prefer sends no GSSENCRequest without a Kerberos ticket", func(t *testing.T) {
		fs := startFake(t, func(_ int, conn net.Conn) first {
			f, conn, _ := readFirst(conn)
			if f.kind == KindSSLRequest {
				answerTLS(t, cert, conn, &f)
			}
			return f
		})
		psql(t, fs, "sslmode=require gssencmode=prefer")
		if got := fs.wait(1); len(got) != 1 || got[0].kind != KindSSLRequest {
			t.Fatalf("connections: %+v", got)
		}
	})
}

func TestPgxWire(t *testing.T) {
	cert := testutil.NewCA(t).Issue(t, "fake.db.test").TLS
	fs := startFake(t, func(_ int, conn net.Conn) first {
		f, conn, err := readFirst(conn)
		if err != nil {
			t.Error(err)
			return f
		}
		switch f.kind {
		case KindSSLRequest:
			answerTLS(t, cert, conn, &f)
		case KindTLS:
			serveTLS(t, cert, conn, &f)
		case KindStartup:
			conn.Write(ErrorResponse(SQLStateInvalidAuthorization, testMessage, testHint))
		}
		return f
	})
	for _, c := range []struct {
		settings string
		kind     Kind
		alpn     []string
	}{
		{"sslmode=require", KindSSLRequest, nil},
		{"sslmode=require sslnegotiation=direct", KindTLS, []string{"postgresql"}},
		{"sslmode=disable", KindStartup, nil},
	} {
		t.Run(c.settings, func(t *testing.T) {
			before := len(fs.firsts())
			cs := fmt.Sprintf("host=127.0.0.1 port=%s user=alice dbname=app connect_timeout=5 %s", fs.port(), c.settings)
			cfg := testutil.PgxConfig(t, cs, "127.0.0.1")
			if cfg.TLSConfig != nil {
				cfg.TLSConfig.ServerName = "fake.db.test"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := pgx.ConnectConfig(ctx, cfg)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "28000" || pgErr.Message != testMessage || pgErr.Hint != testHint || pgErr.Severity != "FATAL" {
				t.Fatalf("pgx error: %v", err)
			}
			got := fs.wait(before + 1)[before:]
			if len(got) != 1 {
				t.Fatalf("connections: %+v", got)
			}
			f := got[0]
			if f.kind != c.kind || f.extra {
				t.Fatalf("first packet %v (extra %v)", f.kind, f.extra)
			}
			if c.kind != KindStartup && (f.sni != "fake.db.test" || fmt.Sprint(f.alpn) != fmt.Sprint(c.alpn) || f.inner != KindStartup) {
				t.Fatalf("SNI %q ALPN %q inner %v", f.sni, f.alpn, f.inner)
			}
		})
	}
}

// recordingRelay forwards connections to target and records the first bytes the client sent
// on each one.
type recordingRelay struct {
	addr string
	mu   sync.Mutex
	recs []*prefixRecorder
}

func startRelay(t *testing.T, target string) *recordingRelay {
	t.Helper()
	l, err := fixture.Listen()
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingRelay{addr: l.Addr().String()}
	var wg sync.WaitGroup
	var connsMu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, c, s)
			connsMu.Unlock()
			rec := &prefixRecorder{max: 64}
			r.mu.Lock()
			r.recs = append(r.recs, rec)
			r.mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				io.Copy(s, io.TeeReader(c, rec))
				s.(*net.TCPConn).CloseWrite()
			}()
			go func() {
				defer wg.Done()
				io.Copy(c, s)
				c.Close()
			}()
		}
	}()
	return r
}

// firsts returns the bytes recorded so far for each connection, in order of accept.
func (r *recordingRelay) firsts() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]byte, len(r.recs))
	for i, rec := range r.recs {
		out[i] = rec.bytes()
	}
	return out
}

type prefixRecorder struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (p *prefixRecorder) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.max - len(p.b); n > 0 {
		p.b = append(p.b, b[:min(n, len(b))]...)
	}
	return len(b), nil
}

func (p *prefixRecorder) bytes() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.b...)
}

// TestCancelWire runs a real PostgreSQL behind a relay that records what clients send, and
// checks how psql and pgx send their CancelRequest.
func TestCancelWire(t *testing.T) {
	pg := testutil.StartPostgres(t, testutil.PGOptions{Name: "cancel.db.test"})
	relay := startRelay(t, pg.Addr)
	_, relayPort, _ := net.SplitHostPort(relay.addr)
	admin := pg.Admin(t)

	waitActive := func(ctx context.Context) int {
		for {
			var pid int
			err := admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'").Scan(&pid)
			if err == nil {
				return pid
			}
			if ctx.Err() != nil {
				t.Fatal("query never started")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cancels := func() (out [][]byte) {
		for _, b := range relay.firsts() {
			if k, _, _ := Classify(b); k == KindCancelRequest {
				out = append(out, b)
			}
		}
		return out
	}

	t.Run("psql sends a plaintext CancelRequest on SIGINT", func(t *testing.T) {
		bin := psqlBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.Command(bin, "-X", "-At", "-d", pg.ConnString("127.0.0.1", mustAtoi(relayPort)), "-c", "SELECT pg_sleep(30)")
		cmd.Env = testutil.CleanEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		pid := waitActive(ctx)
		cmd.Process.Signal(interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatal("psql did not stop")
		}
		if !strings.Contains(stderr.String(), "canceling statement due to user request") {
			t.Fatalf("psql: %s", stderr.String())
		}
		got := cancels()
		if len(got) != 1 {
			t.Fatalf("%d plaintext cancel requests", len(got))
		}
		gotPID, key, err := ParseCancel(got[0])
		if err != nil || int(gotPID) != pid || len(key) != 4 {
			t.Fatalf("cancel % x: pid %d (backend %d), key length %d, %v", got[0][:8], gotPID, pid, len(key), err)
		}
	})

	t.Run("pgx sends its CancelRequest inside TLS", func(t *testing.T) {
		before := len(relay.firsts())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, testutil.PgxConfig(t, pg.ConnString("127.0.0.1", mustAtoi(relayPort)), "127.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer qcancel()
		_, err = conn.Exec(qctx, "SELECT pg_sleep(30)")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			t.Fatalf("query: %v", err)
		}
		got := relay.firsts()[before:]
		if len(got) != 2 {
			t.Fatalf("%d connections, want the session and its cancel", len(got))
		}
		for _, b := range got {
			if k, _, _ := Classify(b); k != KindSSLRequest {
				t.Fatalf("connection began with %v % x", k, b[:min(8, len(b))])
			}
		}
	})
}

func mustAtoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}
