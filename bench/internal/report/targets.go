package report

import (
	"fmt"
	"math"
	"strings"
)

// Test and metric names shared by the runner and the report.
const (
	TConns    = "conns"    // new connections
	TShapes   = "shapes"   // new connections of other shapes (tiny, fin)
	TRR       = "rr"       // many connections, small requests and responses
	TLogs     = "logs"     // new connections with each proxy's access log on
	TBulk     = "bulk"     // one long download
	TLatency  = "latency"  // 64-byte echo, all on one CPU
	TIdle     = "idle"     // idle connections
	TIdleMax  = "idlemax"  // idle connections, as many as the fd limit allows
	TScale    = "scale"    // 100 000 routes
	TTerm     = "term"     // TLS terminate
	TPG       = "pg"       // pgbench
	TSyscalls = "syscalls" // strace -c per new connection; metric names are syscalls
	MTotal    = "total"

	MCPU            = "cpu_us"      // proxy CPU µs per connection / handshake / request
	MCPUTiny        = "cpu_us_tiny" // shapes: tiny flight, one byte each way, reset
	MRateTiny       = "rate_tiny"
	MCPUFin         = "cpu_us_fin"  // shapes: the standard exchange, closed by FINs
	MCPUCold        = "cpu_us_cold" // term: the first batch after a (re)start
	MRateFin        = "rate_fin"
	MRate           = "rate"          // per second
	MGBps           = "gbps"          // 10^9 bytes/s
	MCPUGiB         = "cpu_s_gib"     // proxy CPU s per GiB
	MP50            = "p50_us"        // µs
	MP99            = "p99_us"        // µs
	MAddP50         = "added_p50_us"  // minus direct, same round
	MAddP99         = "added_p99_us"  // minus direct, same round
	MRSSConn        = "rss_per_conn"  // bytes
	MHeapConn       = "heap_per_conn" // bytes (snigate)
	MFDConn         = "fds_per_conn"
	MStart          = "start_s"          // process start to first connection to the last name
	MRSSMB          = "rss_mb"           // resident memory with the large table, MB
	MChangeFile     = "change_file_ms"   // snigate: file rename to first connection to the new name
	MChangeHUP      = "change_hup_ms"    // snigate: file written + SIGHUP to first connection
	MChange         = "change_ms"        // peers: config rewritten + reload signal to first connection
	MCPULarge       = "cpu_us_large"     // CPU per connection with the large table
	MCPUSmall       = "cpu_us_small"     // same round, the small table
	MCPUDelta       = "cpu_delta_pct"    // large vs small, %
	MFailed         = "reload_failed"    // failed connections across reloads
	MReloadConn     = "reload_conns"     // connections made across reloads
	MReloads        = "reloads"          // reloads during the load
	MTPS            = "tps"              // default (TPC-B-like) script
	MTPSRatio       = "tps_ratio"        // snigate / direct, same round
	MTPSSelect      = "tps_select"       // -S
	MTPSRatioSelect = "tps_ratio_select" // -S, snigate / direct, same round
)

// Peers are the proxies snigate is compared with.
var Peers = []string{"haproxy", "nginx", "sniproxy"}

// better says whether a is better than b: less when lower, more otherwise.
func better(a, b float64, lower bool) bool { return (lower && a < b) || (!lower && a > b) }

// best returns the peer with the lowest (or highest) median of a metric.
func (r *Results) best(test, name string, peers []string, lower bool) (string, float64, bool) {
	bp, bv, found := "", 0.0, false
	for _, p := range peers {
		v, ok := r.Med(test, name, p)
		if !ok {
			continue
		}
		if !found || better(v, bv, lower) {
			bp, bv, found = p, v, true
		}
	}
	return bp, bv, found
}

