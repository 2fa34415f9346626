// Command runner is the benchmark harness' conductor. bench/run.sh builds the
// binaries and runs it; see docs/performance.md for what it measures and how.
//
//	runner --snigate BIN --loadgen BIN --backend BIN --repo DIR [--smoke] [--rounds N]
//	       [--json FILE] [--md FILE] [--svg FILE] [--chart-link PATH] [--notes FILE]
//
// It starts the backends (CPU 0), a private PostgreSQL (CPU 0), snigate, HAProxy, nginx
// and sniproxy (CPU 1) with configurations generated from one route list, measures in
// interleaved rounds, writes the results as JSON and regenerates the Markdown and SVG.
// It exits non-zero when anything failed to run — never because a target was missed.
package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/peers"
	"github.com/snigate/snigate/bench/internal/pgsrv"
	"github.com/snigate/snigate/bench/internal/proc"
	"github.com/snigate/snigate/bench/internal/report"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// params are the counts of one mode.
type params struct {
	ConnsN, Conc, LatencyN, IdleN, TermN int
	// IdleMaxN is the idle test at the largest count the file-descriptor limit allows
	// (idleAtLimit); 0 in full mode until computed.
	IdleMaxN              int
	ShapeN                int           // connections of each extra shape
	RRConns               int           // the request/response test's connections
	RRTime                time.Duration // and how long it sends
	BulkBytes             int64
	ScaleExact, ScaleWild int
	Reloads               int
	PGSeconds, PGClients  int
	Benchtime             string
	Budget                time.Duration // stop starting new work after this
}

var (
	full = params{ConnsN: 6000, Conc: 16, LatencyN: 8000, IdleN: 3000, TermN: 1500, BulkBytes: 1 << 30,
		ShapeN: 4000, RRConns: 50, RRTime: 2 * time.Second,
		ScaleExact: 100_000, ScaleWild: 1000, Reloads: 3,
		PGSeconds: 3, PGClients: 8, Benchtime: "300ms", Budget: 20 * time.Minute}
	smoke = params{ConnsN: 300, Conc: 16, LatencyN: 300, IdleN: 200, IdleMaxN: 300, TermN: 100, BulkBytes: 32 << 20,
		ShapeN: 200, RRConns: 20, RRTime: 300 * time.Millisecond,
		ScaleExact: 2000, ScaleWild: 20, Reloads: 2,
		PGSeconds: 1, PGClients: 4, Benchtime: "", Budget: 120 * time.Second}
)

// Names every configuration routes.
const (
	sniEcho = "echo.bench.test"
	sniTiny = "tiny.bench.test"
	sniBulk = "bulk.bench.test"
	sniTLS  = "tls.bench.test"
	sniPG   = "pg.bench.test"
	sniTerm = "term.bench.test"
)

type env struct {
	p      params
	mode   string
	rounds int
	work   string
	bin    struct{ snigate, loadgen, backend string }
	repo   string
	res    *report.Results
	start  time.Time

	ca                      *fixture.CA
	roots                   *x509.CertPool
	tlsCert, termCert, pgCt *fixture.Cert
	port                    struct{ echo, tiny, bulk, plain, tls, pg int }

	mu      sync.Mutex
	running []*proc.Proc
	proxies map[string]*instance
	logged  map[string]*instance // the same proxies with their access logs on (test "logs")
	pg      *pgsrv.Server
	scale   *scaleState
}

