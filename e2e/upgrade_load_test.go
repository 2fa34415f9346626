package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/snigate/snigate/internal/testutil"
)

// loadTools are the real clients the load test drives: libpq's psql and pgbench, and
// redis-cli (OpenSSL), not Go drivers, so that what is proven is what operators run.
type loadTools struct{ psql, pgbench, redisCLI string }

// Five live upgrades in a row, spaced about a second, while real clients load the gateway,
// on both relay waits (issue 54's standalone acceptance):
//   - pgbench TPC-B with 4 clients through the PostgreSQL listener for the whole sequence:
//     exit 0, no error or aborted client;
//   - a psql session held in an open transaction: pg_backend_pid and txid_current unchanged
//     after each upgrade, and the transaction commits every row inserted across them;
//   - redis-cli SUBSCRIBE held through the gateway while a held publisher (also through the
//     gateway) publishes every 10 ms: after each upgrade a newer message arrives, and in the
//     end every message published arrived once, in order;
//   - a new TLS connection every few milliseconds: none fails;
//   - a TCP stream checksummed both ways: every byte, in order.
//
// The drain deadline (2 s) is shorter than the held sessions: a connection left with an
// old process would be cut, and fail the test.
func TestUpgradeUnderLoad(t *testing.T) {
	needBinary(t)
	pgDir, err := testutil.PostgresBinDir()
	testutil.Require(t, "PostgreSQL client tools (psql, pgbench)", err)
	tools := loadTools{
		psql:     testutil.Binary(t, "psql", pgDir),
		pgbench:  testutil.Binary(t, "pgbench", pgDir),
		redisCLI: testutil.Binary(t, "redis-cli", "/usr/bin"),
	}
	for _, wait := range []struct{ name, flag string }{{"epoll", ""}, {"io_uring", "--io-uring"}} {
		t.Run(wait.name, func(t *testing.T) { testUpgradeUnderLoad(t, tools, wait.name, wait.flag) })
	}
}

const (
	loadUpgrades     = 5
	loadSpacing      = time.Second // from one upgrade's start to the next one's
	loadPgbenchSecs  = 12          // outlasts the five upgrades (about 6 s) on a slow machine
	loadRedisChannel = "upgrade-load"
)

