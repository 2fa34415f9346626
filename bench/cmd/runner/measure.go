package main

import (
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/snigate/snigate/bench/internal/load"
	"github.com/snigate/snigate/bench/internal/procstat"
	"github.com/snigate/snigate/bench/internal/report"
)

// rotate returns list rotated left by k: every round measures the targets in a different
// order, so a disturbance does not always hit the same one.
func rotate(list []string, k int) []string {
	k %= len(list)
	return append(append([]string{}, list[k:]...), list[:k]...)
}

var passTargets = []string{"direct", "snigate", "haproxy", "nginx", "sniproxy"}

func (e *env) runRounds(want func(string) bool) {
	for r := 0; r < e.rounds; r++ {
		log.Printf("round %d of %d", r+1, e.rounds)
		steps := []struct {
			name string
			run  func(round int)
		}{
			{report.TConns, func(r int) {
				for _, t := range rotate(passTargets, r) {
					e.conns(report.TConns, t, e.targetAddr, sniEcho, "std", e.p.ConnsN, report.MCPU, report.MRate)
				}
			}},
			{report.TShapes, func(r int) {
				for _, t := range rotate(passTargets, r) {
					e.conns(report.TShapes, t, e.targetAddr, sniTiny, "tiny", e.p.ShapeN, report.MCPUTiny, report.MRateTiny)
					e.conns(report.TShapes, t, e.targetAddr, sniEcho, "fin", e.p.ShapeN, report.MCPUFin, report.MRateFin)
				}
			}},
			{report.TRR, func(r int) {
				for _, t := range rotate(passTargets, r) {
					e.rr(t)
				}
			}},
			{report.TLogs, func(r int) {
				for _, t := range rotate(logKinds, r) {
					e.conns(report.TLogs, t, e.loggedAddr, sniEcho, "std", e.p.ConnsN, report.MCPU, report.MRate)
				}
			}},
			{report.TBulk, func(r int) {
				for _, t := range rotate(passTargets, r) {
					e.bulk(t)
				}
			}},
			{report.TLatency, func(r int) { e.latency(rotate(passTargets, r)) }},
			{report.TTerm, func(r int) {
				for _, t := range rotate([]string{"snigate", "haproxy", "nginx"}, r) {
					e.term(t)
				}
			}},
			{report.TIdle, func(r int) {
				for _, t := range rotate(passTargets[1:], r) {
					e.idle(t, report.TIdle, e.p.IdleN)
				}
			}},
			{report.TIdleMax, func(r int) {
				for _, t := range rotate([]string{"snigate", "haproxy"}, r) {
					e.idle(t, report.TIdleMax, e.p.IdleMaxN)
				}
			}},
			{report.TScale, func(r int) { e.scaleRound(r) }},
			{report.TPG, func(r int) { e.pgRound(r) }},
		}
		for _, s := range steps {
			if !want(s.name) {
				continue
			}
			if e.overBudget(fmt.Sprintf("round %d %s", r+1, s.name)) {
				return
			}
			t := time.Now()
			s.run(r)
			log.Printf("  %-8s %.1f s", s.name, time.Since(t).Seconds())
		}
	}
}

// targetAddr is where the passthrough client connects for target, and the proxy's pid (0
// for direct).
func (e *env) targetAddr(target string, backendPort int) (string, int) {
	if target == "direct" {
		return addr(backendPort), 0
	}
	inst := e.proxies[target]
	if inst == nil || inst.proc == nil {
		return "", -1
	}
	return inst.spec.Pass, inst.proc.Pid()
}

func cpuOf(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	return procstat.CPU(procstat.Tree(pid))
}

// loggedAddr is targetAddr for the proxies with their access logs on.
func (e *env) loggedAddr(target string, _ int) (string, int) {
	inst := e.logged[target]
	if inst == nil || inst.proc == nil {
		return "", -1
	}
	return inst.spec.Pass, inst.proc.Pid()
}

