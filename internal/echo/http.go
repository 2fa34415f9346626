package echo

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// HTTPReply is what the HTTP echo answers to every request, as JSON: who answered and what
// it received, so a test or a demo user sees what the gateway forwarded.
type HTTPReply struct {
	Name    string              `json:"name"`
	Method  string              `json:"method"`
	Host    string              `json:"host"`
	Path    string              `json:"path"`
	Query   string              `json:"query,omitempty"`
	Proto   string              `json:"proto"`
	Headers map[string][]string `json:"headers"`
	Body    string              `json:"body,omitempty"`
}

// HTTPHandler is the `snigate echo --http` backend: it answers every request with an
// HTTPReply (header X-Echo-Name: name), and echoes WebSocket messages on a WebSocket
// upgrade (RFC 6455, text and binary frames, no extensions).
func HTTPHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			serveWebSocket(w, r)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Echo-Name", name)
		json.NewEncoder(w).Encode(HTTPReply{
			Name: name, Method: r.Method, Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery,
			Proto: r.Proto, Headers: r.Header, Body: string(body),
		})
	})
}

// RunHTTP serves HTTPHandler(name) in plain HTTP on listenAddr until ctx ends.
func RunHTTP(ctx context.Context, listenAddr, name string) error {
	if name == "" || strings.ContainsAny(name, " \t\r\n") {
		return fmt.Errorf("echo: name %q must be non-empty and contain no spaces", name)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	slog.Info("echo listening", "name", name, "addr", ln.Addr().String(), "mode", "http")
	srv := &http.Server{Handler: HTTPHandler(name), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
		return nil
	case err := <-done:
		return fmt.Errorf("echo: %w", err)
	}
}

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// WebSocketAccept is the Sec-WebSocket-Accept value for a Sec-WebSocket-Key.
func WebSocketAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

func serveWebSocket(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if key == "" || r.Header.Get("Sec-WebSocket-Version") != "13" {
		http.Error(w, "bad websocket handshake", http.StatusBadRequest)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", WebSocketAccept(key))
	if brw.Flush() != nil {
		return
	}
	for {
		op, payload, err := ReadFrame(brw.Reader)
		if err != nil {
			return
		}
		switch op {
		case 0x8: // close: answer and stop
			WriteFrame(c, 0x8, payload, false)
			return
		case 0x9: // ping
			WriteFrame(c, 0xA, payload, false)
		case 0x1, 0x2:
			if WriteFrame(c, op, payload, false) != nil {
				return
			}
		}
	}
}

// ReadFrame reads one unfragmented WebSocket frame and returns its opcode and unmasked
// payload (at most 1 MiB).
func ReadFrame(r *bufio.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0]&0x80 == 0 {
		return 0, nil, errors.New("websocket: fragmented frames are not supported")
	}
	op := h[0] & 0x0F
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 1<<20 {
		return 0, nil, errors.New("websocket: frame too large")
	}
	var mask [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range p {
			p[i] ^= mask[i%4]
		}
	}
	return op, p, nil
}

// WriteFrame writes one final WebSocket frame; clients must mask, servers must not.
func WriteFrame(w io.Writer, op byte, payload []byte, mask bool) error {
	b := []byte{0x80 | op}
	mb := byte(0)
	if mask {
		mb = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, mb|byte(n))
	case n <= 0xFFFF:
		b = append(b, mb|126, byte(n>>8), byte(n))
	default:
		b = append(b, mb|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	p := payload
	if mask {
		var k [4]byte
		rand.Read(k[:])
		b = append(b, k[:]...)
		p = make([]byte, len(payload))
		for i := range payload {
			p[i] = payload[i] ^ k[i%4]
		}
	}
	_, err := w.Write(append(b, p...))
	return err
}
