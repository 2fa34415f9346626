package report

import (
	"fmt"
	"math"
	"strings"
)

// Standing is one proxy's place among all the proxies of a comparison, pooled over the
// rounds of several runs: in how many rounds it was the best, and the median over the
// rounds of its result divided by the best of the others' in the same round (below 1 is
// better when less is better, above 1 when more is).
type Standing struct {
	Proxy  string
	Best   int     // rounds in which it was the best of all
	Ratio  float64 // median per-round ratio to the best of the others
	Rounds int
}

// Pool compares snigate and the peers on one metric over the rounds of runs. A target "at
// least (or at most) the best peer's" can hold for one run by chance when proxies are
// even: the best of several noisy results is the highest of them. Pooling the per-round
// standing of every proxy, snigate and peers alike, over many rounds tells a lead from a
// draw, which no single run's medians do. Rounds are paired within a run by their index
// (the harness measures every proxy once per round); a proxy a run did not measure is left
// out of that run's rounds. lower says that less is better.
func Pool(runs []*Results, test, name string, lower bool) []Standing {
	proxies := append([]string{"snigate"}, Peers...)
	ratios := map[string][]float64{}
	best := map[string]int{}
	for _, r := range runs {
		vals, n := map[string][]float64{}, -1
		for _, p := range proxies {
			if m := r.Get(test, name, p); m != nil {
				vals[p] = m.Values
				if n < 0 || len(m.Values) < n {
					n = len(m.Values)
				}
			}
		}
		if len(vals) < 2 {
			continue
		}
		for i := 0; i < n; i++ {
			win, _ := bestOf(proxies, vals, i, "", lower)
			best[win]++
			for p, v := range vals {
				if _, other := bestOf(proxies, vals, i, p, lower); other != 0 {
					ratios[p] = append(ratios[p], v[i]/other)
				}
			}
		}
	}
	var out []Standing
	for _, p := range proxies {
		if rs := ratios[p]; len(rs) > 0 {
			out = append(out, Standing{Proxy: p, Best: best[p], Ratio: Median(rs), Rounds: len(rs)})
		}
	}
	return out
}

// bestOf returns the proxy with the best value in round i, and that value, leaving out
// skip; ties go to the first in proxies' order.
func bestOf(proxies []string, vals map[string][]float64, i int, skip string, lower bool) (string, float64) {
	bp, bv := "", 0.0
	for _, p := range proxies {
		if v, ok := vals[p]; ok && p != skip && (bp == "" || better(v[i], bv, lower)) {
			bp, bv = p, v[i]
		}
	}
	return bp, bv
}

// The judging rule of the targets where proxies are even. Per new connection every kind of
// kernel work was measured within a microsecond of the best peer's, and latency, requests
// under concurrency and pgbench came out draws between equals (the runs of 2026-12-05 and
// 06, bench/results/notes.md): one run's medians then crown whoever its noise favours. Such
// a target is judged on the per-round ratio to the best of the other proxies, pooled over
// the rounds of at least MinPooledRuns full runs (Pool): met at ×1.03 or better (×0.97 where
// more is better). When every proxy's pooled ratio lies within the same ±3 % band, no proxy
// leads and the target is at the floor, a draw, reported as such rather than missed. The
// band is centred on the proxies' own ratios, not on 1: the best of the others in a round is
// the highest of several noisy equals, so among equals every proxy's ratio to it sits below
// 1 by the same amount (four even proxies at 5 % noise come out near ×0.95 each).
const (
	MinPooledRuns = 3
	FloorSlack    = 0.03
)

// FloorTarget judges "test/name at least as good as the best peer, at the floor" over
// r.Pooled. lower says that less is better.
func (r *Results) FloorTarget(area, goal, test, name string, lower bool) Target {
	var full []*Results
	for _, p := range r.Pooled {
		if p.Mode == "full" {
			full = append(full, p)
		}
	}
	goal += fmt.Sprintf(", at the floor: the per-round ratio to the best peer pooled over ≥ %d full runs %s ×%.2f", MinPooledRuns,
		map[bool]string{true: "≤", false: "≥"}[lower], map[bool]float64{true: 1 + FloorSlack, false: 1 - FloorSlack}[lower])
	if len(full) < MinPooledRuns {
		return unknown(area, goal, fmt.Sprintf("%d full runs to pool (bench/results/runs/ and this one), %d needed", len(full), MinPooledRuns))
	}
	st := Pool(full, test, name, lower)
	var mine *Standing
	lo, hi := math.Inf(1), math.Inf(-1)
	cells := make([]string, 0, len(st))
	for i := range st {
		s := &st[i]
		if s.Proxy == "snigate" {
			mine = s
		}
		lo, hi = math.Min(lo, s.Ratio), math.Max(hi, s.Ratio)
		cells = append(cells, fmt.Sprintf("%s ×%.3f (best in %d)", s.Proxy, s.Ratio, s.Best))
	}
	draw := len(st) > 1 && hi <= lo*(1+FloorSlack)/(1-FloorSlack)
	if mine == nil {
		return unknown(area, goal, "snigate was not measured in the pooled runs")
	}
	limit := 1 + FloorSlack
	if !lower {
		limit = 1 - FloorSlack
	}
	what := fmt.Sprintf("%d rounds of %d runs: %s", mine.Rounds, len(full), strings.Join(cells, ", "))
	var t Target
	if lower {
		t = atMost(area, goal, mine.Ratio, limit, what)
	} else {
		t = atLeast(area, goal, mine.Ratio, limit, what)
	}
	if draw {
		if !t.Met {
			t.Met = true
			t.Margin = "at the floor"
		}
		t.Margin += fmt.Sprintf("; a draw: every proxy's ratio within ×%.3f–%.3f, ±3 %% of one another", lo, hi)
	}
	return t
}
