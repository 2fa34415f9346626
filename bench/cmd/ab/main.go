// Command ab measures one test of the benchmark against a few proxies, or two builds of
// snigate, in many alternating rounds: the tool for the before-and-after numbers of a change
// to the data path, which a full bench/run.sh is too coarse and too slow for.
//
//	go build -o /tmp/ab ./bench/cmd/ab && go build -o /tmp/ ./bench/cmd/loadgen ./bench/cmd/backend
//	/tmp/ab --loadgen /tmp/loadgen --backend /tmp/backend --test latency --rounds 9 \
//	    direct before=/tmp/snigate-main after=bin/snigate nginx
//
// A target is direct (no proxy), haproxy, nginx, sniproxy, or NAME=PATH: a snigate binary
// (NAME=PATH@access: with peers.BenchAccess, an AccessPolicy, on every route).
// The layout is the harness's: the backend and the load generator on CPU 0, each proxy on
// CPU 1 (moved to CPU 0 for the latency test, as bench/run.sh does), all started once and
// measured in turn, in an order rotated every round. Each round prints one line per target;
// the end prints, per metric, the median (min–max) of every target and the median of its
// per-round ratios to the first proxy target.
//
// Tests: latency (one connection, 64-byte round trips), conns, tiny, fin, last (new
// connections of each shape of load.Shapes, 16 at a time), rr (many connections, small
// requests), bulk (one download), pg and pgs (pgbench TPC-B-like and -S against a private
// PostgreSQL on CPU 0, through snigate's SSLRequest bridge and through HAProxy and nginx
// forwarding plain TCP, as the harness runs it; with each SQL statement's mean latency,
// from pgbench -r), term (full TLS 1.3 handshakes on a terminate listener, each followed
// by a 16-byte echo to a plaintext backend; haproxy, nginx and snigate only). --access-log
// turns on every proxy's access log, written as the harness's "logs" test writes it
// (haproxy, nginx and snigate only; sniproxy logs to syslog only). --warm N passes N new
// connections through every proxy before the first round, unmeasured: a fresh snigate
// writes its first 64 MiB of garbage to pages the kernel has to fault in (serve's
// collector headroom), a process that has served a while reuses them (--warm-only NAME,...
// warms only those). Besides each test's own numbers it reports the proxy's CPU time, its
// context switches (voluntary and not, from /proc) and its page faults per operation.
// --syscalls adds its system calls and epoll waits per operation (perf stat; counting
// slows every call, so it shifts the rates of the proxies that make more). --cpu0, for rr,
// pg and pgs, whose rate CPU 0 bounds, counts CPU 0's context switches and the
// inter-processor interrupts it sends per operation ("cpu0 cs/op", "cpu0 IPIs/op"): a
// proxy whose loop sleeps is woken by an IPI from the client's or the backend's CPU, which
// pays for it. --profile records each proxy with perf while it is measured and adds its
// CPU per operation by kind of work ("prof accept µs", "prof send µs", ...;
// bench/internal/kprofile), the kernel's sorted by system call: the table that shows where
// two proxies' costs for the same connections differ. --profile-cpu0, for rr, pg and pgs,
// does the same for CPU 0 as a whole, the clients' and the backend's work, idle left out
// ("cpu0 prof send µs", ...): what a proxy makes the CPU that bounds their rate do. Needs
// root for nothing but the peers' default paths; runs as any user that may start them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/kprofile"
	"github.com/snigate/snigate/bench/internal/load"
	"github.com/snigate/snigate/bench/internal/peers"
	"github.com/snigate/snigate/bench/internal/pgsrv"
	"github.com/snigate/snigate/bench/internal/proc"
	"github.com/snigate/snigate/bench/internal/procstat"
	"github.com/snigate/snigate/bench/internal/wire"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

const (
	sniEcho = "echo.bench.test"
	sniTiny = "tiny.bench.test"
	sniBulk = "bulk.bench.test"
	sniPG   = "pg.bench.test"
	sniTerm = "term.bench.test"
)

