package accesslog

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

var fixed = time.Date(2026, 12, 1, 22, 14, 5, 123456789, time.UTC)

// line logs one connection line with l and returns it.
func line(l *Logger, buf *bytes.Buffer, sni string, client netip.AddrPort) string {
	l.now = func() time.Time { return fixed }
	l.Begin("connection").AddrPort("client", client).Str("sni", sni).Str("route", "default/db1").
		Int("bytes_in", 1234).Int("bytes_out", -5).Dur("duration", 3*time.Millisecond+7).End()
	l.sink.Close()
	return buf.String()
}

// slogLine is what slog's own handler writes for the same fields.
func slogLine(f Format, sni string, client netip.AddrPort) string {
	var buf bytes.Buffer
	var h slog.Handler = slog.NewJSONHandler(&buf, nil)
	if f == Text {
		h = slog.NewTextHandler(&buf, nil)
	}
	c := ""
	if client.IsValid() {
		c = client.String()
	}
	r := slog.NewRecord(fixed, slog.LevelInfo, "connection", 0)
	r.AddAttrs(slog.String("client", c), slog.String("sni", sni), slog.String("route", "default/db1"),
		slog.Int64("bytes_in", 1234), slog.Int64("bytes_out", -5), slog.Duration("duration", 3*time.Millisecond+7))
	h.Handle(context.Background(), r)
	return buf.String()
}

func compare(t *testing.T, sni string, client netip.AddrPort) {
	t.Helper()
	for _, f := range []Format{JSON, Text} {
		var buf bytes.Buffer
		got := line(New(NewSink(&buf, SinkOptions{}), f), &buf, sni, client)
		if want := slogLine(f, sni, client); got != want {
			t.Fatalf("format %d, sni %q:\n got %q\nwant %q", f, sni, got, want)
		}
	}
}

// The lines are slog's, byte for byte, in both formats: one parser reads the whole log.
func TestLinesAreSlogs(t *testing.T) {
	v4 := netip.MustParseAddrPort("10.1.2.3:45678")
	v6 := netip.MustParseAddrPort("[2001:db8::1]:5432")
	zone := netip.AddrPortFrom(netip.MustParseAddr("fe80::1%eth0"), 443)
	for _, c := range []struct {
		sni    string
		client netip.AddrPort
	}{
		{"db1.example.com", v4},
		{"", v6},
		{"a b=c\"d\\e\n\t\r\x00\x7f<>&", zone},
		{"naïve.例え.jp\u2028\u2029", v4},
		{"\xff\xfe bad utf-8 \xc3", netip.AddrPort{}},
	} {
		compare(t, c.sni, c.client)
	}
}

// Whatever a client puts in its SNI, the line is what slog would write (so it is valid
// JSON, one line, and cannot forge fields).
func FuzzStringsAreSlogs(f *testing.F) {
	for _, s := range []string{"db1.example.com", "", "a\"b", "\x00\n", "\xff", "é\u2028", "x=y z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sni string) {
		compare(t, sni, netip.MustParseAddrPort("127.0.0.1:1"))
		var buf bytes.Buffer
		got := line(New(NewSink(&buf, SinkOptions{}), JSON), &buf, sni, netip.AddrPort{})
		var m map[string]any
		if err := json.Unmarshal([]byte(got), &m); err != nil || strings.Count(got, "\n") != 1 {
			t.Fatalf("%q: %v", got, err)
		}
	})
}

// writes records every Write call.
type writes struct {
	mu    sync.Mutex
	calls [][]byte
	gate  chan struct{} // when set, each Write waits for it
}

func (w *writes) Write(p []byte) (int, error) {
	if w.gate != nil {
		<-w.gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, append([]byte(nil), p...))
	return len(p), nil
}

func (w *writes) all() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.Join(w.calls, nil)), len(w.calls)
}

