// Command flood measures tenant isolation under attack: a connection flood against tenant
// A's database while tenant B's clients connect and query through the same snigate port.
//
//	go build -o /tmp/flood ./bench/cmd/flood && go build -o /tmp/snigate ./cmd/snigate
//	/tmp/flood --snigate /tmp/snigate [--duration 30s] [--workers 64] [--sources 200] [--json FILE]
//
// Two databases, A's and B's (--backend postgres: private PostgreSQL servers; tls: TLS echo
// servers), on CPU 0, A's at the lowest priority as if it ran elsewhere, behind one snigate
// passthrough port (CPU 1), each routed by its SNI. B's client (this process; run it on CPU
// 0: taskset -c 0) loops: connect (pgx verify-full through the SSLRequest bridge, SELECT 1;
// or a verified TLS handshake and a 16-byte round trip), close, and times each such
// connect-plus-first-query, every fifth one straight to B's database for the machine's floor;
// a second B client holds one connection and times its queries. The flood (a process of its own on snigate's CPU at the lowest priority, as hard as
// that lets it: workers connections in flight, each from one of sources loopback addresses
// 127.1.x.y) opens connections to A's SNI, sends a ClientHello (ALPN postgresql, as pgx's
// direct TLS does), reads what comes for a moment and resets.
//
// Phases, each with B measured throughout:
//
//  1. quiet: no flood (the reference);
//  2. flood, A limited by its AccessPolicy (maxConnections 20, perClient maxConnections 2,
//     30 a minute with a burst of 5): most of the flood is refused at the gateway;
//  3. flood, A without a policy (as every gateway without per-route limits serves it);
//  4. flood from many sources (--many-sources addresses, A limited, snigate's per-client
//     table made small with --access-clients): memory stays bounded, the table evicts.
//
// It reports, per phase: B's connect+query p50/p99 and its ratio to the quiet phase, B's
// established-connection query p99, B's failed connections, the flood's attempts, refusals
// and admissions per second, and snigate's RSS (max, and growth within the phase) and CPU.
// The requirement (docs/performance.md, "Access control"): in phase 2, B's connect+query
// p99 within 2× of phase 1's, no failed B connection, and memory bounded. It is a benchmark
// (bench/), not a test: the numbers are reported, never asserted.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/proc"
	"github.com/snigate/snigate/bench/internal/procstat"
	"github.com/snigate/snigate/bench/internal/wire"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

const (
	sniA = "a.flood.test"
	sniB = "b.flood.test"
)

// policyA is A's AccessPolicy body in the limited phases.
const policyA = `  maxConnections: 20
  perClient: {maxConnections: 2, connectionsPerMinute: 30, burst: 5}`

// Phase is one phase's numbers.
type Phase struct {
	Name     string  `json:"name"`
	Seconds  float64 `json:"seconds"`
	Sources  int     `json:"sources"`
	PolicyOn bool    `json:"policyOn"`
	// B's connect + SELECT 1, each a new connection (ms).
	BConnects   int     `json:"bConnects"`
	BConnectP50 float64 `json:"bConnectP50Ms"`
	BConnectP99 float64 `json:"bConnectP99Ms"`
	// B's connect + SELECT 1 straight to its database, bypassing snigate (ms).
	BDirectP50 float64 `json:"bDirectP50Ms"`
	BDirectP99 float64 `json:"bDirectP99Ms"`
	// B's SELECT 1 on one held connection (ms).
	BQueries   int     `json:"bQueries"`
	BQueryP50  float64 `json:"bQueryP50Ms"`
	BQueryP99  float64 `json:"bQueryP99Ms"`
	BFailures  int64   `json:"bFailures"`
	BFirstFail string  `json:"bFirstFailure,omitempty"`
	// The flood, per second: its connections, those an AccessPolicy refused (snigate's
	// count), those let through to A, those A answered within 50 ms, and failed dials.
	FloodAttempts float64 `json:"floodAttemptsPerSec"`
	FloodRefused  float64 `json:"floodRefusedPerSec"`
	FloodAdmitted float64 `json:"floodAdmittedPerSec"`
	FloodAnswered float64 `json:"floodAnsweredPerSec"`
	FloodErrors   float64 `json:"floodDialErrorsPerSec"`
	// snigate.
	RSSStartMiB   float64 `json:"rssStartMiB"`
	RSSMaxMiB     float64 `json:"rssMaxMiB"`
	RSSEndMiB     float64 `json:"rssEndMiB"`
	CPUPercent    float64 `json:"snigateCPUPercent"`
	Tracked       float64 `json:"accessClientsTracked"`
	Evictions     float64 `json:"accessClientEvictions"`
	RefusedMetric float64 `json:"refusedCountedByReason"`
}

