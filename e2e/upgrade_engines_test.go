package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// engineUpgrades is how many live upgrades the engine clients are held through.
const engineUpgrades = 3

// waitReplacedExited waits until every process in pids has exited (each drained and ended:
// whatever it had not handed over is cut by then).
func waitReplacedExited(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("replaced process %d still running after %v", pid, waitTimeout)
			}
			time.Sleep(pollEvery)
		}
	}
}

// upgradeEngineGateway makes e's gateway one that live upgrades replace (its pid file).
func upgradeEngineGateway(t *testing.T, e *engineTenant, pidFile string) *upgradeGateway {
	t.Helper()
	g := &upgradeGateway{gateway: e.g, pidFile: pidFile}
	g.waitPIDFile(t)
	g.stopTakenOver(t)
	return g
}

// A NATS client (nats.go, TLS first, no reconnecting) subscribed and publishing through a
// DatabaseExposure keeps its one connection through live upgrades: no disconnect, the same
// server session (its client id), and every message published arrives once, in order.
func TestUpgradeKeepsNATSClient(t *testing.T) {
	t.Parallel()
	needBinary(t)
	ca := testutil.NewCA(t)
	names := engineHostnames("events", "nats")
	srv := testutil.StartNATS(t, testutil.NATSOptions{CA: ca, Name: names[0], Cert: ca.Issue(t, names...)})
	pidFile := filepath.Join(t.TempDir(), "snigate.pid")
	// The drain is shorter than the test: a connection left with an old process would be cut.
	e := startEngineTenantArgs(t, ca, 4222, []string{"--pid-file", pidFile, "--drain-timeout", "2s"},
		exposureYAML("events", "nats", 4222),
		fixture.ServiceYAML("acme", "events", 4222, srv.Port, "127.0.0.1"))
	g := upgradeEngineGateway(t, e, pidFile)

	var disconnects atomic.Int64
	nc, err := nats.Connect("tls://"+net.JoinHostPort(names[0], "4222"), nats.Secure(ca.ClientConfig(names[0])),
		nats.TLSHandshakeFirst(), nats.SetCustomDialer(natsDialer{e}), nats.Timeout(ioTimeout), nats.NoReconnect(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { disconnects.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	id, _ := nc.GetClientID()
	sub, err := nc.SubscribeSync("snigate.upgrade")
	if err != nil {
		t.Fatal(err)
	}
	// A publisher on the same connection, every 10 ms, until stopped.
	var published atomic.Int64
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nc.FlushTimeout(ioTimeout)
				return
			case <-time.After(10 * time.Millisecond):
			}
			if err := nc.Publish("snigate.upgrade", []byte(strconv.Itoa(i))); err != nil {
				done <- err
				return
			}
			published.Store(int64(i + 1))
		}
	}()
	next := 0
	receive := func(upTo int) {
		t.Helper()
		for next < upTo {
			msg, err := sub.NextMsg(ioTimeout)
			if err != nil {
				t.Fatalf("message %d of %d: %v", next, upTo, err)
			}
			if got := string(msg.Data); got != strconv.Itoa(next) {
				t.Fatalf("message %q, want %d: lost or reordered", got, next)
			}
			next++
		}
	}
	replaced := []int{g.cmd.Process.Pid}
	for u := range engineUpgrades {
		receive(int(published.Load()) + 5) // messages flow before each upgrade
		pid := g.upgradeOK(t, false)
		receive(int(published.Load()) + 5) // and after it, through the new process
		t.Logf("upgrade %d: process %d serves, %d messages so far", u+1, pid, next)
		if u < engineUpgrades-1 {
			replaced = append(replaced, pid)
		}
	}
	// Every process but the last has ended (its 2 s drain cuts what it kept): the session
	// still flows, so it is the last process's.
	waitReplacedExited(t, replaced)
	receive(int(published.Load()) + 5)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("publisher: %v", err)
	}
	receive(int(published.Load()))
	if n := disconnects.Load(); n != 0 || !nc.IsConnected() {
		t.Fatalf("%d disconnects, connected %v: the session did not survive the upgrades", n, nc.IsConnected())
	}
	if now, _ := nc.GetClientID(); now != id {
		t.Fatalf("server client id %d → %d: a new session", id, now)
	}
	t.Logf("%d messages in order through %d upgrades on one connection (client id %d)", next, engineUpgrades, id)
}

// franz-go producing to and consuming from three kfake brokers through their exposure's
// members keeps every broker connection through live upgrades: no broker connection is
// closed or dialed again, and every record produced during them is consumed once.
func TestUpgradeKeepsKafkaClients(t *testing.T) {
	t.Parallel()
	needBinary(t)
	pidFile := filepath.Join(t.TempDir(), "snigate.pid")
	k := startKafkaTenant(t, []string{"--pid-file", pidFile, "--drain-timeout", "2s"})
	g := upgradeEngineGateway(t, k.e, pidFile)
	const topic = "snigate-upgrade"
	if err := k.cluster.CreateTopic(topic, kafkaBrokers, nil); err != nil {
		t.Fatal(err)
	}
	for i := range kafkaBrokers {
		if err := k.cluster.MoveTopicPartition(topic, int32(i), int32(i)); err != nil {
			t.Fatal(err)
		}
	}

	var dials, disconnects atomic.Int64
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		dials.Add(1)
		conn, err := k.e.dial(ctx, network, host)
		if err != nil {
			return nil, err
		}
		c := k.ca.ClientConfig("")
		c.ServerName, _, _ = net.SplitHostPort(host)
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	}
	hooks := kgo.WithHooks(disconnectHook(func() { disconnects.Add(1) }))
	seed := kgo.SeedBrokers(net.JoinHostPort(k.bootstrap[0], "9093"))
	prod, err := kgo.NewClient(seed, kgo.Dialer(dial), hooks, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ConnIdleTimeout(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cons, err := kgo.NewClient(seed, kgo.Dialer(dial), hooks, kgo.ConnIdleTimeout(10*time.Minute),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	consumed := map[string]int{}
	consume := func(want int) {
		t.Helper()
		for {
			mu.Lock()
			n := len(consumed)
			mu.Unlock()
			if n >= want {
				return
			}
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d: %v", n, want, ctx.Err())
			}
			if errs := fs.Errors(); len(errs) > 0 {
				t.Fatalf("fetch: %v", errs)
			}
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { consumed[string(r.Value)]++ })
			mu.Unlock()
		}
	}
	produced := 0
	produce := func(n int) {
		t.Helper()
		var rs []*kgo.Record
		for range n {
			rs = append(rs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "r%d", produced)})
			produced++
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// Every broker's connections open (bootstrap, then one or more per broker and client)
	// before the counts are taken.
	produce(30)
	consume(produced)
	dials0, disc0 := dials.Load(), disconnects.Load()
	replaced := []int{g.cmd.Process.Pid}
	for u := range engineUpgrades {
		pid := g.upgradeOK(t, false)
		produce(30)
		consume(produced)
		t.Logf("upgrade %d: process %d serves, %d records produced and consumed", u+1, pid, produced)
		if u < engineUpgrades-1 {
			replaced = append(replaced, pid)
		}
	}
	// Every process but the last has ended (its 2 s drain cuts what it kept): the
	// connections still carry records, so they are the last process's.
	waitReplacedExited(t, replaced)
	produce(30)
	consume(produced)
	for v, n := range consumed {
		if n != 1 {
			t.Errorf("record %s consumed %d times", v, n)
		}
	}
	if d, x := dials.Load()-dials0, disconnects.Load()-disc0; d != 0 || x != 0 {
		t.Fatalf("through the upgrades: %d broker connections closed, %d dialed again (of %d dialed before)", x, d, dials0)
	}
	t.Logf("%d records through %d upgrades on the same %d broker connections", produced, engineUpgrades, dials0)
}

// disconnectHook is a franz-go hook counting broker connections closed.
type disconnectHook func()

func (h disconnectHook) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { h() }
