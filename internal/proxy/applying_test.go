package proxy

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/snapshot"
)

// A connection accepted on a port the running Apply is opening finds the port in the
// snapshot being applied: an inherited socket (live upgrade) accepts before the snapshot is
// stored, and such a connection was reset. A port in neither is gone.
func TestPortWhileApplying(t *testing.T) {
	old := snapshot.New(1, []*snapshot.Port{{Address: "127.0.0.1:1", Port: 1, Protocol: snapshot.ProtocolTLS}})
	next := snapshot.New(2, []*snapshot.Port{{Address: "127.0.0.1:1", Port: 1, Protocol: snapshot.ProtocolTLS},
		{Address: "127.0.0.1:2", Port: 2, Protocol: snapshot.ProtocolTLS}})
	p := &Proxy{}
	if p.port("127.0.0.1:2") != nil {
		t.Fatal("a port before any snapshot")
	}
	p.snap.Store(old)
	if p.port("127.0.0.1:2") != nil {
		t.Fatal("a port no snapshot has")
	}
	p.applying.Store(next)
	if got := p.port("127.0.0.1:2"); got != next.Port("127.0.0.1:2") {
		t.Fatalf("the opening port: %v, want the applied snapshot's", got)
	}
	if got := p.port("127.0.0.1:1"); got != old.Port("127.0.0.1:1") {
		t.Fatalf("a serving port: %v, want the serving snapshot's until the store", got)
	}
	p.applying.Store(nil)
	if p.port("127.0.0.1:2") != nil {
		t.Fatal("the port after the Apply ended without storing")
	}
}

// The speaks-first hint is logged for a client that sent nothing on such a port, at most
// once a second however many come.
func TestSpeaksFirstHintRate(t *testing.T) {
	var buf bytes.Buffer
	p := &Proxy{log: slog.New(slog.NewTextHandler(&buf, nil))}
	p.snap.Store(snapshot.New(1, []*snapshot.Port{{Address: "127.0.0.1:4222", Port: 4222, Protocol: snapshot.ProtocolTLS, SpeaksFirstHint: "set handshake_first"},
		{Address: "127.0.0.1:6379", Port: 6379, Protocol: snapshot.ProtocolTLS}}))
	p.speaksFirstHint(rejection{addr: "127.0.0.1:6379", reason: reasonClientGone})
	if buf.Len() != 0 {
		t.Fatalf("a hint on a port without one: %s", buf.String())
	}
	for range 100 {
		p.speaksFirstHint(rejection{addr: "127.0.0.1:4222", reason: reasonClientGone})
	}
	if n := strings.Count(buf.String(), "handshake_first"); n != 1 {
		t.Fatalf("%d hints for 100 empty connections within a second, want 1:\n%s", n, buf.String())
	}
}