func testUpgradeUnderLoad(t *testing.T, tools loadTools, wantWait, waitFlag string) {
	ca := testutil.NewCA(t)
	pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: dbPGA})
	rd := testutil.StartRedis(t, testutil.RedisOptions{CA: ca, Name: "redis.db.test"})
	ports := testutil.FreePorts(t, 4)
	tlsPort, pgPort, redisPort, tcpPort := ports[0], ports[1], ports[2], ports[3]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", tlsPort, ""), passthrough("postgres", pgPort, ""), passthrough("redis", redisPort, ""),
			listener{Name: "stream", Protocol: "TCP", Port: tcpPort}),
		routeYAML("route-a", "tls", []string{"a.test"}, to("svc-a")),
		routeYAML("pg", "postgres", []string{dbPGA}, to("svc-pg")),
		routeYAML("redis", "redis", []string{rd.Name}, to("svc-redis")),
		streamRouteYAML(),
		serviceYAML("svc-a", startEcho(t, "echo-a", ca.Issue(t, "a.test"))),
		serviceYAML("svc-pg", pg.Port),
		serviceYAML("svc-redis", rd.Port),
		serviceYAML("svc-echo", startRawEcho(t)),
	))
	g := serveForUpgrade(t, dir, waitFlag)
	// On failure the gateway's own print keeps only the last 300 lines, mostly access-log
	// lines written after the fact: print every other line of every process (the upgrade
	// steps, warnings and errors), and access-log lines that carry an error.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		whole, _ := os.ReadFile(g.log)
		var keep []string
		for _, l := range strings.Split(string(whole), "\n") {
			if l != "" && (!strings.Contains(l, `"msg":"connection"`) || strings.Contains(l, `"error"`)) && len(keep) < 400 {
				keep = append(keep, l)
			}
		}
		t.Logf("snigate log, all processes, without plain access-log lines:\n%s", strings.Join(keep, "\n"))
	})
	// Both waits or the test proves one twice: a machine that refuses io_uring is a missing
	// prerequisite (fails under CI=true), as in TestRelayWait.
	if rec := g.waitLog(t, "the relay's wait", 1, func(rec map[string]any, _ string) bool { return rec["wait"] != nil }); rec["wait"] != wantWait {
		testutil.Require(t, "relay wait "+wantWait, fmt.Errorf("the relay waits on %v", rec["wait"]))
	}

	// verify-full with host = the route's name: libpq sends it as SNI.
	pgConn := pg.ConnString("127.0.0.1", pgPort)
	if r := dbRun(t, tools.pgbench, "-i", "-s", "1", "-q", pgConn); r.err != nil {
		t.Fatalf("pgbench -i through the gateway:\n%s", r)
	}
	psql := startHeldPsql(t, tools.psql, pgConn)
	psql.do(t, "create table upgrade_psql (n int)")
	psql.do(t, "begin")
	psql.do(t, "insert into upgrade_psql values (0)")
	session0 := psql.one(t, "select pg_backend_pid() || '|' || txid_current()")

	sub := startSubscriber(t, tools.redisCLI, "--tls", "--sni", rd.Name, "--cacert", ca.File,
		"-h", "127.0.0.1", "-p", strconv.Itoa(redisPort), "SUBSCRIBE", loadRedisChannel)
	pub := startPublisher(t, rd, redisPort)
	h := startHammer(tlsPort, ca.ClientConfig("a.test"))
	st := startStream(t, tcpPort)
	bench := startPgbench(t, tools.pgbench, "-n", "-c", "4", "-j", "2", "-T", strconv.Itoa(loadPgbenchSecs), "-P", "1", pgConn)

	var tooks []time.Duration
	next := time.Now().Add(loadSpacing)
	for i := range loadUpgrades {
		time.Sleep(time.Until(next))
		next = time.Now().Add(loadSpacing)
		published := pub.sent.Load()
		start := time.Now()
		g.upgradeOK(t, i%2 == 1)
		tooks = append(tooks, time.Since(start))
		if got := psql.one(t, "select pg_backend_pid() || '|' || txid_current()"); got != session0 {
			t.Fatalf("psql after upgrade %d: pid|txid %s, was %s: the session or its transaction was replaced", i+1, got, session0)
		}
		psql.do(t, fmt.Sprintf("insert into upgrade_psql values (%d)", i+1))
		sub.waitPast(t, published, fmt.Sprintf("after upgrade %d", i+1))
	}
	if bench.exited() {
		t.Errorf("pgbench ended before the last upgrade was over: the load did not cover them all\n%s", bench.output())
	}

	bench.finish(t)
	psql.do(t, "commit")
	if n := psql.one(t, "select count(*) from upgrade_psql"); n != strconv.Itoa(loadUpgrades+1) {
		t.Errorf("psql: %s rows committed by the transaction held across the upgrades, want %d", n, loadUpgrades+1)
	}
	psql.finish(t)
	h.finish(t)
	st.finish(t)
	sub.finish(t, pub.finish(t))
	t.Logf("snigate upgrade under load took %v", tooks)
	logUpgrades(t, g, 4+1+1+1+1) // pgbench's 4, psql, the subscriber, the publisher, the stream
}

// heldPsql is psql reading commands from a pipe, its output read line by line: a session
// held open like an operator's, driven a statement at a time.
type heldPsql struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // closed when psql's stdout ends
	stderr *testutil.SyncBuffer
	n      int
}

func startHeldPsql(t *testing.T, bin, conn string) *heldPsql {
	t.Helper()
	// -q: no command tags, so each statement prints only its rows, and a marker echoed
	// after it tells where its output ends. ON_ERROR_STOP: an error ends psql, which the
	// next statement then sees as the end of its output.
	cmd := exec.Command(bin, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", conn)
	cmd.Env = append(testutil.CleanEnv(), "HOME="+t.TempDir())
	p := &heldPsql{cmd: cmd, lines: make(chan string, 64), stderr: &testutil.SyncBuffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p
}

// do runs sql and returns the lines it printed; psql ending, or no answer within
// ioTimeout, fails the test.
func (p *heldPsql) do(t *testing.T, sql string) []string {
	t.Helper()
	p.n++
	mark := fmt.Sprintf("__done_%d", p.n)
	if _, err := fmt.Fprintf(p.stdin, "%s;\n\\echo %s\n", sql, mark); err != nil {
		t.Fatalf("psql: writing %q: %v\nstderr: %s", sql, err, p.stderr)
	}
	var got []string
	deadline := time.After(ioTimeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("psql ended during %q; output %q\nstderr: %s", sql, got, p.stderr)
			}
			if l == mark {
				return got
			}
			got = append(got, l)
		case <-deadline:
			t.Fatalf("psql: no answer to %q within %v; output %q\nstderr: %s", sql, ioTimeout, got, p.stderr)
		}
	}
}

// one runs a query that prints exactly one line and returns it.
func (p *heldPsql) one(t *testing.T, sql string) string {
	t.Helper()
	got := p.do(t, sql)
	if len(got) != 1 {
		t.Fatalf("psql %q printed %q, want one line", sql, got)
	}
	return got[0]
}