// instance is one proxy under test.
type instance struct {
	kind string
	spec peers.Spec
	argv []string
	proc *proc.Proc
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	isSmoke := flag.Bool("smoke", false, "one round with tiny counts (CI)")
	rounds := flag.Int("rounds", 0, "rounds (default 5, smoke 1)")
	snigate := flag.String("snigate", "", "snigate binary")
	loadgen := flag.String("loadgen", "", "loadgen binary")
	backend := flag.String("backend", "", "backend binary")
	repo := flag.String("repo", ".", "repository root (for go test -bench)")
	jsonOut := flag.String("json", "", "results JSON to write")
	mdOut := flag.String("md", "", "Markdown to write")
	svgOut := flag.String("svg", "", "SVG chart to write")
	chartLink := flag.String("chart-link", "", "the chart's path as the Markdown links it")
	notes := flag.String("notes", "", "hand-written notes appended to the Markdown")
	verbose := flag.Bool("v", false, "log every value as it is measured")
	only := flag.String("only", "", "comma-separated tests to run (default all): conns,shapes,rr,logs,bulk,latency,term,idle,idlemax,scale,pg,syscalls,micro")
	render := flag.String("render", "", "only regenerate --md and --svg from this results JSON (after editing the notes)")
	runsDir := flag.String("runs", "bench/results/runs", "the full runs kept to pool the at-the-floor targets over (with this one)")
	flag.Parse()

	if *render != "" {
		r, err := report.ReadJSON(*render)
		if err != nil {
			log.Fatal(err)
		}
		r.Summarize()
		r.Pooled = pooledRuns(*runsDir, r)
		r.Evaluate()
		if *svgOut != "" {
			if err := r.WriteSVG(*svgOut); err != nil {
				log.Fatal(err)
			}
		}
		if *mdOut != "" {
			if err := r.WriteMarkdown(*mdOut, *chartLink, *notes); err != nil {
				log.Fatal(err)
			}
		}
		return
	}

	e := &env{p: full, mode: "full", rounds: 5, repo: *repo, start: time.Now(), proxies: map[string]*instance{}, logged: map[string]*instance{}}
	if *isSmoke {
		e.p, e.mode, e.rounds = smoke, "smoke", 1
	}
	if *rounds > 0 {
		e.rounds = *rounds
	}
	fdLimit := fdLimit()
	if e.p.IdleMaxN == 0 {
		e.p.IdleMaxN = idleAtLimit(fdLimit)
	}
	e.bin.snigate, e.bin.loadgen, e.bin.backend = *snigate, *loadgen, *backend
	for _, b := range []string{e.bin.snigate, e.bin.loadgen, e.bin.backend} {
		if b == "" {
			log.Fatal("--snigate, --loadgen and --backend are required")
		}
	}
	tests := map[string]bool{}
	for _, t := range strings.Split(*only, ",") {
		if t != "" {
			tests[t] = true
		}
	}
	want := func(t string) bool { return len(tests) == 0 || tests[t] }

	e.res = &report.Results{
		Mode: e.mode, Rounds: e.rounds, Date: e.start.UTC().Format(time.RFC3339),
		Command: "bench/run.sh" + map[bool]string{true: " --smoke", false: ""}[*isSmoke],
		Machine: machine(), Versions: versions(*snigate, *repo),
		Params: map[string]any{
			"concurrency": e.p.Conc, "connsN": e.p.ConnsN, "latencyN": e.p.LatencyN, "idleN": e.p.IdleN, "idleMaxN": e.p.IdleMaxN, "fdLimit": fdLimit,
			"shapeN": e.p.ShapeN, "rrConns": e.p.RRConns, "rrSeconds": e.p.RRTime.Seconds(), "termN": e.p.TermN, "bulkBytes": fmtBytes(e.p.BulkBytes), "scaleExact": e.p.ScaleExact,
			"scaleWild": e.p.ScaleWild, "reloads": e.p.Reloads, "pgbenchArgs": pgbenchArgsText(e.p), "pgScale": e.p.PGClients, "syscallsN": e.p.ConnsN / 6, "benchtime": e.p.Benchtime,
		},
	}

	if *verbose {
		e.res.Verbose = log.Printf
	}

	// Whatever happens, stop every process we started.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		log.Printf("%v: stopping", s)
		e.stopAll()
		os.Exit(1)
	}()

	if err := e.setup(want); err != nil {
		e.res.Error(fmt.Errorf("setup: %w", err))
	} else {
		e.runRounds(want)
		if want("syscalls") && !e.overBudget("syscalls") {
			e.syscalls()
		}
	}
	e.stopAll()
	if want("micro") && e.p.Benchtime != "" {
		e.micro()
	}

	e.res.Seconds = time.Since(e.start).Seconds()
	e.res.Summarize()
	e.res.Pooled = pooledRuns(*runsDir, e.res)
	e.res.Evaluate()
	if *jsonOut != "" {
		if err := e.res.WriteJSON(*jsonOut); err != nil {
			log.Fatal(err)
		}
	}
	if *svgOut != "" {
		if err := e.res.WriteSVG(*svgOut); err != nil {
			log.Fatal(err)
		}
	}
	if *mdOut != "" {
		if err := e.res.WriteMarkdown(*mdOut, *chartLink, *notes); err != nil {
			log.Fatal(err)
		}
	}
	printSummary(e.res)
	if len(e.res.Errors) > 0 {
		log.Printf("FAILED: %d errors", len(e.res.Errors))
		for _, err := range e.res.Errors {
			log.Printf("  %s", err)
		}
		os.Exit(1)
	}
	log.Printf("done in %.0f s", e.res.Seconds)
}

