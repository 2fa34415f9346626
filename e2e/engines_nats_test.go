package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// NATS through a DatabaseExposure: nats-server with handshake_first (the only way a NATS
// client speaks first, so that SNI can route it) and nats.go with TLSHandshakeFirst,
// publishing and receiving by both of the exposure's names.
func TestEngineNATS(t *testing.T) {
	t.Parallel()
	needBinary(t)
	ca := testutil.NewCA(t)
	names := engineHostnames("events", "nats")
	srv := testutil.StartNATS(t, testutil.NATSOptions{CA: ca, Name: names[0], Cert: ca.Issue(t, names...)})
	e := startEngineTenant(t, ca, 4222,
		exposureYAML("events", "nats", 4222),
		fixture.ServiceYAML("acme", "events", 4222, srv.Port, "127.0.0.1"))

	t.Run("status", func(t *testing.T) {
		e.waitVerified(t, map[string][]*testutil.Cert{"events": {srv.Cert}})
	})

	for _, name := range names {
		t.Run("nats.go publish and subscribe by "+name, func(t *testing.T) {
			var peers peerRecorder
			nc, err := natsConnect(e, "tls://"+net.JoinHostPort(name, "4222"), peers.config(ca))
			if err != nil {
				t.Fatalf("connect by %s: %v", name, err)
			}
			defer nc.Close()
			sub, err := nc.SubscribeSync("snigate.engines")
			if err != nil {
				t.Fatal(err)
			}
			const n = 20
			for i := range n {
				if err := nc.Publish("snigate.engines", fmt.Appendf(nil, "%s %d", name, i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := nc.FlushTimeout(ioTimeout); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				msg, err := sub.NextMsg(ioTimeout)
				if err != nil {
					t.Fatalf("message %d of %d: %v", i, n, err)
				}
				if want := fmt.Sprintf("%s %d", name, i); string(msg.Data) != want {
					t.Fatalf("message %d: %q, want %q", i, msg.Data, want)
				}
			}
			// The server that answered is the one behind the exposure (its name in INFO).
			if got := nc.ConnectedServerName(); got != "events-nats-example-test" {
				t.Errorf("connected to server %q", got)
			}
			peers.check(t, name, srv.Cert)
		})
	}

	// The trap docs/engines.md warns of: a client that does not start TLS first waits for
	// the server's INFO, snigate waits for its ClientHello, and the client gives up first.
	t.Run("nats.go without TLSHandshakeFirst cannot connect", func(t *testing.T) {
		start := time.Now()
		nc, err := nats.Connect("tls://"+net.JoinHostPort(names[0], "4222"), nats.Secure(ca.ClientConfig(names[0])),
			nats.SetCustomDialer(natsDialer{e}), nats.Timeout(2*time.Second), nats.NoReconnect())
		if err == nil {
			nc.Close()
			t.Fatal("connected without TLS first: the server must have spoken first through snigate")
		}
		gaveUp := time.Now()
		t.Logf("without TLSHandshakeFirst, after %v: %v", gaveUp.Sub(start).Round(time.Millisecond), err)
		// snigate names the fix at once (the port holds only NATS exposures), not after its
		// 10 s hello timeout, which the client never waits for.
		rec := e.g.waitLog(t, "the NATS hint in snigate's log", 1, func(rec map[string]any, _ string) bool {
			msg := fmt.Sprint(rec["msg"])
			return strings.HasPrefix(msg, "client sent no ClientHello") && strings.Contains(msg, "handshake_first")
		})
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["time"]))
		if err != nil {
			t.Fatalf("log time %v: %v", rec["time"], err)
		}
		if d := at.Sub(gaveUp); d > time.Second {
			t.Errorf("the hint came %v after the client gave up, want at once", d)
		}
	})

	t.Run("the certificate is the server's own", func(t *testing.T) {
		e.checkServed(t, srv.Cert, names...)
	})

	t.Run("no SNI is closed with zero bytes", func(t *testing.T) {
		e.checkNoSNI(t, func() error {
			// By the address, nats.go sends no SNI.
			cfg := ca.ClientConfig(names[0])
			cfg.ServerName = ""
			cfg.InsecureSkipVerify = true
			nc, err := nats.Connect("tls://"+e.addr(), nats.Secure(cfg), nats.TLSHandshakeFirst(),
				nats.Timeout(ioTimeout), nats.NoReconnect(), nats.RetryOnFailedConnect(false))
			if err == nil {
				nc.Close()
			}
			return err
		})
	})
}

// natsConnect connects nats.go to url through the gateway, TLS first, without reconnecting
// (a reconnect would hide a connection that snigate closed).
func natsConnect(e *engineTenant, url string, cfg *tls.Config) (*nats.Conn, error) {
	return nats.Connect(url, nats.Secure(cfg), nats.TLSHandshakeFirst(),
		nats.SetCustomDialer(natsDialer{e}), nats.Timeout(ioTimeout), nats.NoReconnect())
}

// natsDialer is nats.go's CustomDialer onto the gateway.
type natsDialer struct{ e *engineTenant }

func (d natsDialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	return d.e.dial(ctx, network, address)
}