// finish ends psql's input and wants a clean exit: no error was reported on stderr.
func (p *heldPsql) finish(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || p.stderr.String() != "" {
			t.Errorf("psql exited with %v; stderr: %s", err, p.stderr)
		}
	case <-time.After(ioTimeout):
		t.Errorf("psql still running %v after its input ended", ioTimeout)
	}
}

// subscriber is redis-cli SUBSCRIBE, its raw output (not a terminal: one line per
// element) read line by line.
type subscriber struct {
	cmd        *exec.Cmd
	stderr     *testutil.SyncBuffer
	mu         sync.Mutex
	got        []string      // message payloads, in arrival order
	other      []string      // lines that are neither the confirmation nor a message
	ended      chan struct{} // closed when redis-cli's stdout ends
	subscribed chan struct{} // closed once the subscription is confirmed
}

func startSubscriber(t *testing.T, bin string, args ...string) *subscriber {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(testutil.CleanEnv(), "HOME="+t.TempDir())
	s := &subscriber{cmd: cmd, stderr: &testutil.SyncBuffer{}, ended: make(chan struct{}), subscribed: make(chan struct{})}
	cmd.Stderr = s.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		defer close(s.ended)
		sc := bufio.NewScanner(out)
		confirmed := false
		// Each reply is three lines: kind, channel, then the count (subscribe) or payload.
		for {
			var three [3]string
			for i := range three {
				if !sc.Scan() {
					return
				}
				three[i] = sc.Text()
			}
			s.mu.Lock()
			switch {
			case three[0] == "subscribe" && three[1] == loadRedisChannel && !confirmed:
				confirmed = true
				// The first reply only: a second confirmation (a client that resubscribed)
				// is kept as unexpected, and fails the test.
				close(s.subscribed)
			case three[0] == "message" && three[1] == loadRedisChannel:
				s.got = append(s.got, three[2])
			default:
				s.other = append(s.other, three[:]...)
			}
			s.mu.Unlock()
		}
	}()
	select {
	case <-s.subscribed:
	case <-s.ended:
		t.Fatalf("redis-cli SUBSCRIBE ended before subscribing; stderr: %s", s.stderr)
	case <-time.After(ioTimeout):
		t.Fatalf("redis-cli SUBSCRIBE not confirmed within %v; stderr: %s", ioTimeout, s.stderr)
	}
	return s
}

// waitPast waits for a message numbered at least n (published after the moment the caller
// noted n) to arrive.
func (s *subscriber) waitPast(t *testing.T, n int64, when string) {
	t.Helper()
	for deadline := time.Now().Add(ioTimeout); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		last := ""
		if len(s.got) > 0 {
			last = s.got[len(s.got)-1]
		}
		s.mu.Unlock()
		if k, err := strconv.ParseInt(strings.TrimPrefix(last, "msg-"), 10, 64); err == nil && k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-cli SUBSCRIBE %s: no message numbered %d or more within %v (last %q); stderr: %s", when, n, ioTimeout, last, s.stderr)
		}
	}
}

// finish waits for the last of the published messages and wants them all, once each, in
// order.
func (s *subscriber) finish(t *testing.T, published int64) {
	t.Helper()
	if published > 0 {
		s.waitPast(t, published-1, "at the end")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.other) > 0 {
		t.Errorf("redis-cli SUBSCRIBE printed unexpected lines: %q", s.other)
	}
	for i, m := range s.got {
		if m != "msg-"+strconv.Itoa(i) {
			t.Fatalf("redis-cli SUBSCRIBE: message %d is %q, want msg-%d (lost, duplicated or reordered)", i, m, i)
		}
	}
	if int64(len(s.got)) != published {
		t.Fatalf("redis-cli SUBSCRIBE received %d messages, %d were published", len(s.got), published)
	}
	if published < 200 {
		t.Errorf("only %d messages published: the test did not test", published)
	}
	t.Logf("redis-cli SUBSCRIBE: %d messages received, once each, in order", published)
}

// publisher publishes msg-0, msg-1… every 10 ms on one connection held through the
// gateway. Every PUBLISH must reach exactly one subscriber (redis-cli): a subscription
// lost in an upgrade would answer 0.
type publisher struct {
	c    *redis.Client
	sent atomic.Int64
	stop chan struct{}
	done chan error
}

