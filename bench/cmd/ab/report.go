package main

// What ab prints: each metric's medians and the per-round ratios.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// report prints each metric's medians and the per-round ratios to the first proxy target.
func report(targets []*target, res map[string][]sample) {
	var ref *target
	for _, t := range targets {
		if t.kind != "direct" {
			ref = t
			break
		}
	}
	metrics := map[string]bool{}
	for _, ss := range res {
		for _, s := range ss {
			for k := range s {
				metrics[k] = true
			}
		}
	}
	names := make([]string, 0, len(metrics))
	for k := range metrics {
		names = append(names, k)
	}
	sort.Strings(names)
	var direct []sample
	for _, t := range targets {
		if t.kind == "direct" {
			direct = res[t.name]
		}
	}
	for _, mname := range names {
		fmt.Printf("\n%s\n", mname)
		for _, t := range targets {
			var v, ratio []float64
			for i, s := range res[t.name] {
				x, ok := s[mname]
				if !ok {
					continue
				}
				v = append(v, x)
				if ref != nil && t != ref {
					if y, ok := res[ref.name][i][mname]; ok && y != 0 {
						ratio = append(ratio, x/y)
					}
				}
			}
			if len(v) == 0 {
				continue
			}
			line := fmt.Sprintf("  %-10s %9.3g (%.3g–%.3g)", t.name, median(v), slices.Min(v), slices.Max(v))
			if len(ratio) > 0 {
				line += fmt.Sprintf("   ÷ %s per round: median ×%.3f (%.3f–%.3f)", ref.name, median(ratio), slices.Min(ratio), slices.Max(ratio))
			}
			if strings.HasPrefix(mname, "p") && direct != nil && t.kind != "direct" {
				var added []float64
				for i, s := range res[t.name] {
					added = append(added, s[mname]-direct[i][mname])
				}
				line += fmt.Sprintf("   added: median %+.1f", median(added))
			}
			fmt.Println(line)
		}
	}
}