func main() {
	snigate := flag.String("snigate", "", "the snigate binary")
	duration := flag.Duration("duration", 30*time.Second, "each flood phase's length")
	quiet := flag.Duration("quiet", 15*time.Second, "the quiet phase's length")
	workers := flag.Int("workers", 64, "flood connections in flight")
	sources := flag.Int("sources", 200, "flood source addresses (127.1.x.y)")
	many := flag.Int("many-sources", 100000, "flood source addresses in the many-sources phase (0: skip it)")
	manyClients := flag.Int("many-clients", 16384, "snigate's --access-clients in the many-sources phase")
	jsonOut := flag.String("json", "", "write the phases as JSON here")
	kind := flag.String("backend", "postgres", "the databases: postgres (two private PostgreSQL servers; B connects with pgx and runs SELECT 1) or tls (two TLS echo servers; B completes a handshake and one 16-byte round trip)")
	worker := flag.Int("worker", 0, "internal: be the flood generator against this port")
	serveEcho := flag.String("serve-echo", "", "internal: be a TLS echo server on this address, with --cert and --key")
	certFile := flag.String("cert", "", "internal: --serve-echo's certificate")
	keyFile := flag.String("key", "", "internal: --serve-echo's key")
	flag.Parse()
	switch {
	case *worker > 0:
		floodWorker(*worker, *workers, *sources, *duration)
		return
	case *serveEcho != "":
		echoServer(*serveEcho, *certFile, *keyFile)
		return
	}
	if *snigate == "" {
		log.Fatal("--snigate is required")
	}
	work, err := os.MkdirTemp("", "snigate-flood-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	// PostgreSQL runs as the postgres user, which must reach its folder inside.
	if err := os.Chmod(work, 0o755); err != nil {
		log.Fatal(err)
	}

	ca, err := fixture.NewCA()
	if err != nil {
		log.Fatal(err)
	}
	certA, _ := ca.Issue(sniA)
	certB, _ := ca.Issue(sniB)
	ports := freePorts(4)
	var b client
	var stopA, stopB func()
	switch *kind {
	case "postgres":
		stopA = startPostgres(work, "a", ports[0], certA, 19, false)
		stopB = startPostgres(work, "b", ports[1], certB, 0, true)
		b = &pgClient{ca: ca}
	case "tls":
		stopA = startEcho(work, "a", ports[0], certA, 19)
		stopB = startEcho(work, "b", ports[1], certB, 0)
		b = &tlsClient{ca: ca}
	default:
		log.Fatalf("--backend %q: want postgres or tls", *kind)
	}
	defer stopA()
	defer stopB()
	port, admin := ports[2], fmt.Sprintf("127.0.0.1:%d", ports[3])
	cfg := filepath.Join(work, "config")
	os.MkdirAll(cfg, 0o755)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(cfg, name), []byte(body), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	write("gateway.yaml", fixture.Docs(
		fixture.GatewayYAML("default", "gw", fixture.Passthrough("pg", port, "")),
		fixture.TLSRouteYAML(fixture.TLSRoute{Namespace: "default", Name: "a", Gateway: "gw", Section: "pg", Hostnames: []string{sniA}, Backends: []fixture.BackendRef{fixture.To("a", 5432)}}),
		fixture.TLSRouteYAML(fixture.TLSRoute{Namespace: "default", Name: "b", Gateway: "gw", Section: "pg", Hostnames: []string{sniB}, Backends: []fixture.BackendRef{fixture.To("b", 5432)}}),
		fixture.ServiceYAML("default", "a", 5432, ports[0], "127.0.0.1"),
		fixture.ServiceYAML("default", "b", 5432, ports[1], "127.0.0.1"),
	))
	setPolicy := func(on bool) {
		body := ""
		if on {
			body = "apiVersion: snigate.dev/v1alpha1\nkind: AccessPolicy\nmetadata: {name: a, namespace: default}\n" +
				"spec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: TLSRoute, name: a}]\n" + policyA + "\n"
		}
		write("access.yaml", body)
	}
	start := func(clients int) *proc.Proc {
		argv := []string{*snigate, "serve", "-f", cfg, "--admin", admin, "--log-format", "json", "--access-log=false",
			"--access-clients", fmt.Sprint(clients)}
		p, err := proc.Start("snigate", argv, proc.Options{CPUs: "1", Dir: work, Log: filepath.Join(work, "snigate.log")})
		if err != nil {
			log.Fatal(err)
		}
		if err := p.WaitFor(20*time.Second, func() error { return ready(admin) }); err != nil {
			log.Fatalf("snigate not ready: %v\n%s", err, p.Tail())
		}
		return p
	}
	setPolicy(true)
	sn := start(0)
	m := &measure{port: port, direct: ports[1], b: b, admin: admin, kind: *kind}

	var phases []Phase
	run := func(name string, floodFor time.Duration, nsrc int, policy bool, p *proc.Proc) {
		log.Printf("phase %s: %v, %d flood sources, policy on A: %v", name, floodFor, nsrc, policy)
		ph := m.phase(name, floodFor, *workers, nsrc, p)
		ph.PolicyOn = policy
		phases = append(phases, ph)
		log.Printf("phase %s: B connect+query p50 %.2f ms p99 %.2f ms (%d), held query p99 %.2f ms, B failures %d; flood %.0f/s (%.0f refused, %.0f admitted); RSS max %.1f MiB (+%.1f)",
			name, ph.BConnectP50, ph.BConnectP99, ph.BConnects, ph.BQueryP99, ph.BFailures, ph.FloodAttempts, ph.FloodRefused, ph.FloodAdmitted, ph.RSSMaxMiB, ph.RSSEndMiB-ph.RSSStartMiB)
	}
	m.quiet = *quiet
	run("quiet", 0, 0, true, sn)
	run("flood, A limited", *duration, *sources, true, sn)
	if *many > 0 {
		sn.Stop()
		sn = start(*manyClients)
		run(fmt.Sprintf("flood from %d sources, A limited, --access-clients %d", *many, *manyClients), *duration/2, *many, true, sn)
	}
	// Without a policy last: the flood that reaches A's database leaves it busy a while.
	gen := generation(admin)
	setPolicy(false)
	waitGeneration(admin, gen)
	run("flood, A without a policy", *duration, *sources, false, sn)
	sn.Stop()

	quietP99 := phases[0].BConnectP99
	fmt.Printf("\n| phase | B through snigate: connect+query p50 / p99 (ms) | p99 ÷ quiet | B direct p50 / p99 (ms) | B held query p99 (ms) | B failed | flood attempts/s | refused by snigate/s | let through to A/s | snigate RSS max (MiB) | clients tracked / evicted | snigate CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range phases {
		fmt.Printf("| %s | %.2f / %.2f | ×%.2f | %.2f / %.2f | %.2f | %d | %.0f | %.0f | %.0f | %.1f | %.0f / %.0f | %.0f %% |\n", p.Name, p.BConnectP50, p.BConnectP99,
			p.BConnectP99/quietP99, p.BDirectP50, p.BDirectP99, p.BQueryP99, p.BFailures, p.FloodAttempts, p.FloodRefused, p.FloodAdmitted, p.RSSMaxMiB,
			p.Tracked, p.Evictions, p.CPUPercent)
	}
	if *jsonOut != "" {
		out, _ := json.MarshalIndent(map[string]any{"time": time.Now().UTC(), "backend": *kind, "workers": *workers, "phases": phases}, "", "  ")
		if err := os.WriteFile(*jsonOut, append(out, '\n'), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// measure runs phases against one set-up.
type measure struct {
	port   int // snigate's
	direct int // B's own
	b      client
	admin  string
	kind   string
	quiet  time.Duration
}

func (m *measure) phase(name string, floodFor time.Duration, workers, sources int, sn *proc.Proc) Phase {
	length := floodFor
	if length == 0 {
		length = m.quiet
	}
	ph := Phase{Name: name, Seconds: length.Seconds(), Sources: sources}
	ctx, cancel := context.WithTimeout(context.Background(), length)
	defer cancel()
	pids := procstat.Tree(sn.Pid())
	ph.RSSStartMiB = mib(procstat.RSS(pids))
	cpu0 := procstat.CPU(pids)
	refused0 := metric(m.admin, `snigate_rejected_connections_total{reason=~"client_not_allowed|route_connection_limit|client_connection_limit|client_rate_limited"`)
	evict0 := metric(m.admin, "snigate_access_client_evictions_total")
	var wg sync.WaitGroup
	var gen *exec.Cmd
	var genOut bytes.Buffer
	if floodFor > 0 {
		// The generator is a process of its own at the lowest priority, on snigate's CPU 1: the
		// attack's network processing lands on the gateway's host (its NIC's interrupts and
		// softirqs), never on B's database or client elsewhere, which here have CPU 0 to
		// themselves. It floods as hard as snigate leaves it CPU, and its own user-space work
		// (which a remote attacker would not add) only makes the gateway's side harder.
		self, err := os.Executable()
		if err != nil {
			log.Fatal(err)
		}
		gen = exec.Command("nice", "-n", "19", "taskset", "-c", "1", self, "--worker", fmt.Sprint(m.port),
			"--workers", fmt.Sprint(workers), "--sources", fmt.Sprint(sources), "--duration", floodFor.String())
		gen.Stdout, gen.Stderr = &genOut, os.Stderr
		if err := gen.Start(); err != nil {
			log.Fatal(err)
		}
	}
	// RSS sampled every 250 ms.
	var rssMax atomic.Int64
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			if r := procstat.RSS(procstat.Tree(sn.Pid())); r > rssMax.Load() {
				rssMax.Store(r)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	// B: a held connection's queries, and new connections, at once.
	end := time.Now().Add(length)
	var queries, connects, direct []time.Duration
	var failures atomic.Int64
	var firstFail atomic.Value
	phaseStart := time.Now()
	fail := func(err error) {
		if failures.Add(1) == 1 {
			firstFail.Store(fmt.Sprintf("after %v: %v", time.Since(phaseStart).Round(time.Millisecond), err))
		}
	}
	// Every operation of B has its own timeout, not the phase's: one still running at the
	// phase's end finishes and counts.
	wg.Go(func() {
		query, closeConn, err := m.b.open(m.port)
		if err != nil {
			fail(err)
			return
		}
		defer closeConn()
		for time.Now().Before(end) {
			t := time.Now()
			if err := query(); err != nil {
				fail(err)
				return
			}
			queries = append(queries, time.Since(t))
			time.Sleep(2 * time.Millisecond)
		}
	})
	// Every fifth of B's connections goes straight to its database: what the machine gives B
	// without snigate in the way, under the same flood (the phase's floor).
	began := time.Now()
	for i := 0; time.Now().Before(end); i++ {
		port := m.port
		if i%5 == 4 {
			port = m.direct
		}
		t := time.Now()
		err := m.b.once(port)
		switch {
		case err != nil:
			fail(err)
		case port == m.port:
			connects = append(connects, time.Since(t))
		default:
			direct = append(direct, time.Since(t))
		}
	}
	wg.Wait()
	elapsed := time.Since(began).Seconds()
	var fl struct{ Attempts, Refused, Admitted, Errors int64 }
	if gen != nil {
		if err := gen.Wait(); err != nil {
			log.Fatalf("flood generator: %v", err)
		}
		if err := json.Unmarshal(genOut.Bytes(), &fl); err != nil {
			log.Fatalf("flood generator's counts %q: %v", genOut.String(), err)
		}
	}
	ph.RSSMaxMiB = mib(rssMax.Load())
	ph.RSSEndMiB = mib(procstat.RSS(procstat.Tree(sn.Pid())))
	ph.CPUPercent = float64(procstat.CPU(procstat.Tree(sn.Pid()))-cpu0) / 1e9 / elapsed * 100
	ph.BConnects, ph.BQueries = len(connects), len(queries)
	ph.BConnectP50, ph.BConnectP99 = quantile(connects, 0.5), quantile(connects, 0.99)
	ph.BQueryP50, ph.BQueryP99 = quantile(queries, 0.5), quantile(queries, 0.99)
	ph.BDirectP50, ph.BDirectP99 = quantile(direct, 0.5), quantile(direct, 0.99)
	ph.BFailures = failures.Load()
	if s, ok := firstFail.Load().(string); ok {
		ph.BFirstFail = s
	}
	ph.FloodAttempts = float64(fl.Attempts) / elapsed
	ph.FloodAnswered = float64(fl.Admitted) / elapsed
	ph.FloodErrors = float64(fl.Errors) / elapsed
	ph.Tracked = metric(m.admin, "snigate_access_clients_tracked")
	ph.Evictions = metric(m.admin, "snigate_access_client_evictions_total") - evict0
	ph.RefusedMetric = metric(m.admin, `snigate_rejected_connections_total{reason=~"client_not_allowed|route_connection_limit|client_connection_limit|client_rate_limited"`) - refused0
	ph.FloodRefused = ph.RefusedMetric / elapsed
	ph.FloodAdmitted = max(0, ph.FloodAttempts-ph.FloodRefused)
	return ph
}

type floodCounts struct{ attempts, refused, admitted, errors atomic.Int64 }

// floodWorker is the generator process: workers connections in flight against A's SNI on
// port for d, then its counts as JSON on standard output.
func floodWorker(port, workers, sources int, d time.Duration) {
	hello, err := wire.ClientHelloALPN(sniA, "postgresql")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var fl floodCounts
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { flood(ctx, port, hello, sources, &next, &fl) })
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(map[string]int64{"attempts": fl.attempts.Load(), "refused": fl.refused.Load(),
		"admitted": fl.admitted.Load(), "errors": fl.errors.Load()})
}

// flood opens connections to A until ctx ends: each from the next of sources addresses,
// a ClientHello written, up to 50 ms of reading (a refusal closes at once, an admitted one
// gets A's ServerHello), then a reset.
func flood(ctx context.Context, port int, hello []byte, sources int, next *atomic.Int64, fl *floodCounts) {
	to := fmt.Sprintf("127.0.0.1:%d", port)
	buf := make([]byte, 4096)
	for ctx.Err() == nil {
		i := next.Add(1) % int64(sources)
		src := netip.AddrFrom4([4]byte{127, 1 + byte(i>>16), byte(i >> 8), byte(i)})
		fl.attempts.Add(1)
		// IP_BIND_ADDRESS_NO_PORT: the port is picked at connect time, by the whole 4-tuple.
		// Without it, binding to each of 100 000 addresses fills the kernel's table of bound
		// ports, whose long chains then slow every connect on the machine (B's included):
		// remote attackers' binds never land in this host's tables.
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, 24 /* IP_BIND_ADDRESS_NO_PORT */, 1)
			})
			return serr
		}}
		nc, err := d.Dial("tcp", to)
		if err != nil {
			fl.errors.Add(1)
			time.Sleep(time.Millisecond)
			continue
		}
		c := nc.(*net.TCPConn)
		c.Write(hello)
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, _ := c.Read(buf)
		if n > 0 {
			fl.admitted.Add(1)
		} else {
			fl.refused.Add(1)
		}
		c.SetLinger(0)
		c.Close()
	}
}

