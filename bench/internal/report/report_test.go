package report

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

func sample() *Results {
	r := &Results{Mode: "full", Rounds: 3, Date: "2026-11-29T23:00:00Z", Machine: Machine{NProc: 2, CPU: "Test CPU", Kernel: "6.1"}}
	for i, v := range []float64{100, 90, 110} {
		r.Add(TConns, MCPU, "snigate", "µs", v)
		r.Add(TConns, MCPU, "nginx", "µs", 80+float64(i))
		r.Add(TConns, MCPU, "haproxy", "µs", 120)
		r.Add(TIdle, MFDConn, "snigate", "fds", 2)
		r.Add(TScale, MFailed, "snigate", "conns", 0)
		r.Add(TPG, MTPSRatio, "snigate", "ratio", 0.98)
		r.Add(TPG, MTPSRatio, "haproxy", "ratio", 0.91)
		r.Add(TPG, MTPSRatio, "nginx", "ratio", 0.93)
		r.Add(TRR, MRate, "snigate", "requests/s", 50000)
		r.Add(TRR, MRate, "haproxy", "requests/s", 52000)
		r.Add(TLogs, MCPU, "snigate", "µs", 100)
		r.Add(TLogs, MCPU, "haproxy", "µs", 110)
		r.Add(TShapes, MCPUFin, "snigate", "µs", 90)
		r.Add(TShapes, MCPUFin, "haproxy", "µs", 100) // 90 > 0.9 × 100 is false: met exactly
		// Terminate: judged on the steady batch (300 vs nginx 330), the first batch after a
		// start (430 vs 340) shown beside it.
		r.Add(TTerm, MRate, "snigate", "handshakes/s", 2700)
		r.Add(TTerm, MRate, "nginx", "handshakes/s", 2600)
		r.Add(TTerm, MCPU, "snigate", "µs", 300)
		r.Add(TTerm, MCPU, "nginx", "µs", 330)
		r.Add(TTerm, MCPUCold, "snigate", "µs", 430)
		r.Add(TTerm, MCPUCold, "nginx", "µs", 340)
	}
	r.Add(TConns, MCPU, "sniproxy", "µs", math.NaN()) // dropped
	r.Micro = []Micro{{Name: "BenchmarkParse/go-tls13", NsPerOp: 150}, {Name: "BenchmarkLookup/exact/1", AllocsPerOp: 1}}
	r.Summarize()
	r.Pooled = []*Results{r, r, r} // the at-the-floor targets pool ≥ 3 full runs
	r.Evaluate()
	return r
}

func TestMedianAndTargets(t *testing.T) {
	r := sample()
	if m := r.Get(TConns, MCPU, "snigate"); m.Median != 100 || m.Min != 90 || m.Max != 110 {
		t.Fatalf("%+v", m)
	}
	if Median([]float64{4, 1, 3, 2}) != 2.5 {
		t.Fatal("even median")
	}
	if r.Get(TConns, MCPU, "sniproxy") != nil {
		t.Fatal("NaN recorded")
	}
	// The at-the-floor goals end in how they are judged; they are matched by their start.
	want := map[string]bool{
		"proxy CPU per connection ≤ the best peer's, at":                                  false, // per round ×1.25 of nginx
		"proxy CPU per connection ≤ the best peer's (fin shape)":                          true,  // ×0.90 of HAProxy
		"requests/s ≥ the best peer's":                                                    false, // ×0.96 of HAProxy
		"with access logs on: proxy CPU per connection ≤ the best peer's with its log on": true,
		"2 file descriptors per connection":                                               true,
		"zero failed connections across reloads":                                          true,
		"pgbench (TPC-B-like) through the bridge ≥ the best peer forwarding plain TCP":    true, // 0.98 vs 0.93
		"ClientHello parse: 0 allocs, < 200 ns (BenchmarkParse/go-tls13)":                 true,
		"route lookup: 0 allocs (BenchmarkLookup/exact/1)":                                false,
		"CPU per handshake ≤ that peer's":                                                 true, // 300 vs nginx 330
	}
	for _, tg := range r.Targets {
		for g, w := range want {
			if strings.HasPrefix(tg.Goal, g) {
				if !tg.Known || tg.Met != w {
					t.Errorf("%s: known=%v met=%v, want %v (%s; %s)", tg.Goal, tg.Known, tg.Met, w, tg.Value, tg.Margin)
				}
				delete(want, g)
				break
			}
		}
	}
	for g := range want {
		t.Errorf("target %q not evaluated", g)
	}
	for _, tg := range r.Targets {
		// Rounds: snigate 100, 90, 110 against nginx 80, 81, 82; 0.98 against 0.93 three times.
		if strings.HasPrefix(tg.Goal, "proxy CPU per connection ≤ the best peer's, at") && !strings.Contains(tg.Value, "per round ×1.25, ahead in 0 of 3") {
			t.Errorf("no per-round ratio: %q", tg.Value)
		}
		if tg.Area == "PostgreSQL" && !strings.Contains(tg.Value, "per round ×1.05, ahead in 3 of 3") {
			t.Errorf("no per-round ratio: %q", tg.Value)
		}
		if tg.Goal == "CPU per handshake ≤ that peer's" && !strings.Contains(tg.Value, "300 µs vs nginx 330 µs (×0.91; per round ×0.91, ahead in 3 of 3); the first batch after a start 430 vs 340 µs (×1.26)") {
			t.Errorf("terminate target lacks the first batch: %q", tg.Value)
		}
		if tg.Area == "PostgreSQL" && !strings.Contains(tg.Value, "vs nginx ×0.930") {
			t.Errorf("PostgreSQL target does not name the best peer: %q", tg.Value)
		}
	}
}

func TestMarkdownAndSVG(t *testing.T) {
	r := sample()
	md := r.Markdown("chart.svg", "## Notes\n\nhand-written")
	for _, s := range []string{"# Performance", "## Targets", "| snigate | 100 (90–110) |", "hand-written", "Test CPU",
		"| nginx | 2600 (2600–2600) | ×1.04 | 330 (330–330) | ×0.91 | 340 (340–340) | ×1.26 |"} {
		if !strings.Contains(md, strings.TrimSpace(s)) {
			t.Errorf("markdown lacks %q", s)
		}
	}
	d := xml.NewDecoder(strings.NewReader(r.SVG()))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
}