// conns: n new connections of a shape (load.Shapes) to sni, 16 at a time; the proxy's CPU
// per connection and connections/s go to metrics cpuName and rateName of test.
func (e *env) conns(test, target string, where func(string, int) (string, int), sni, shape string, n int, cpuName, rateName string) {
	port := e.port.echo
	if sni == sniTiny {
		port = e.port.tiny
	}
	a, pid := where(target, port)
	if pid < 0 {
		return
	}
	before := cpuOf(pid)
	var r load.ConnsResult
	err := e.loadgen(120*time.Second, &r, "conns", "--addr", a, "--sni", sni, "--shape", shape,
		"-n", strconv.Itoa(n), "-c", strconv.Itoa(e.p.Conc), "--max", "60s")
	cpu := cpuOf(pid) - before
	if err != nil {
		e.res.Error(fmt.Errorf("%s %s (%s): %w", test, target, shape, err))
		return
	}
	e.res.Add(test, rateName, target, "conns/s", r.PerSec)
	if pid > 0 {
		e.res.Add(test, cpuName, target, "µs", float64(cpu)/1e3/float64(r.OK))
	}
}

// rr: many connections at once sending small requests; requests/s, proxy CPU per request
// and the latency of a request under that load.
func (e *env) rr(target string) {
	a, pid := e.targetAddr(target, e.port.echo)
	if pid < 0 {
		return
	}
	var r load.RRResult
	// The CPU count includes opening the connections (about 5 ms of the proxy's time against
	// a 2 s run), alike for every proxy.
	before := cpuOf(pid)
	err := e.loadgen(120*time.Second, &r, "rr", "--addr", a, "--sni", sniEcho, "-c", strconv.Itoa(e.p.RRConns),
		"-n", "10000000", "--max", e.p.RRTime.String())
	cpu := cpuOf(pid) - before
	if err != nil {
		e.res.Error(fmt.Errorf("rr %s: %w", target, err))
		return
	}
	e.res.Add(report.TRR, report.MRate, target, "requests/s", r.PerSec)
	e.res.Add(report.TRR, report.MP50, target, "µs", r.P50)
	e.res.Add(report.TRR, report.MP99, target, "µs", r.P99)
	if pid > 0 {
		e.res.Add(report.TRR, report.MCPU, target, "µs", float64(cpu)/1e3/float64(r.Requests))
	}
}

// bulk: one download, throughput and proxy CPU per GiB.
func (e *env) bulk(target string) {
	a, pid := e.targetAddr(target, e.port.bulk)
	if pid < 0 {
		return
	}
	n := e.p.BulkBytes
	if target == "sniproxy" {
		n /= 4 // about 5 CPU seconds per GiB: a quarter says as much
	}
	before := cpuOf(pid)
	var r load.BulkResult
	err := e.loadgen(180*time.Second, &r, "bulk", "--addr", a, "--sni", sniBulk, "--bytes", strconv.FormatInt(n, 10))
	cpu := cpuOf(pid) - before
	if err != nil {
		e.res.Error(fmt.Errorf("bulk %s: %w", target, err))
		return
	}
	e.res.Add(report.TBulk, report.MGBps, target, "GB/s", r.GBps)
	if pid > 0 {
		e.res.Add(report.TBulk, report.MCPUGiB, target, "s/GiB", float64(cpu)/1e9/(float64(r.Bytes)/(1<<30)))
	}
}

// latency: 64-byte echo with everything on CPU 0; added = proxy minus direct.
func (e *env) latency(targets []string) {
	got := map[string]load.LatencyResult{}
	for _, target := range targets {
		a, pid := e.targetAddr(target, e.port.echo)
		if pid < 0 {
			continue
		}
		var tree []int
		if pid > 0 {
			tree = procstat.Tree(pid)
			if err := procstat.Pin(tree, "0"); err != nil {
				e.res.Error(err)
				continue
			}
		}
		var r load.LatencyResult
		err := e.loadgen(120*time.Second, &r, "latency", "--addr", a, "--sni", sniEcho, "-n", strconv.Itoa(e.p.LatencyN))
		if pid > 0 {
			if perr := procstat.Pin(tree, "1"); perr != nil {
				e.res.Error(perr)
			}
		}
		if err != nil {
			e.res.Error(fmt.Errorf("latency %s: %w", target, err))
			continue
		}
		got[target] = r
		e.res.Add(report.TLatency, report.MP50, target, "µs", r.P50)
		e.res.Add(report.TLatency, report.MP99, target, "µs", r.P99)
	}
	d, ok := got["direct"]
	if !ok {
		return
	}
	for t, r := range got {
		if t != "direct" {
			e.res.Add(report.TLatency, report.MAddP50, t, "µs", r.P50-d.P50)
			e.res.Add(report.TLatency, report.MAddP99, t, "µs", r.P99-d.P99)
		}
	}
}

