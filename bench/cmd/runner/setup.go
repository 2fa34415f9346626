package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/snigate/snigate/bench/internal/load"
	"github.com/snigate/snigate/bench/internal/peers"
	"github.com/snigate/snigate/bench/internal/pgsrv"
	"github.com/snigate/snigate/bench/internal/proc"
	"github.com/snigate/snigate/bench/internal/wire"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

func (e *env) setup(want func(string) bool) error {
	var err error
	if e.work, err = os.MkdirTemp("", "snigate-bench-"); err != nil {
		return err
	}
	os.Chmod(e.work, 0o755) // PostgreSQL (user postgres) and nginx workers read below it
	log.Printf("work folder %s, mode %s, %d rounds", e.work, e.mode, e.rounds)

	if e.ca, err = fixture.NewCA(); err != nil {
		return err
	}
	e.roots = e.ca.Pool()
	if e.tlsCert, err = e.ca.Issue(sniTLS); err != nil {
		return err
	}
	if e.termCert, err = e.ca.Issue(sniTerm); err != nil {
		return err
	}
	if e.pgCt, err = e.ca.Issue(sniPG); err != nil {
		return err
	}
	// The backend reads its files itself; the peers and PostgreSQL get the certificates and
	// write the files they need into their own folders.
	tlsCertFile, tlsKeyFile, err := e.tlsCert.WriteFiles(e.work, "tls", 0o644)
	if err != nil {
		return err
	}
	for _, p := range []*int{&e.port.echo, &e.port.tiny, &e.port.bulk, &e.port.plain, &e.port.tls, &e.port.pg} {
		if *p, err = fixture.FreePort(); err != nil {
			return err
		}
	}

	// Backends on CPU 0.
	be, err := proc.Start("backend", []string{e.bin.backend,
		"--echo", addr(e.port.echo), "--tiny", addr(e.port.tiny), "--bulk", addr(e.port.bulk), "--plain", addr(e.port.plain),
		"--tls", addr(e.port.tls), "--cert", tlsCertFile, "--key", tlsKeyFile,
		"--max-lifetime", "20m"}, proc.Options{CPUs: "0", Dir: e.work, Log: e.path("backend.log")})
	if err != nil {
		return err
	}
	e.track(be)
	hello, _ := wire.ClientHello(sniEcho)
	buf := make([]byte, wire.FlightSize+wire.MsgSize)
	if err := be.WaitFor(10*time.Second, func() error { return load.One(addr(e.port.echo), hello, buf) }); err != nil {
		return err
	}
	if err := load.Probe(addr(e.port.tls), sniTLS, e.roots); err != nil {
		return fmt.Errorf("backend TLS echo: %w", err)
	}

	// PostgreSQL on CPU 0.
	if want("pg") {
		log.Printf("starting PostgreSQL")
		pg, err := pgsrv.Start(e.path("pg"), e.port.pg, e.pgCt, "0")
		if err != nil {
			return fmt.Errorf("postgresql: %w", err)
		}
		e.pg = pg
		e.track(pg.Proc)
		if err := pg.Init(e.p.PGClients); err != nil {
			return fmt.Errorf("pgbench -i: %w", err)
		}
	}

	// The proxies on CPU 1.
	for _, kind := range peers.Kinds {
		if err := e.startProxy(kind); err != nil {
			return err
		}
	}
	if want("logs") {
		for _, kind := range logKinds {
			inst, err := e.newInstance(kind, true)
			if err != nil {
				return err
			}
			if err := e.startInstance(inst); err != nil {
				return err
			}
			e.logged[kind] = inst
		}
	}
	return nil
}

// logKinds are the proxies measured with their access logs on (sniproxy's log is not
// comparable: it logs to syslog only).
var logKinds = []string{"snigate", "haproxy", "nginx"}

// baseRoutes is the route list every proxy serves in the main tests.
func (e *env) baseRoutes() []peers.Route {
	return []peers.Route{
		{Host: sniEcho, Backend: addr(e.port.echo)},
		{Host: sniTiny, Backend: addr(e.port.tiny)},
		{Host: sniBulk, Backend: addr(e.port.bulk)},
		{Host: sniTLS, Backend: addr(e.port.tls)},
		{Host: sniPG, Backend: addr(e.port.pg)},
	}
}

func (e *env) startProxy(kind string) error {
	inst := e.proxies[kind]
	if inst == nil {
		var err error
		if inst, err = e.newInstance(kind, false); err != nil {
			return err
		}
		e.proxies[kind] = inst
	}
	return e.startInstance(inst)
}