func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))]) / 1e6
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func freePorts(n int) []int {
	var out []int
	for range n {
		p, err := fixture.FreePort()
		if err != nil {
			log.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func ready(admin string) error {
	resp, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz %d", resp.StatusCode)
	}
	return nil
}

// metric sums the samples of a metric whose line starts with prefix (a name, or a name and
// the start of its labels with one regular-expression label match, reason=~"a|b").
func metric(admin, prefix string) float64 {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var body strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		body.Write(buf[:n])
		if err != nil {
			break
		}
	}
	name, labels, _ := strings.Cut(prefix, "{")
	var want []string
	if k, v, ok := strings.Cut(labels, `=~"`); ok {
		for _, alt := range strings.Split(strings.TrimSuffix(v, `"`), "|") {
			want = append(want, k+`="`+alt+`"`)
		}
	}
	sum := 0.0
	for _, line := range strings.Split(body.String(), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if len(want) > 0 && !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(line, w) }) {
			continue
		}
		var v float64
		fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
		sum += v
	}
	return sum
}

func generation(admin string) float64 { return metric(admin, "snigate_config_generation") }

func waitGeneration(admin string, after float64) {
	deadline := time.Now().Add(20 * time.Second)
	for generation(admin) <= after {
		if time.Now().After(deadline) {
			log.Fatal("snigate did not load the new configuration")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