// paired describes snigate against peer in the rounds where both were measured: the median
// of the per-round ratios, which cancels what changed on the machine between rounds (a
// ratio of medians does not), and in how many rounds snigate was ahead. Empty when the
// rounds cannot be paired. The targets are judged on the ratio of medians; this says how
// much of a margin the machine's drift can explain.
// lower says that less is better, as for best.
func (r *Results) paired(test, name, peer string, lower bool) string {
	a, b := r.Get(test, name, "snigate"), r.Get(test, name, peer)
	if a == nil || b == nil || len(a.Values) != len(b.Values) || len(a.Values) < 2 {
		return ""
	}
	ratios := make([]float64, 0, len(a.Values))
	ahead := 0
	for i := range a.Values {
		if b.Values[i] == 0 {
			return ""
		}
		ratios = append(ratios, a.Values[i]/b.Values[i])
		if better(a.Values[i], b.Values[i], lower) {
			ahead++
		}
	}
	return fmt.Sprintf("; per round ×%.2f, ahead in %d of %d", Median(ratios), ahead, len(ratios))
}

// atMost builds a target "value ≤ limit".
func atMost(area, goal string, v, limit float64, what string) Target {
	t := Target{Area: area, Goal: goal, Known: true, Value: what, Ratio: v / limit, Met: v <= limit}
	t.Margin = margin(v, limit, true)
	return t
}

// atLeast builds a target "value ≥ limit".
func atLeast(area, goal string, v, limit float64, what string) Target {
	t := Target{Area: area, Goal: goal, Known: true, Value: what, Ratio: v / limit, Met: v >= limit}
	t.Margin = margin(v, limit, false)
	return t
}

func margin(v, limit float64, lowerIsBetter bool) string {
	if limit == 0 {
		return ""
	}
	d := (v - limit) / math.Abs(limit) * 100
	met := (lowerIsBetter && v <= limit) || (!lowerIsBetter && v >= limit)
	if met {
		return fmt.Sprintf("met by %.0f %%", math.Abs(d))
	}
	return fmt.Sprintf("missed by %.0f %%", math.Abs(d))
}

func unknown(area, goal, why string) Target {
	return Target{Area: area, Goal: goal, Value: why, Known: false, Ratio: math.NaN()}
}