// term: TLS handshakes/s and proxy CPU per handshake, in two batches of TermN. In a full
// run the first runs on a proxy started (round 1) or restarted (the idle test, every round)
// since its last handshake, so it pays what a new process pays once: a runtime whose heap
// grows to its collector's goal touches fresh memory, and on a guest whose page faults are
// expensive that made snigate's first 1 500 handshakes cost ×1.35 of the next ones, which
// nginx's do not. The second batch is the steady state a running gateway serves at, which
// the target judges; the first is reported beside it (MCPUCold), so the start's cost stays
// in view.
func (e *env) term(target string) {
	inst := e.proxies[target]
	if inst == nil || inst.proc == nil || inst.spec.Term == "" {
		return
	}
	pid := inst.proc.Pid()
	batch := func() (load.ConnsResult, float64, error) {
		before := cpuOf(pid)
		var r load.ConnsResult
		err := e.loadgen(120*time.Second, &r, "handshake", "--addr", inst.spec.Term, "--sni", sniTerm,
			"-n", strconv.Itoa(e.p.TermN), "-c", strconv.Itoa(e.p.Conc), "--max", "60s")
		if err == nil && r.OK == 0 {
			err = fmt.Errorf("no handshake completed (%d failed)", r.Failed)
		}
		return r, float64(cpuOf(pid)-before) / 1e3 / float64(r.OK), err
	}
	_, cold, err := batch()
	if err != nil {
		e.res.Error(fmt.Errorf("terminate %s, first batch: %w", target, err))
		return
	}
	r, cpu, err := batch()
	if err != nil {
		e.res.Error(fmt.Errorf("terminate %s: %w", target, err))
		return
	}
	e.res.Add(report.TTerm, report.MRate, target, "handshakes/s", r.PerSec)
	e.res.Add(report.TTerm, report.MCPU, target, "µs", cpu)
	e.res.Add(report.TTerm, report.MCPUCold, target, "µs", cold)
}

// idle: memory and fds per idle connection, n of them, recorded as test. The proxy is
// restarted and warmed up first, so every round starts from the same state.
func (e *env) idle(target, test string, n int) {
	inst := e.proxies[target]
	if inst == nil {
		return
	}
	e.stopProxy(inst)
	if err := e.startProxy(target); err != nil {
		e.res.Error(fmt.Errorf("idle: restart %s: %w", target, err))
		return
	}
	var warm load.ConnsResult
	if err := e.loadgen(60*time.Second, &warm, "conns", "--addr", inst.spec.Pass, "--sni", sniEcho, "-n", "200", "-c", strconv.Itoa(e.p.Conc)); err != nil {
		e.res.Error(fmt.Errorf("idle warm-up %s: %w", target, err))
		return
	}
	time.Sleep(100 * time.Millisecond)
	pid := inst.proc.Pid()
	before := procstat.Take(pid)
	heapBefore, herr := 0.0, error(nil)
	if target == "snigate" {
		heapBefore, herr = metric(inst.spec.Admin, "go_memstats_heap_inuse_bytes")
	}
	release, err := e.idleHold(inst.spec.Pass, n)
	if err != nil {
		e.res.Error(fmt.Errorf("idle %s: %w", target, err))
		return
	}
	time.Sleep(300 * time.Millisecond)
	after := procstat.Take(pid)
	heapAfter := 0.0
	if target == "snigate" && herr == nil {
		heapAfter, herr = metric(inst.spec.Admin, "go_memstats_heap_inuse_bytes")
	}
	if err := release(); err != nil {
		e.res.Error(fmt.Errorf("idle %s: loadgen: %w", target, err))
	}
	nf := float64(n)
	e.res.Add(test, report.MRSSConn, target, "bytes", float64(after.Mem-before.Mem)/nf)
	e.res.Add(test, report.MFDConn, target, "fds", float64(after.FDs-before.FDs)/nf)
	if target == "snigate" {
		if herr != nil {
			e.res.Error(fmt.Errorf("idle snigate heap: %w", herr))
		} else {
			e.res.Add(test, report.MHeapConn, target, "bytes", (heapAfter-heapBefore)/nf)
		}
	}
	// Let the proxy see the closes before the next test (pooled splice pipes may stay).
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && procstat.FDs(procstat.Tree(pid)) > before.FDs+n/10 {
		time.Sleep(50 * time.Millisecond)
	}
}