type target struct {
	name, kind, bin string
	spec            peers.Spec
	proc            *proc.Proc
}

// sample is one target's numbers in one round, by metric.
type sample map[string]float64

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("ab: ")
	loadgen := flag.String("loadgen", "", "loadgen binary (bench/cmd/loadgen)")
	backend := flag.String("backend", "", "backend binary (bench/cmd/backend)")
	test := flag.String("test", "latency", "latency, conns, tiny, fin, last, rr, bulk, pg, pgs or term")
	rounds := flag.Int("rounds", 7, "rounds")
	n := flag.Int("n", 0, "operations per measurement (default: the full harness's)")
	conc := flag.Int("c", 0, "concurrent connections (conns: 16, rr: 50)")
	rrTime := flag.Duration("rr-time", 2*time.Second, "rr: how long each measurement sends")
	flags := flag.String("snigate-flags", "", "extra serve flags for every snigate target, space-separated")
	sys := flag.Bool("syscalls", false, "count each proxy's system calls and epoll waits per operation (perf stat)")
	cpu0 := flag.Bool("cpu0", false, "rr, pg, pgs: count CPU 0's context switches and the IPIs it sends per operation (perf stat -a -C 0)")
	profileCPU0 := flag.Bool("profile-cpu0", false, "rr, pg, pgs: profile CPU 0, where the clients and the backend run, while each proxy is measured (perf record -a -C 0 -g, idle left out) and report CPU 0's time per operation by kind of work (\"cpu0 prof ...\")")
	profile := flag.Bool("profile", false, "profile each proxy while it is measured (perf record -g) and report its CPU per operation by kind of work; the sampling costs every proxy CPU of its own, so compare proxies within one run")
	proxyCPUs := flag.String("proxy-cpus", "", "move each proxy to these CPUs while it is measured (taskset list; default: CPU 1, CPU 0 for latency)")
	keep := flag.Bool("keep", false, "keep the work folder")
	accessLog := flag.Bool("access-log", false, "every proxy with its access log on (haproxy, nginx, snigate)")
	warm := flag.Int("warm", 0, "before the first round, pass this many new connections through every proxy, unmeasured (a process that has served a while: snigate's heap past its first collection)")
	warmOnly := flag.String("warm-only", "", "with --warm: warm up only these targets (comma-separated names), so that one run compares a fresh process with a warmed one")
	flag.Parse()
	if *warmOnly != "" && *warm == 0 {
		log.Fatal("--warm-only names the targets --warm warms: give --warm N too")
	}
	if (*cpu0 || *profileCPU0) && !cpu0Bound(*test) {
		log.Fatalf("--cpu0 and --profile-cpu0 measure CPU 0 for the tests its busy time bounds (rr, pg, pgs), not %s", *test)
	}
	if *loadgen == "" || *backend == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: ab --loadgen BIN --backend BIN [--test T] [--rounds N] TARGET...")
		os.Exit(2)
	}
	work, err := os.MkdirTemp("", "snigate-ab-")
	if err != nil {
		log.Fatal(err)
	}
	os.Chmod(work, 0o755)
	if !*keep {
		defer os.RemoveAll(work)
	}
	var running []*proc.Proc
	defer func() {
		for _, p := range running {
			p.Stop()
		}
	}()

	ports := map[string]int{}
	for _, k := range []string{"echo", "tiny", "bulk", "plain"} {
		if ports[k], err = fixture.FreePort(); err != nil {
			log.Fatal(err)
		}
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	be, err := proc.Start("backend", []string{*backend, "--echo", addr(ports["echo"]), "--tiny", addr(ports["tiny"]),
		"--bulk", addr(ports["bulk"]), "--plain", addr(ports["plain"]), "--max-lifetime", "2h"}, proc.Options{CPUs: "0", Dir: work, Log: filepath.Join(work, "backend.log")})
	if err != nil {
		log.Fatal(err)
	}
	running = append(running, be)
	hello, _ := wire.ClientHello(sniEcho)
	buf := make([]byte, wire.FlightSize+wire.MsgSize)
	if err := be.WaitFor(10*time.Second, func() error { return load.One(addr(ports["echo"]), hello, buf) }); err != nil {
		log.Fatal(err)
	}
	routes := []peers.Route{
		{Host: sniEcho, Backend: addr(ports["echo"])},
		{Host: sniTiny, Backend: addr(ports["tiny"])},
		{Host: sniBulk, Backend: addr(ports["bulk"])},
	}
	pg := *test == "pg" || *test == "pgs"
	if pg {
		if ports["pg"], err = fixture.FreePort(); err != nil {
			log.Fatal(err)
		}
		ca, err := fixture.NewCA()
		if err != nil {
			log.Fatal(err)
		}
		cert, err := ca.Issue(sniPG)
		if err != nil {
			log.Fatal(err)
		}
		srv, err := pgsrv.Start(filepath.Join(work, "pg"), ports["pg"], cert, "0")
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Stop()
		if err := srv.Init(8); err != nil {
			log.Fatal(err)
		}
		routes = append(routes, peers.Route{Host: sniPG, Backend: addr(ports["pg"])})
	}

	term := *test == "term"
	var termCert *fixture.Cert
	if term {
		ca, err := fixture.NewCA()
		if err != nil {
			log.Fatal(err)
		}
		if termCert, err = ca.Issue(sniTerm); err != nil {
			log.Fatal(err)
		}
	}

	var targets []*target
	for _, a := range flag.Args() {
		t := &target{name: a, kind: a}
		access := ""
		if name, bin, ok := strings.Cut(a, "="); ok {
			t.name, t.kind, t.bin = name, "snigate", bin
			if b, ok := strings.CutSuffix(bin, "@access"); ok {
				t.bin, access = b, peers.BenchAccess
			}
		}
		if t.kind != "direct" {
			pass, err := fixture.FreePort()
			if err != nil {
				log.Fatal(err)
			}
			t.spec = peers.Spec{Dir: filepath.Join(work, t.name), Pass: addr(pass), Routes: routes, AccessLog: *accessLog, Access: access}
			if *accessLog && t.kind == "sniproxy" {
				log.Fatalf("%s: no comparable access log (sniproxy logs to syslog only)", t.name)
			}
			if pg && t.kind != "snigate" {
				if t.kind != "haproxy" && t.kind != "nginx" {
					log.Fatalf("%s cannot carry a PostgreSQL session", t.name)
				}
				fwd, err := fixture.FreePort()
				if err != nil {
					log.Fatal(err)
				}
				t.spec.Forward, t.spec.ForwardTo = addr(fwd), addr(ports["pg"])
			}
			if term {
				if t.kind != "haproxy" && t.kind != "nginx" && t.kind != "snigate" {
					log.Fatalf("%s cannot terminate TLS", t.name)
				}
				tp, err := fixture.FreePort()
				if err != nil {
					log.Fatal(err)
				}
				t.spec.Term, t.spec.TermCert = addr(tp), termCert
				t.spec.TermRoutes = []peers.Route{{Host: sniTerm, Backend: addr(ports["plain"])}}
			}
			if t.kind == "snigate" {
				admin, err := fixture.FreePort()
				if err != nil {
					log.Fatal(err)
				}
				t.spec.Admin = addr(admin)
				t.spec.SnigateFlags = strings.Fields(*flags)
			}
			argv, err := peers.Write(t.kind, t.bin, t.spec)
			if err != nil {
				log.Fatal(err)
			}
			p, err := proc.Start(t.name, argv, proc.Options{CPUs: "1", Dir: t.spec.Dir, Log: filepath.Join(t.spec.Dir, "out.log")})
			if err != nil {
				log.Fatal(err)
			}
			running = append(running, p)
			if err := p.WaitFor(30*time.Second, func() error { return load.One(t.spec.Pass, hello, buf) }); err != nil {
				log.Fatalf("%s: %v\n%s", t.name, err, p.Tail())
			}
			if term {
				if err := p.WaitFor(30*time.Second, func() error {
					r := load.Handshakes(t.spec.Term, sniTerm, 1, 1, 5*time.Second)
					if r.OK != 1 {
						return fmt.Errorf("terminate: %v", r.Errors)
					}
					return nil
				}); err != nil {
					log.Fatalf("%s: %v\n%s", t.name, err, p.Tail())
				}
			}
			t.proc = p
		}
		targets = append(targets, t)
	}

	if *warm > 0 {
		for _, t := range targets {
			if t.proc == nil || *warmOnly != "" && !slices.Contains(strings.Split(*warmOnly, ","), t.name) {
				continue
			}
			var cr load.ConnsResult
			if err := runLoadgen(*loadgen, &cr, "conns", "--addr", t.spec.Pass, "--sni", sniEcho, "-n", strconv.Itoa(*warm), "-c", "16", "--max", "240s"); err != nil {
				log.Fatalf("%s: warm-up: %v", t.name, err)
			}
			log.Printf("%s: warmed up with %d connections", t.name, cr.OK)
		}
	}
	m := &measurer{loadgen: *loadgen, test: *test, n: *n, conc: *conc, rrTime: *rrTime, ports: ports, syscalls: *sys, cpu0: *cpu0, profile: *profile, profileCPU0: *profileCPU0, work: work, proxyCPUs: *proxyCPUs}
	results := map[string][]sample{}
	for r := range *rounds {
		k := r % len(targets)
		order := append(append([]*target{}, targets[k:]...), targets[:k]...)
		for _, t := range order {
			s, err := m.measure(t)
			if err != nil {
				log.Fatalf("round %d, %s: %v", r+1, t.name, err)
			}
			results[t.name] = append(results[t.name], s)
			log.Printf("round %d %-10s %s", r+1, t.name, s)
		}
	}
	report(targets, results)
}