// Many lines share few writes; a Direct line comes after every access line before it;
// Close writes what waits.
func TestSinkBatchesInOrder(t *testing.T) {
	w := &writes{}
	s := NewSink(w, SinkOptions{FlushDelay: time.Hour})
	l := New(s, JSON)
	for i := range 1000 {
		l.Begin("connection").Int("n", int64(i)).End()
	}
	direct := slog.New(slog.NewJSONHandler(s.Direct(), nil))
	direct.Warn("after the thousand")
	l.Begin("connection").Int("n", 1000).End()
	s.Close()
	out, calls := w.all()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 1002 || calls > 1002/100 {
		t.Fatalf("%d lines in %d writes", len(lines), calls)
	}
	if !strings.Contains(lines[999], `"n":999`) || !strings.Contains(lines[1000], "after the thousand") || !strings.Contains(lines[1001], `"n":1000`) {
		t.Fatalf("out of order:\n%s\n%s\n%s", lines[999], lines[1000], lines[1001])
	}
	// After Close, lines are written at once.
	l.Begin("late").End()
	if out, _ := w.all(); !strings.HasSuffix(out, "\"msg\":\"late\"}\n") {
		t.Fatalf("late line not written: %q", out[len(out)-80:])
	}
}

// A line waits at most FlushDelay.
func TestSinkFlushesAfterDelay(t *testing.T) {
	w := &writes{}
	s := NewSink(w, SinkOptions{FlushDelay: 20 * time.Millisecond})
	defer s.Close()
	New(s, Text).Begin("connection").End()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if out, _ := w.all(); strings.Contains(out, "msg=connection") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("line not written within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// When the output is stuck, lines beyond MaxPending are dropped and counted, the
// connections never wait, and the output says how many were lost once it moves again.
func TestSinkDropsWhenStuck(t *testing.T) {
	w := &writes{gate: make(chan struct{})}
	drops := 0
	s := NewSink(w, SinkOptions{FlushDelay: time.Millisecond, FlushSize: 256, MaxPending: 4096, OnDrop: func() { drops++ }})
	l := New(s, JSON)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			l.Begin("connection").Int("n", int64(i)).End()
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("logging blocked on a stuck output")
	}
	if s.Dropped() == 0 || int64(drops) != s.Dropped() {
		t.Fatalf("dropped %d, OnDrop %d", s.Dropped(), drops)
	}
	close(w.gate) // the output moves again
	s.Close()
	out, _ := w.all()
	if !strings.Contains(out, `"level":"WARN","msg":"access log lines dropped: the log output was too slow","dropped":`) {
		t.Fatalf("no notice of the drops in:\n%s", out[max(0, len(out)-400):])
	}
	for _, ln := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !json.Valid([]byte(ln)) {
			t.Fatalf("not JSON: %q", ln)
		}
	}
}

func BenchmarkLine(b *testing.B) {
	peer := netip.MustParseAddrPort("10.1.2.3:45678")
	s := NewSink(io.Discard, SinkOptions{})
	defer s.Close()
	l := New(s, JSON)
	b.ReportAllocs()
	for b.Loop() {
		l.Begin("connection").AddrPort("client", peer).Str("address", "0.0.0.0:5432").Str("listener", "default/gw/pg").
			Str("negotiation", "postgres").Str("sni", "db1.example.com").Str("route", "default/db1").
			Str("backend", "default/db1:5432").AddrPort("endpoint", peer).Int("bytes_in", 1234).
			Int("bytes_out", 5678).Dur("duration", 3*time.Millisecond).Str("outcome", "closed").End()
	}
}

func BenchmarkSlogLine(b *testing.B) {
	peer := netip.MustParseAddrPort("10.1.2.3:45678")
	l := slog.New(slog.NewJSONHandler(io.Discard, nil))
	b.ReportAllocs()
	for b.Loop() {
		l.Info("connection", "client", peer.String(), "address", "0.0.0.0:5432", "listener", "default/gw/pg",
			"negotiation", "postgres", "sni", "db1.example.com", "route", "default/db1",
			"backend", "default/db1:5432", "endpoint", peer.String(), "bytes_in", int64(1234),
			"bytes_out", int64(5678), "duration", 3*time.Millisecond, "outcome", "closed")
	}
}
