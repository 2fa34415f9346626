// Package echo is a small TLS and plain-TCP echo backend for demos and tests: it tells the
// client who it is and what it saw of the handshake, then sends every byte back.
//
//	srv := &echo.Server{Name: "db-1", TLS: cfg} // TLS nil: plain TCP
//	go srv.Serve(ln)
//	defer srv.Close()
//
// Per connection, in order:
//
//  1. If TLS is set, complete the TLS handshake (bounded by HandshakeTimeout).
//  2. Write one greeting line, before reading anything:
//     "hello from NAME sni=<SNI or -> alpn=<negotiated or -> tls=<1.2|1.3|off>\n".
//  3. Echo every byte back until the client half-closes (EOF).
//  4. Half-close our side too (CloseWrite: close_notify and a TCP FIN under TLS), so a half-close
//     that travelled through a proxy travels back, then close.
//
// A server-speaks-first greeting lets a test see which backend a gateway picked and which SNI
// reached it without sending anything; the echo then checks that bytes flow both ways.
package echo

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// DefaultHandshakeTimeout bounds the TLS handshake when Server.HandshakeTimeout is zero.
const DefaultHandshakeTimeout = 10 * time.Second

// Server is an echo backend. Set its fields before the first Serve; do not change them after.
type Server struct {
	// Name is printed in the greeting. It must not contain spaces or newlines.
	Name string
	// TLS, when set, makes the server terminate TLS with this configuration; nil means plain
	// TCP. If it has neither NextProtos nor GetConfigForClient, the server accepts the first
	// ALPN protocol the client offers, so the greeting shows what the client asked for.
	TLS *tls.Config
	// HandshakeTimeout bounds the TLS handshake; zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Logger receives one line per connection that ends in an error; nil discards.
	Logger *slog.Logger

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("echo: server closed")

// Serve accepts connections on ln until ln fails or Close is called, serving each in its own
// goroutine. It closes ln before returning.
func (s *Server) Serve(ln net.Listener) error {
	cfg := s.tlsConfig()
	if !s.track(ln) {
		ln.Close()
		return ErrServerClosed
	}
	defer s.untrack(ln)
	defer ln.Close()
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		if !s.trackConn(c) {
			c.Close()
			return ErrServerClosed
		}
		go func() {
			defer s.wg.Done()
			defer s.untrackConn(c)
			if err := s.serveConn(c, cfg); err != nil {
				s.logger().Debug("echo connection", "name", s.Name, "client", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// Close stops every Serve loop, closes every open connection and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Greeting formats the line the server writes first. version is a TLS version constant such
// as tls.VersionTLS13, or 0 for plain TCP.
func Greeting(name, sni, alpn string, version uint16) string {
	return fmt.Sprintf("hello from %s sni=%s alpn=%s tls=%s\n", name, dash(sni), dash(alpn), versionName(version))
}

// Hello is a parsed greeting line. Absent values ("-") are empty strings; TLS is "1.2", "1.3"
// or "off".
type Hello struct {
	Name, SNI, ALPN, TLS string
}

// ParseGreeting parses a line written by Greeting, with or without its trailing newline.
func ParseGreeting(line string) (Hello, error) {
	rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "hello from ")
	if !ok {
		return Hello{}, fmt.Errorf("echo: not a greeting: %q", line)
	}
	f := strings.Fields(rest)
	if len(f) != 4 {
		return Hello{}, fmt.Errorf("echo: greeting has %d fields, want 4: %q", len(f), line)
	}
	h := Hello{Name: f[0]}
	for i, dst := range []*string{&h.SNI, &h.ALPN, &h.TLS} {
		key := []string{"sni=", "alpn=", "tls="}[i]
		v, ok := strings.CutPrefix(f[i+1], key)
		if !ok {
			return Hello{}, fmt.Errorf("echo: greeting field %d is not %s...: %q", i+2, key, line)
		}
		if v == "-" {
			v = ""
		}
		*dst = v
	}
	return h, nil
}

// Run serves an echo backend named name on listenAddr until ctx is done. With certFile and
// keyFile it terminates TLS (1.2 minimum) with that PEM key pair; with neither it is plain TCP.
// It is what `snigate echo` runs.
func Run(ctx context.Context, listenAddr, name, certFile, keyFile string) error {
	if name == "" || strings.ContainsAny(name, " \t\r\n") {
		return fmt.Errorf("echo: name %q must be non-empty and contain no spaces", name)
	}
	var cfg *tls.Config
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("echo: load key pair: %w", err)
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	case certFile != "" || keyFile != "":
		return errors.New("echo: --cert and --key go together")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	mode := "tcp"
	if cfg != nil {
		mode = "tls"
	}
	slog.Info("echo listening", "name", name, "addr", ln.Addr().String(), "mode", mode)
	s := &Server{Name: name, TLS: cfg, Logger: slog.Default()}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	select {
	case <-ctx.Done():
		s.Close()
		<-done
		return nil
	case err := <-done:
		s.Close()
		return fmt.Errorf("echo: %w", err)
	}
}

func (s *Server) serveConn(c net.Conn, cfg *tls.Config) error {
	defer c.Close()
	rw := c
	var sni, alpn string
	var version uint16
	if cfg != nil {
		tc := tls.Server(c, cfg)
		timeout := s.HandshakeTimeout
		if timeout <= 0 {
			timeout = DefaultHandshakeTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
		st := tc.ConnectionState()
		sni, alpn, version = st.ServerName, st.NegotiatedProtocol, st.Version
		rw = tc
	}
	if _, err := io.WriteString(rw, Greeting(s.Name, sni, alpn, version)); err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := rw.Read(buf)
		if n > 0 {
			if _, werr := rw.Write(buf[:n]); werr != nil {
				return fmt.Errorf("write: %w", werr)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
	}
	return closeWrite(rw)
}

// closeWrite half-closes c: a TLS close_notify and then a TCP FIN under TLS, a FIN otherwise.
func closeWrite(c net.Conn) error {
	type closeWriter interface{ CloseWrite() error }
	var errs []error
	if tc, ok := c.(*tls.Conn); ok {
		errs = append(errs, tc.CloseWrite())
		c = tc.NetConn()
	}
	if cw, ok := c.(closeWriter); ok {
		errs = append(errs, cw.CloseWrite())
	}
	return errors.Join(errs...)
}

// tlsConfig returns the configuration Serve hands to tls.Server. It never modifies s.TLS,
// which may already be in use elsewhere.
func (s *Server) tlsConfig() *tls.Config {
	if s.TLS == nil {
		return nil
	}
	if len(s.TLS.NextProtos) > 0 || s.TLS.GetConfigForClient != nil {
		return s.TLS
	}
	// A clone per ALPN-offering connection: cheap at an echo server's connection rates.
	base := s.TLS.Clone()
	outer := base.Clone()
	outer.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if len(hello.SupportedProtos) == 0 {
			return nil, nil
		}
		c := base.Clone()
		c.NextProtos = hello.SupportedProtos[:1]
		return c, nil
	}
	return outer
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listeners, ln)
}

// trackConn registers c and counts its goroutine in wg under the same lock Close takes, so
// Close never waits on a goroutine it cannot see.
func (s *Server) trackConn(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[net.Conn]struct{})
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrackConn(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func versionName(v uint16) string {
	switch v {
	case 0:
		return "off"
	case tls.VersionTLS10:
		return "1.0"
	case tls.VersionTLS11:
		return "1.1"
	case tls.VersionTLS12:
		return "1.2"
	case tls.VersionTLS13:
		return "1.3"
	}
	return fmt.Sprintf("0x%04x", v)
}