func printSummary(r *report.Results) {
	met := 0
	for _, t := range r.Targets {
		mark := "MISSED"
		if !t.Known {
			mark = "n/a"
		} else if t.Met {
			mark = "met"
			met++
		}
		log.Printf("target %-7s %-16s %-50s %s [%s]", mark, t.Area, t.Goal, t.Value, t.Margin)
	}
	log.Printf("%d of %d targets met", met, len(r.Targets))
}

func (e *env) track(p *proc.Proc) {
	e.mu.Lock()
	e.running = append(e.running, p)
	e.mu.Unlock()
}

func (e *env) stopAll() {
	e.mu.Lock()
	ps := e.running
	e.running = nil
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop() }()
	}
	wg.Wait()
	if e.work == "" {
		return
	}
	if len(e.res.Errors) > 0 {
		// Keep the configurations and logs of a failed run.
		if e.pg != nil {
			os.RemoveAll(filepath.Join(e.pg.Dir, "data"))
		}
		log.Printf("errors: the configurations and logs are kept in %s", e.work)
		return
	}
	os.RemoveAll(e.work)
}

// overBudget reports whether the run has used its time; later work is skipped.
func (e *env) overBudget(what string) bool {
	if time.Since(e.start) < e.p.Budget {
		return false
	}
	e.res.Error(fmt.Errorf("time budget of %s used up: skipped %s", e.p.Budget, what))
	return true
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	default:
		return fmt.Sprintf("%d MiB", n>>20)
	}
}

func (e *env) path(elem ...string) string {
	return filepath.Join(append([]string{e.work}, elem...)...)
}

// pooledRuns is the full runs of dir, and r unless dir holds it already (the same date):
// what the at-the-floor targets are judged over (report.FloorTarget).
func pooledRuns(dir string, r *report.Results) []*report.Results {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []*report.Results
	have := false
	for _, f := range files {
		p, err := report.ReadJSON(f)
		if errors.Is(err, report.ErrNotARun) {
			continue // bench/cpscale.sh's runs, kept in the same folder
		}
		if err != nil {
			log.Printf("pooling: %s: %v (left out)", f, err)
			continue
		}
		p.Summarize()
		have = have || p.Date == r.Date
		out = append(out, p)
	}
	if !have {
		out = append(out, r)
	}
	return out
}

// fdLimit is the per-process open-file limit every process of the run inherits (20 000 on
// the machines this runs on, which may not raise it).
func fdLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return int(l.Cur)
}

// idleAtLimit is the most idle connections a proxy can hold under the limit: each takes two
// descriptors (the client's and the backend's), and about 200 are left for the listeners,
// logs and the process's own. The backend and the load generator, one process each, hold one
// descriptor per connection and are never the cap.
func idleAtLimit(limit int) int {
	return max(0, (limit-200)/2/100*100)
}
