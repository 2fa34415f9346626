package report

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