// newInstance writes the configuration of one proxy under test: the main tests' one, or
// (accessLog) one with only the passthrough listener and the access log on.
func (e *env) newInstance(kind string, accessLog bool) (*instance, error) {
	pass, err := fixture.FreePort()
	if err != nil {
		return nil, err
	}
	dir := kind
	if accessLog {
		dir += "-log"
	}
	spec := peers.Spec{Dir: e.path(dir), Pass: addr(pass), Routes: e.baseRoutes(), AccessLog: accessLog}
	if kind == "snigate" {
		admin, err := fixture.FreePort()
		if err != nil {
			return nil, err
		}
		spec.Admin = addr(admin)
	}
	if !accessLog {
		if kind != "sniproxy" {
			term, err := fixture.FreePort()
			if err != nil {
				return nil, err
			}
			spec.Term, spec.TermCert = addr(term), e.termCert
			spec.TermRoutes = []peers.Route{{Host: sniTerm, Backend: addr(e.port.plain)}}
		}
		if e.pg != nil && (kind == "haproxy" || kind == "nginx") {
			// The PostgreSQL comparison: these peers cannot answer the SSLRequest, so they
			// forward the whole session unread, which is the least a proxy can do per statement.
			fwd, err := fixture.FreePort()
			if err != nil {
				return nil, err
			}
			spec.Forward, spec.ForwardTo = addr(fwd), addr(e.port.pg)
		}
	}
	bin := ""
	if kind == "snigate" {
		bin = e.bin.snigate
	}
	argv, err := peers.Write(kind, bin, spec)
	if err != nil {
		return nil, err
	}
	return &instance{kind: kind, spec: spec, argv: argv}, nil
}

// startInstance starts inst and proves its data path.
func (e *env) startInstance(inst *instance) error {
	kind := inst.kind
	p, err := e.launch(inst, sniEcho)
	if err != nil {
		return err
	}
	inst.proc = p
	// Prove the data path: the backend's own certificate through passthrough, the proxy's
	// in terminate mode.
	if err := load.Probe(inst.spec.Pass, sniTLS, e.roots); err != nil {
		return fmt.Errorf("%s passthrough: %w", kind, err)
	}
	if inst.spec.Term != "" {
		if err := load.Probe(inst.spec.Term, sniTerm, e.roots); err != nil {
			return fmt.Errorf("%s terminate: %w", kind, err)
		}
	}
	return nil
}

// launch starts inst on CPU 1 and waits until sni is served.
func (e *env) launch(inst *instance, sni string) (*proc.Proc, error) {
	p, err := proc.Start(inst.kind, inst.argv, proc.Options{CPUs: "1", Dir: inst.spec.Dir, Log: filepath.Join(inst.spec.Dir, inst.kind+".log")})
	if err != nil {
		return nil, err
	}
	e.track(p)
	hello, _ := wire.ClientHello(sni)
	buf := make([]byte, wire.FlightSize+wire.MsgSize)
	err = p.WaitFor(60*time.Second, func() error {
		if inst.kind == "snigate" {
			if err := e.readyz(inst); err != nil {
				return err
			}
		}
		return load.One(inst.spec.Pass, hello, buf)
	})
	if err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// stopProxy stops inst and forgets its process.
func (e *env) stopProxy(inst *instance) {
	if inst.proc == nil {
		return
	}
	inst.proc.Stop()
	e.mu.Lock()
	for i, p := range e.running {
		if p == inst.proc {
			e.running = append(e.running[:i], e.running[i+1:]...)
			break
		}
	}
	e.mu.Unlock()
	inst.proc = nil
}

var httpc = &http.Client{Timeout: 5 * time.Second}

func (e *env) readyz(inst *instance) error {
	resp, err := httpc.Get("http://" + inst.spec.Admin + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// metric reads one unlabelled sample from snigate's /metrics.
func metric(admin, name string) (float64, error) {
	resp, err := httpc.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// statusGeneration reads "generation" from snigate's /status, and the size of the answer.
func statusGeneration(admin string) (gen uint64, size int, err error) {
	// With 100 000 routes the answer is tens of megabytes: allow time.
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Get("http://" + admin + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	// The answer holds the whole routing table: find the top-level field without decoding it.
	i := strings.Index(string(b), `"generation":`)
	if i < 0 {
		return 0, len(b), errors.New("/status has no generation")
	}
	rest := strings.TrimLeft(string(b[i+len(`"generation":`):]), " ")
	j := strings.IndexAny(rest, ",\n}")
	gen, err = strconv.ParseUint(strings.TrimSpace(rest[:j]), 10, 64)
	return gen, len(b), err
}

// micro runs the Go micro-benchmarks of the ClientHello parser and the route table.
func (e *env) micro() {
	log.Printf("micro-benchmarks")
	cmd := exec.Command("taskset", "-c", "0", "go", "test", "-run", "^$", "-bench", ".", "-benchmem",
		"-benchtime", e.p.Benchtime, "./internal/clienthello", "./internal/snapshot")
	cmd.Dir = e.repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.res.Error(fmt.Errorf("go test -bench: %v: %s", err, lastLines(string(out), 10)))
		return
	}
	pkg := ""
	for _, line := range strings.Split(string(out), "\n") {
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/snigate/snigate/")
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		m := microLine(f)
		m.Package = pkg
		e.res.Micro = append(e.res.Micro, m)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