type measurer struct {
	syscalls bool
	cpu0     bool
	profile  bool
	// profileCPU0: record CPU 0 as a whole (rr, pg, pgs), the clients' and backend's work.
	profileCPU0 bool
	work        string // where --profile's recordings go
	proxyCPUs   string
	loadgen     string
	test        string
	n, conc     int
	rrTime      time.Duration
	ports       map[string]int
}

func (m *measurer) measure(t *target) (sample, error) {
	a := "127.0.0.1:"
	pid := 0
	if t.proc != nil {
		a, pid = t.spec.Pass, t.proc.Pid()
	}
	port := func(k string) string {
		if pid == 0 {
			return a + strconv.Itoa(m.ports[k])
		}
		return a
	}
	def := func(v, d int) string {
		if v > 0 {
			return strconv.Itoa(v)
		}
		return strconv.Itoa(d)
	}
	var tree []int
	if pid > 0 {
		tree = procstat.Tree(pid)
	}
	s := sample{}
	var ops float64
	var args []string
	var out any
	var lat load.LatencyResult
	var cr load.ConnsResult
	var rr load.RRResult
	var bulk load.BulkResult
	var tps float64
	var stmts map[string]float64
	var run func() error // the measured work: the load generator unless a test sets it
	switch m.test {
	case "pg", "pgs":
		port := m.ports["pg"]
		if pid > 0 {
			a := t.spec.Forward
			if t.kind == "snigate" {
				a = t.spec.Pass
			}
			port, _ = strconv.Atoi(a[strings.LastIndexByte(a, ':')+1:])
		}
		run = func() (err error) {
			tps, stmts, err = pgbench(port, m.test == "pgs")
			return err
		}
	case "latency":
		args = []string{"latency", "--addr", port("echo"), "--sni", sniEcho, "-n", def(m.n, 8000)}
		out = &lat
	case "conns", "tiny", "fin", "last":
		shape, sni, k := "std", sniEcho, "echo"
		if m.test != "conns" {
			shape = m.test
		}
		if m.test == "tiny" {
			sni, k = sniTiny, "tiny"
		}
		args = []string{"conns", "--addr", port(k), "--sni", sni, "--shape", shape, "-n", def(m.n, 6000), "-c", def(m.conc, 16), "--max", "60s"}
		out = &cr
	case "rr":
		args = []string{"rr", "--addr", port("echo"), "--sni", sniEcho, "-c", def(m.conc, 50), "-n", "10000000", "--max", m.rrTime.String()}
		out = &rr
	case "bulk":
		args = []string{"bulk", "--addr", port("bulk"), "--sni", sniBulk, "--bytes", def(m.n, 1<<30)}
		out = &bulk
	case "term":
		if pid == 0 {
			return nil, fmt.Errorf("%s cannot terminate TLS", t.name)
		}
		args = []string{"handshake", "--addr", t.spec.Term, "--sni", sniTerm, "-n", def(m.n, 1500), "-c", def(m.conc, 16), "--max", "60s"}
		out = &cr
	default:
		return nil, fmt.Errorf("unknown test %q", m.test)
	}
	unpin, err := m.pinFor(tree)
	if err != nil {
		return nil, err
	}
	defer unpin()
	var counts func() map[string]float64
	if m.syscalls && pid > 0 {
		var err error
		if counts, err = perfStat(perfEvents, "-p", pidList(tree)); err != nil {
			return nil, err
		}
	}
	var cpu0Counts func() map[string]float64
	if m.cpu0 { // main allows it for the tests CPU 0 bounds only
		var err error
		if cpu0Counts, err = perfStat(cpu0Events, "-a", "-C", "0"); err != nil {
			return nil, err
		}
	}
	var prof func() (kprofile.Counts, error)
	if m.profile && pid > 0 {
		if prof, err = perfRecord([]string{"-p", pidList(tree)}, filepath.Join(m.work, t.name+".perf.data")); err != nil {
			return nil, err
		}
	}
	var prof0 func() (kprofile.Counts, error)
	if m.profileCPU0 {
		if prof0, err = perfRecord([]string{"-a", "-C", "0"}, filepath.Join(m.work, t.name+".cpu0.perf.data"), "swapper"); err != nil {
			return nil, err
		}
	}
	cpu0, cs0, busy0, us0, pf0 := procstat.CPU(tree), switches(tree), cpuBusy(), procstat.UserSys(tree), procstat.Faults(tree)
	if run == nil {
		run = func() error { return runLoadgen(m.loadgen, out, args...) }
	}
	if err := run(); err != nil {
		return nil, err
	}
	cpu, cs, busy, pf := procstat.CPU(tree)-cpu0, switches(tree)-cs0, cpuBusy(), procstat.Faults(tree)-pf0
	// The kernel's share scales the precise schedstat CPU into "kernel/op", since utime and
	// stime come in 10 ms ticks. A lower bound: a tick that falls due while the kernel
	// returns from a system call counts as user time (a profile tells them apart:
	// bench/results/notes.md).
	kernel := procstat.UserSys(tree).KernelShare(us0)
	var sys, sys0 map[string]float64
	if counts != nil {
		sys = counts()
	}
	if cpu0Counts != nil {
		sys0 = cpu0Counts()
	}
	var classes, classes0 kprofile.Counts
	if prof != nil {
		if classes, err = prof(); err != nil {
			return nil, err
		}
	}
	if prof0 != nil {
		if classes0, err = prof0(); err != nil {
			return nil, err
		}
	}
	switch m.test {
	case "latency":
		s["p50 µs"], s["p99 µs"] = lat.P50, lat.P99
		ops = float64(lat.N)
	case "term":
		s["handshakes/s"] = cr.PerSec
		ops = float64(cr.OK)
		if cr.Failed > 0 {
			return nil, fmt.Errorf("%d handshakes failed: %v", cr.Failed, cr.Errors)
		}
	case "conns", "tiny", "fin", "last":
		s["conns/s"] = cr.PerSec
		ops = float64(cr.OK)
		if cr.Failed > 0 {
			return nil, fmt.Errorf("%d connections failed: %v", cr.Failed, cr.Errors)
		}
	case "rr":
		s["requests/s"], s["p50 µs"], s["p99 µs"] = rr.PerSec, rr.P50, rr.P99
		ops = float64(rr.Requests)
	case "bulk":
		s["GB/s"] = bulk.GBps
		ops = float64(bulk.Bytes) / (1 << 30)
	case "pg", "pgs":
		s["tps"] = tps
		for k, v := range stmts {
			s["stmt "+k+" ms"] = v
		}
		ops = tps * pgSeconds
	}
	if ops > 0 && cpu0Bound(m.test) {
		// rr and pgbench: the rate is bound by CPU 0, where the clients and the backend
		// run; what each operation costs there (busy time, the host's steal left out) is
		// what a proxy does to it.
		s["cpu0/op µs"] = (busy[0] - busy0[0]) / ops * 1e6
		for k, v := range sys0 {
			s[k+"/op"] = v / ops
		}
		if prof0 != nil {
			addProfile(s, "cpu0 prof ", "µs", classes0, 1e6/ops)
		}
	}
	if pid > 0 && ops > 0 {
		unit := "µs"
		scale := 1e3
		if m.test == "bulk" {
			unit, scale = "ms", 1e6
		}
		s["cpu/op "+unit] = float64(cpu) / scale / ops
		s["kernel/op "+unit] = s["cpu/op "+unit] * kernel
		s["cs/op"] = float64(cs) / ops
		s["faults/op"] = float64(pf) / ops
		for k, v := range sys {
			s[k+"/op"] = v / ops
		}
		if prof != nil {
			addProfile(s, "prof ", unit, classes, 1e9/scale/ops)
		}
	}
	return s, nil
}