// Evaluate fills r.Targets from the medians (call Summarize first).
func (r *Results) Evaluate() {
	var ts []Target
	add := func(t Target) {
		if math.IsNaN(t.Ratio) || math.IsInf(t.Ratio, 0) {
			t.Ratio = 0
		}
		ts = append(ts, t)
	}
	s := "snigate"

	// 1. New connections, in three shapes: at the floor (pool.go), this run's medians for
	// reference.
	for _, c := range []struct{ test, metric, shape string }{
		{TConns, MCPU, ""}, {TShapes, MCPUTiny, " (tiny shape)"}, {TShapes, MCPUFin, " (fin shape)"},
	} {
		v, ok := r.Med(c.test, c.metric, s)
		p, b, okp := r.best(c.test, c.metric, Peers, true)
		if ok && okp {
			t := r.FloorTarget("new connections", "proxy CPU per connection ≤ the best peer's"+c.shape, c.test, c.metric, true)
			t.Value += fmt.Sprintf("; this run %.0f µs vs %s %.0f µs (×%.2f%s)", v, p, b, v/b, r.paired(c.test, c.metric, p, true))
			add(t)
		}
	}
	// With the access logs on, as each proxy comes: a default install must still be ahead.
	if v, ok := r.Med(TLogs, MCPU, s); ok {
		if p, b, ok := r.best(TLogs, MCPU, Peers, true); ok {
			add(atMost("new connections", "with access logs on: proxy CPU per connection ≤ the best peer's with its log on", v, b,
				fmt.Sprintf("%.0f µs vs %s %.0f µs (×%.2f%s)", v, p, b, v/b, r.paired(TLogs, MCPU, p, true))))
		}
	}

	// 1b. Many connections, small requests.
	if v, ok := r.Med(TRR, MRate, s); ok {
		if p, b, ok := r.best(TRR, MRate, Peers, false); ok {
			what := fmt.Sprintf("%.0f/s vs %s %.0f/s (×%.2f%s)", v, p, b, v/b, r.paired(TRR, MRate, p, false))
			if c, ok := r.Med(TRR, MCPU, s); ok {
				if pc, ok := r.Med(TRR, MCPU, p); ok {
					what += fmt.Sprintf("; CPU per request %.1f vs %.1f µs", c, pc)
				}
			}
			t := r.FloorTarget("many connections", "requests/s ≥ the best peer's", TRR, MRate, false)
			t.Value += "; this run " + what
			add(t)
		}
	}

	// 2. Bulk.
	if v, ok := r.Med(TBulk, MGBps, s); ok {
		if p, b, ok := r.best(TBulk, MGBps, Peers, false); ok {
			what := fmt.Sprintf("%.2f GB/s vs %s %.2f GB/s (×%.2f%s)", v, p, b, v/b, r.paired(TBulk, MGBps, p, false))
			if d, ok := r.Med(TBulk, MGBps, "direct"); ok {
				what += fmt.Sprintf("; direct %.2f GB/s", d)
			}
			add(atLeast("bulk", "throughput ≥ 1.1 × the best peer's", v, 1.1*b, what))
		}
	}
	if v, ok := r.Med(TBulk, MCPUGiB, s); ok {
		if p, b, ok := r.best(TBulk, MCPUGiB, Peers, true); ok {
			add(atMost("bulk", "proxy CPU per GiB ≤ 0.6 × the best peer's", v, 0.6*b,
				fmt.Sprintf("%.2f s vs %s %.2f s (×%.2f)", v, p, b, v/b)))
		}
	}

	// 3. Latency.
	for _, m := range []struct{ name, label string }{{MAddP50, "p50"}, {MAddP99, "p99"}} {
		v, ok := r.Med(TLatency, m.name, s)
		p, b, okp := r.best(TLatency, m.name, Peers, true)
		if ok && okp {
			t := r.FloorTarget("latency", "added "+m.label+" ≤ the best peer's", TLatency, m.name, true)
			t.Value += fmt.Sprintf("; this run +%.0f µs vs %s +%.0f µs%s", v, p, b, r.paired(TLatency, m.name, p, true))
			add(t)
		}
	}

	// 4. Idle connections.
	if v, ok := r.Med(TIdle, MRSSConn, s); ok {
		if h, ok := r.Med(TIdle, MRSSConn, "haproxy"); ok {
			add(atMost("idle connections", "memory per connection ≤ 0.5 × HAProxy's", v, 0.5*h,
				fmt.Sprintf("%.1f KB RSS vs HAProxy %.1f KB (×%.2f)", v/1024, h/1024, v/h)))
		}
	}
	if v, ok := r.Med(TIdleMax, MRSSConn, s); ok {
		if h, ok := r.Med(TIdleMax, MRSSConn, "haproxy"); ok {
			add(atMost("idle connections", fmt.Sprintf("at the fd limit (%v): memory per connection ≤ 0.5 × HAProxy's", r.Params["idleMaxN"]), v, 0.5*h,
				fmt.Sprintf("%.1f KB RSS vs HAProxy %.1f KB (×%.2f)", v/1024, h/1024, v/h)))
		}
	}
	if v, ok := r.Med(TIdle, MFDConn, s); ok {
		// The count is a difference over thousands of connections: one descriptor the proxy
		// opened meanwhile for something else (a log file, a pooled pipe) is not a miss.
		t := atMost("idle connections", "2 file descriptors per connection", v, 2, fmt.Sprintf("%.2f fds", v))
		if v < 2.01 {
			t.Met, t.Margin = true, "met"
		}
		add(t)
	}

	// 5. Route scale.
	if v, ok := r.Med(TScale, MStart, s); ok {
		add(atMost("route scale", "serving within 0.3 s of start", v, 0.3, fmt.Sprintf("%.2f s", v)))
	}
	if v, ok := r.Med(TScale, MChangeFile, s); ok {
		what := fmt.Sprintf("%.0f ms after the file is replaced", v)
		if h, ok := r.Med(TScale, MChangeHUP, s); ok {
			what += fmt.Sprintf(" (%.0f ms with SIGHUP)", h)
		}
		add(atMost("route scale", "a one-route change applied in ≤ 50 ms", v, 50, what))
	}
	if v, ok := r.Med(TScale, MCPUDelta, s); ok {
		t := atMost("route scale", "CPU per connection within 5 % of the small table", math.Abs(v), 5,
			fmt.Sprintf("%+.1f %% (median of per-round differences)", v))
		t.Ratio = math.Abs(v) / 5
		add(t)
	}
	if m := r.Get(TScale, MFailed, s); m != nil {
		total := 0.0
		for _, x := range m.Values {
			total += x
		}
		conns := 0.0
		if c := r.Get(TScale, MReloadConn, s); c != nil {
			for _, x := range c.Values {
				conns += x
			}
		}
		t := Target{Area: "route scale", Goal: "zero failed connections across reloads", Known: true,
			Met: total == 0, Ratio: total, Value: fmt.Sprintf("%.0f failed of %.0f", total, conns)}
		if total == 0 {
			t.Margin = "met"
		} else {
			t.Margin = fmt.Sprintf("missed: %.0f failed", total)
		}
		add(t)
	}

	// 6. Terminate.
	if v, ok := r.Med(TTerm, MRate, s); ok {
		if p, b, ok := r.best(TTerm, MRate, []string{"haproxy", "nginx"}, false); ok {
			add(atLeast("terminate", "handshakes/s ≥ the best peer's", v, b,
				fmt.Sprintf("%.0f/s vs %s %.0f/s (client-bound: see the capacity column)", v, p, b)))
			if c, ok := r.Med(TTerm, MCPU, s); ok {
				if pc, ok := r.Med(TTerm, MCPU, p); ok {
					detail := fmt.Sprintf("%.0f µs vs %s %.0f µs (×%.2f%s)", c, p, pc, c/pc, r.paired(TTerm, MCPU, p, true))
					if cc, ok := r.Med(TTerm, MCPUCold, s); ok {
						if pcc, ok := r.Med(TTerm, MCPUCold, p); ok {
							detail += fmt.Sprintf("; the first batch after a start %.0f vs %.0f µs (×%.2f)", cc, pcc, cc/pcc)
						}
					}
					add(atMost("terminate", "CPU per handshake ≤ that peer's", c, pc, detail))
				}
			}
		}
	}

	// 7. PostgreSQL: the bridge against the best peer forwarding the session as plain TCP,
	// each as a ratio to direct TLS in the same round.
	for _, pg := range []struct{ metric, goal, script string }{
		{MTPSRatio, "pgbench (TPC-B-like) through the bridge ≥ the best peer forwarding plain TCP", ""},
		{MTPSRatioSelect, "pgbench -S (select only) through the bridge ≥ the best peer forwarding plain TCP", ""},
	} {
		v, ok := r.Med(TPG, pg.metric, s)
		p, b, okp := r.best(TPG, pg.metric, []string{"haproxy", "nginx"}, false)
		if ok && okp {
			t := r.FloorTarget("PostgreSQL", pg.goal, TPG, pg.metric, false)
			t.Value += fmt.Sprintf("; this run ×%.3f of direct vs %s ×%.3f%s", v, p, b, r.paired(TPG, pg.metric, p, false))
			add(t)
		}
	}

	// 8. Micro-benchmarks.
	for _, mb := range r.Micro {
		low := strings.ToLower(mb.Name)
		switch {
		case strings.HasPrefix(low, "benchmarkparse/") && typicalHello(low):
			t := atMost("micro", "ClientHello parse: 0 allocs, < 200 ns ("+mb.Name+")", mb.NsPerOp, 200,
				fmt.Sprintf("%.0f ns, %.0f allocs", mb.NsPerOp, mb.AllocsPerOp))
			t.Met = t.Met && mb.AllocsPerOp == 0
			if mb.AllocsPerOp != 0 {
				t.Margin += fmt.Sprintf("; %.0f allocs", mb.AllocsPerOp)
			}
			add(t)
		case strings.Contains(low, "lookup"):
			t := Target{Area: "micro", Goal: "route lookup: 0 allocs (" + mb.Name + ")", Known: true,
				Met: mb.AllocsPerOp == 0, Ratio: mb.AllocsPerOp,
				Value: fmt.Sprintf("%.0f ns, %.0f allocs", mb.NsPerOp, mb.AllocsPerOp)}
			if t.Met {
				t.Margin = "met"
			} else {
				t.Margin = fmt.Sprintf("missed: %.0f allocs", mb.AllocsPerOp)
			}
			add(t)
		}
	}
	r.Targets = ts
}

// typicalHello selects the parse benchmarks of whole, typical ClientHellos (not the
// split-record or incomplete cases, which the target does not cover).
func typicalHello(name string) bool {
	for _, s := range []string{"/go-tls13", "/openssl-sni", "/go-alpn-postgresql", "/openssl-alpn-postgresql"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}
