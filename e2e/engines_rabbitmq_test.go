package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// RabbitMQ through a DatabaseExposure: Debian's rabbitmq-server listening for AMQPS only,
// and amqp091-go publishing to a queue and consuming from it by both of the exposure's
// names; the messages are then checked to be in that node's queue, read straight from it.
func TestEngineRabbitMQ(t *testing.T) {
	t.Parallel()
	needBinary(t)
	ca := testutil.NewCA(t)
	names := engineHostnames("jobs", "rabbitmq")
	srv := testutil.StartRabbitMQ(t, testutil.RabbitMQOptions{CA: ca, Name: names[0], Cert: ca.Issue(t, names...)})
	e := startEngineTenant(t, ca, 5671,
		exposureYAML("jobs", "rabbitmq", 5671),
		fixture.ServiceYAML("acme", "jobs", 5671, srv.Port, "127.0.0.1"))

	t.Run("status", func(t *testing.T) {
		e.waitVerified(t, map[string][]*testutil.Cert{"jobs": {srv.Cert}})
	})

	for _, name := range names {
		t.Run("amqp091-go publish and consume by "+name, func(t *testing.T) {
			var peers peerRecorder
			conn := amqpDial(t, "amqps://guest:guest@"+net.JoinHostPort(name, "5671")+"/", peers.config(ca), e.dial)
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			q, err := ch.QueueDeclare("snigate-"+name, false, true, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const n = 10
			for i := range n {
				if err := ch.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{Body: fmt.Appendf(nil, "%s %d", name, i)}); err != nil {
					t.Fatal(err)
				}
			}
			msgs, err := ch.ConsumeWithContext(ctx, q.Name, "", true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				select {
				case m, ok := <-msgs:
					if !ok {
						t.Fatalf("deliveries closed after %d of %d messages", i, n)
					}
					if want := fmt.Sprintf("%s %d", name, i); string(m.Body) != want {
						t.Fatalf("message %d: %q, want %q", i, m.Body, want)
					}
				case <-ctx.Done():
					t.Fatalf("message %d of %d not delivered: %v", i, n, ctx.Err())
				}
			}
			peers.check(t, name, srv.Cert)
		})
	}

	t.Run("a message sent through snigate is in the node's own queue", func(t *testing.T) {
		var peers peerRecorder
		via := amqpDial(t, "amqps://guest:guest@"+net.JoinHostPort(names[0], "5671")+"/", peers.config(ca), e.dial)
		ch, err := via.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("snigate-durable", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ch.PublishWithContext(ctx, "", "snigate-durable", false, false, amqp.Publishing{Body: []byte("through snigate")}); err != nil {
			t.Fatal(err)
		}
		// Straight to the node, verifying its certificate by name.
		direct := amqpDial(t, "amqps://guest:guest@"+srv.Addr+"/", ca.ClientConfig(names[0]), nil)
		dch, err := direct.Channel()
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(ioTimeout)
		for {
			m, ok, err := dch.Get("snigate-durable", true)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if string(m.Body) != "through snigate" {
					t.Fatalf("the node's queue holds %q", m.Body)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the node's queue is still empty %v after the publish", ioTimeout)
			}
			time.Sleep(pollEvery)
		}
	})

	t.Run("the certificate is the server's own", func(t *testing.T) {
		e.checkServed(t, srv.Cert, names...)
	})

	t.Run("no SNI is closed with zero bytes", func(t *testing.T) {
		e.checkNoSNI(t, func() error {
			// By the address amqp091-go sends no SNI.
			conn, err := amqp.DialConfig("amqps://guest:guest@"+e.addr()+"/", amqp.Config{
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
				Dial:            amqp.DefaultDial(ioTimeout),
			})
			if err == nil {
				conn.Close()
			}
			return err
		})
	})
}

// amqpDial connects amqp091-go to url with cfg, through dial when not nil, and closes the
// connection when the test ends.
func amqpDial(t *testing.T, url string, cfg *tls.Config, dial func(context.Context, string, string) (net.Conn, error)) *amqp.Connection {
	t.Helper()
	c := amqp.Config{TLSClientConfig: cfg, Dial: amqp.DefaultDial(ioTimeout)}
	if dial != nil {
		c.Dial = func(network, address string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			defer cancel()
			conn, err := dial(ctx, network, address)
			if err != nil {
				return nil, err
			}
			// DefaultDial's bound on the handshake; amqp091-go clears it once connected.
			conn.SetDeadline(time.Now().Add(ioTimeout))
			return conn, nil
		}
	}
	conn, err := amqp.DialConfig(url, c)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