// cpu0Bound reports whether test's rate is bound by CPU 0, where its clients and backend
// run: rr and the pgbench tests, for which CPU 0's busy time (and with --cpu0 its context
// switches and IPIs) per operation is reported.
func cpu0Bound(test string) bool { return test == "rr" || test == "pg" || test == "pgs" }

// diedOf reports whether err is a process's end by signal sig.
func diedOf(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// pinFor moves a proxy's threads for one measurement: to CPU 0 for the latency test (as the
// harness does), to --proxy-cpus when it is set; the function returns them to CPU 1.
func (m *measurer) pinFor(tree []int) (func(), error) {
	cpus := m.proxyCPUs
	if m.test == "latency" {
		cpus = "0"
	}
	if cpus == "" || len(tree) == 0 {
		return func() {}, nil
	}
	if err := procstat.Pin(tree, cpus); err != nil {
		return nil, err
	}
	return func() { procstat.Pin(tree, "1") }, nil
}

func (s sample) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s %.3g", k, s[k])
	}
	return b.String()
}

// cpuBusy is each CPU's busy time so far in seconds, from /proc/stat: user, nice, system,
// irq and softirq, without idle, iowait and the time the host stole.
func cpuBusy() []float64 {
	b, _ := os.ReadFile("/proc/stat")
	var out []float64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		var sum float64
		for _, i := range []int{1, 2, 3, 6, 7} {
			v, _ := strconv.ParseFloat(f[i], 64)
			sum += v
		}
		out = append(out, sum/100) // USER_HZ
	}
	return out
}

// switches is the voluntary and involuntary context switches of every thread of pids.
func switches(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, e := range ents {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, e.Name()))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "voluntary_ctxt_switches:") || strings.HasPrefix(line, "nonvoluntary_ctxt_switches:") {
					f := strings.Fields(line)
					v, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
					sum += v
				}
			}
		}
	}
	return sum
}

func runLoadgen(bin string, out any, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", append([]string{"-c", "0", bin}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	line := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if jerr := json.Unmarshal([]byte(line), out); jerr != nil && err == nil {
		err = jerr
	}
	if err != nil {
		return fmt.Errorf("loadgen %s: %v: %s %s", strings.Join(args, " "), err, line, stderr.String())
	}
	return nil
}

var tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