func startPublisher(t *testing.T, rd *testutil.Redis, port int) *publisher {
	t.Helper()
	// One connection and no retry: a connection lost in an upgrade is an error, not a
	// silent reconnect.
	c := redis.NewClient(&redis.Options{Addr: addr(port), TLSConfig: rd.TLSConfig(), DialTimeout: ioTimeout,
		ReadTimeout: ioTimeout, WriteTimeout: ioTimeout, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	p := &publisher{c: c, stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		const most = 20000 // 200 s at the pace: far beyond the test's length
		for i := range most {
			select {
			case <-p.stop:
				p.done <- nil
				return
			case <-time.After(10 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			n, err := c.Publish(ctx, loadRedisChannel, "msg-"+strconv.Itoa(i)).Result()
			cancel()
			if err != nil || n != 1 {
				p.done <- fmt.Errorf("PUBLISH msg-%d through the gateway at %s: %d receivers, %v", i, time.Now().Format("15:04:05.000"), n, err)
				return
			}
			p.sent.Add(1)
		}
		p.done <- fmt.Errorf("publisher: %d messages and not stopped", most)
	}()
	return p
}

// finish stops publishing and returns how many messages were published.
func (p *publisher) finish(t *testing.T) int64 {
	t.Helper()
	close(p.stop)
	if err := <-p.done; err != nil {
		t.Error(err)
	}
	return p.sent.Load()
}

// pgbenchRun is pgbench running in the background, bounded by dbCmdTimeout.
type pgbenchRun struct {
	cmd    *exec.Cmd
	out    *testutil.SyncBuffer // stdout and stderr
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

func startPgbench(t *testing.T, bin string, args ...string) *pgbenchRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbCmdTimeout)
	b := &pgbenchRun{cmd: exec.CommandContext(ctx, bin, args...), out: &testutil.SyncBuffer{}, done: make(chan struct{}), cancel: cancel}
	b.cmd.Env = append(testutil.CleanEnv(), "HOME="+t.TempDir())
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() { cancel(); <-b.done })
	return b
}

func (b *pgbenchRun) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func (b *pgbenchRun) output() string { return b.out.String() }

var (
	pgbenchProgress = regexp.MustCompile(`progress: [0-9.]+ s, ([0-9.]+) tps, lat ([0-9.]+) ms`)
	pgbenchTPS      = regexp.MustCompile(`tps = ([0-9.]+)`)
	pgbenchDone     = regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)
)

// finish waits for pgbench and wants exit 0, no error and no aborted client in its
// output; it logs the throughput, per second too (the seconds of the upgrades included).
func (b *pgbenchRun) finish(t *testing.T) {
	t.Helper()
	<-b.done
	out := b.output()
	lower := strings.ToLower(out)
	if b.err != nil || strings.Contains(lower, "error") || strings.Contains(lower, "abort") {
		t.Fatalf("pgbench through the upgrades: %v\n%s", b.err, out)
	}
	done := pgbenchDone.FindStringSubmatch(out)
	tps := pgbenchTPS.FindStringSubmatch(out)
	if done == nil || tps == nil {
		t.Fatalf("pgbench printed no summary:\n%s", out)
	}
	if n, _ := strconv.Atoi(done[1]); n < 100 {
		t.Errorf("pgbench processed only %d transactions: the test did not test\n%s", n, out)
	}
	var perSecond []string
	for _, m := range pgbenchProgress.FindAllStringSubmatch(out, -1) {
		perSecond = append(perSecond, m[1]+" tps/"+m[2]+" ms")
	}
	t.Logf("pgbench TPC-B -c 4: %s transactions, %s tps overall, each second: %s", done[1], tps[1], strings.Join(perSecond, ", "))
}

// logUpgrades reads every process's log lines and logs, per upgrade, the time from the new
// process's start to the old one's "upgrade: done" and the connections handed over; it
// wants five upgrades, each taking over at least the held connections (minHeld).
func logUpgrades(t *testing.T, g *upgradeGateway, minHeld int) {
	t.Helper()
	whole, err := os.ReadFile(g.log)
	if err != nil {
		t.Fatal(err)
	}
	var started time.Time
	var spans []string
	var taken []int
	for _, line := range strings.Split(string(whole), "\n") {
		var rec struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			Pairs int       `json:"pairs"`
			Sent  int       `json:"pairs_sent"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec.Msg {
		case "upgrade: new process started":
			started = rec.Time
		case "upgrade: took over":
			taken = append(taken, rec.Pairs)
		case "upgrade: done":
			spans = append(spans, fmt.Sprintf("%v (%d sent)", rec.Time.Sub(started).Round(time.Millisecond), rec.Sent))
		}
	}
	t.Logf("upgrades, new process start → old process done: %s; connections taken over: %v", strings.Join(spans, ", "), taken)
	if len(taken) != loadUpgrades {
		t.Fatalf("%d upgrades logged taking connections over, want %d: %v", len(taken), loadUpgrades, taken)
	}
	var short []error
	for i, n := range taken {
		if n < minHeld {
			short = append(short, fmt.Errorf("upgrade %d took %d over", i+1, n))
		}
	}
	if len(short) > 0 {
		t.Errorf("want the %d held connections taken over by every upgrade: %v", minHeld, errors.Join(short...))
	}
}
