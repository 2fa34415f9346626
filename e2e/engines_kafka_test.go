package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// kafkaBrokers is how many brokers the Kafka test runs: enough that a client must reach
// brokers other than the one it bootstrapped from.
const kafkaBrokers = 3

// kafkaBrokerIP is broker i's loopback address: the brokers share one port on three
// addresses, so that the bootstrap Service is one port over three endpoints.
func kafkaBrokerIP(i int) string { return "127.0.0." + strconv.Itoa(61+i) }

// Kafka through snigate: three TLS brokers of franz-go's kfake, each with its own
// certificate and advertising its own member name, published by one DatabaseExposure whose
// backendRef is the bootstrap Service over all three and whose spec.members give each
// broker <member>.<release>.kafka.<apex> and a route to its own Service. franz-go
// bootstraps by the bootstrap name, then produces to and consumes from a partition led by
// each broker, reconnecting to each by its advertised name.
func TestEngineKafka(t *testing.T) {
	t.Parallel()
	needBinary(t)
	k := startKafkaTenant(t, nil)
	e, ca, certs, cluster, bootstrap, member, memberNames := k.e, k.ca, k.certs, k.cluster, k.bootstrap, k.member, k.memberNames

	t.Run("status", func(t *testing.T) {
		st := e.waitVerified(t, map[string][]*testutil.Cert{"events": certs})["events"]
		if s, r, m := st.condition("MembersAccepted"); s != "True" {
			t.Errorf("MembersAccepted %s %s: %s", s, r, m)
		}
		if len(st.Status.Members) != kafkaBrokers {
			t.Fatalf("status.members %+v, want %d", st.Status.Members, kafkaBrokers)
		}
		for i, m := range st.Status.Members {
			if m.Name != member(i) || m.Reason != "Accepted" || m.Certificate != "Verified" || !slices.Equal(m.Hostnames, memberNames(i)) {
				t.Errorf("member %d: %+v, want %s Accepted and Verified with hostnames %v", i, m, member(i), memberNames(i))
			}
		}
	})

	const topic = "snigate-engines"
	if err := cluster.CreateTopic(topic, kafkaBrokers, nil); err != nil {
		t.Fatal(err)
	}
	// Partition i led by broker i: producing to every partition reaches every broker.
	for i := range kafkaBrokers {
		if err := cluster.MoveTopicPartition(topic, int32(i), int32(i)); err != nil {
			t.Fatal(err)
		}
	}

	for _, seed := range bootstrap {
		t.Run("franz-go produce and consume across the brokers, bootstrapped by "+seed, func(t *testing.T) {
			var peers peerRecorder
			cfg := peers.config(ca)
			dial := func(ctx context.Context, network, host string) (net.Conn, error) {
				conn, err := e.dial(ctx, network, host)
				if err != nil {
					return nil, err
				}
				// What kgo.DialTLSConfig does (it cannot be combined with a Dialer): SNI and
				// verification by the host the client dials.
				c := cfg.Clone()
				c.ServerName, _, _ = net.SplitHostPort(host)
				tc := tls.Client(conn, c)
				if err := tc.HandshakeContext(ctx); err != nil {
					conn.Close()
					return nil, err
				}
				return tc, nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			prod, err := kgo.NewClient(kgo.SeedBrokers(net.JoinHostPort(seed, "9093")), kgo.Dialer(dial),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequestRetries(2), kgo.RetryTimeout(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			var records []*kgo.Record
			for p := range kafkaBrokers {
				for i := range 5 {
					records = append(records, &kgo.Record{Topic: topic, Partition: int32(p), Value: fmt.Appendf(nil, "%s %d %d", seed, p, i)})
				}
			}
			if err := prod.ProduceSync(ctx, records...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			offsets := map[int32]kgo.Offset{}
			for p := range kafkaBrokers {
				// Each partition from the first record this subtest wrote to it.
				offsets[int32(p)] = kgo.NewOffset().At(records[p*5].Offset)
			}
			cons, err := kgo.NewClient(kgo.SeedBrokers(net.JoinHostPort(seed, "9093")), kgo.Dialer(dial),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}), kgo.RequestRetries(2))
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			got := map[string]bool{}
			for len(got) < len(records) {
				fs := cons.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatalf("consumed %d of %d records: %v", len(got), len(records), ctx.Err())
				}
				if errs := fs.Errors(); len(errs) > 0 {
					t.Fatalf("fetch: %v", errs)
				}
				fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
			}
			for _, r := range records {
				if !got[string(r.Value)] {
					t.Errorf("record %q not consumed", r.Value)
				}
			}
			// The client reached the bootstrap and every broker by its advertised name, each
			// with that broker's own certificate.
			peers.mu.Lock()
			_, bootstrapped := peers.serials[seed]
			peers.mu.Unlock()
			if !bootstrapped {
				t.Errorf("the client never connected by the bootstrap name %s", seed)
			}
			for i := range kafkaBrokers {
				peers.check(t, memberNames(i)[0], certs[i])
			}
		})
	}

	t.Run("each broker's certificate is its own", func(t *testing.T) {
		for i := range kafkaBrokers {
			e.checkServed(t, certs[i], memberNames(i)...)
		}
	})

	t.Run("no SNI is closed with zero bytes", func(t *testing.T) {
		e.checkNoSNI(t, func() error {
			// By the address kgo sends no SNI; one try, bounded.
			cl, err := kgo.NewClient(kgo.SeedBrokers(e.addr()), kgo.DialTLSConfig(&tls.Config{InsecureSkipVerify: true}),
				kgo.RequestRetries(0), kgo.RetryTimeout(5*time.Second))
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return cl.Ping(ctx)
		})
	})
}

// kafkaTenant is three kfake brokers with TLS behind one DatabaseExposure with a member per
// broker (b0, b1, b2), each broker advertising its member's name.
type kafkaTenant struct {
	e           *engineTenant
	ca          *testutil.CA
	certs       []*testutil.Cert
	cluster     *kfake.Cluster
	bootstrap   []string // the exposure's two names
	member      func(int) string
	memberNames func(int) []string
}

// startKafkaTenant starts the brokers and a gateway serving them, with args for snigate serve.
func startKafkaTenant(t *testing.T, args []string) *kafkaTenant {
	t.Helper()
	k := &kafkaTenant{ca: testutil.NewCA(t), bootstrap: engineHostnames("events", "kafka")}
	k.member = func(i int) string { return fmt.Sprintf("b%d", i) }
	// memberNames are broker i's names: b<i>.events.kafka.<apex> and b<i>.events.<apex>.
	k.memberNames = func(i int) []string {
		return []string{k.member(i) + "." + k.bootstrap[0], k.member(i) + "." + k.bootstrap[1]}
	}
	for i := range kafkaBrokers {
		// Every broker's certificate names the bootstrap too: the bootstrap route sends a
		// client to any of them.
		k.certs = append(k.certs, k.ca.Issue(t, append(k.memberNames(i), k.bootstrap...)...))
	}
	var brokerPort int
	brokerPort, k.cluster = startKafka(t, k.certs, func(i int) string { return k.memberNames(i)[0] + ":9093" })
	exposure := exposureYAML("events", "kafka", 9093) + "  members:\n"
	var objects, ips []string
	for i := range kafkaBrokers {
		ips = append(ips, kafkaBrokerIP(i))
		svc := "events-" + k.member(i)
		exposure += fmt.Sprintf("  - {name: %s, backendRef: {name: %s, port: 9093}}\n", k.member(i), svc)
		objects = append(objects, fixture.ServiceYAML("acme", svc, 9093, brokerPort, kafkaBrokerIP(i)))
	}
	objects = append(objects, exposure, fixture.ServiceYAML("acme", "events", 9093, brokerPort, ips...))
	k.e = startEngineTenantArgs(t, k.ca, 9093, args, objects...)
	return k
}

// startKafka starts a kfake cluster of len(certs) TLS brokers: broker i listens on
// kafkaBrokerIP(i) at one port shared by all, serves certs[i], and advertises advertise(i)
// (kfake advertises what its listener's Addr says). It returns the port; the cluster is
// closed when the test ends.
func startKafka(t *testing.T, certs []*testutil.Cert, advertise func(int) string) (int, *kfake.Cluster) {
	t.Helper()
	for range 5 {
		port, listeners, err := kafkaListeners(len(certs))
		if err != nil {
			t.Logf("broker listeners: %v; again on another port", err)
			continue
		}
		var mu sync.Mutex
		next := 0
		listen := func(string, string) (net.Listener, error) {
			mu.Lock()
			defer mu.Unlock()
			if next == len(listeners) {
				return nil, fmt.Errorf("kfake asked for broker %d of %d", next, len(listeners))
			}
			i := next
			next++
			cfg := &tls.Config{Certificates: []tls.Certificate{certs[i].TLS}}
			return advertisedListener{tls.NewListener(listeners[i], cfg), advertise(i)}, nil
		}
		c, err := kfake.NewCluster(kfake.NumBrokers(len(certs)), kfake.ListenFn(listen))
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			t.Fatalf("kfake: %v", err)
		}
		t.Cleanup(c.Close)
		return port, c
	}
	t.Fatal("no port free on every broker address")
	return 0, nil
}

// kafkaListeners binds n listeners, one per broker address, on one kernel-picked port.
func kafkaListeners(n int) (int, []net.Listener, error) {
	first, err := net.Listen("tcp", net.JoinHostPort(kafkaBrokerIP(0), "0"))
	if err != nil {
		return 0, nil, err
	}
	port := first.Addr().(*net.TCPAddr).Port
	ls := []net.Listener{first}
	for i := 1; i < n; i++ {
		l, err := net.Listen("tcp", net.JoinHostPort(kafkaBrokerIP(i), strconv.Itoa(port)))
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return 0, nil, err
		}
		ls = append(ls, l)
	}
	return port, ls, nil
}

// advertisedListener is a listener whose Addr is the name:port its broker advertises.
type advertisedListener struct {
	net.Listener
	advertised string
}

func (l advertisedListener) Addr() net.Addr { return advertisedAddr(l.advertised) }

type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }
