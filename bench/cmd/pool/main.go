// Command pool judges the targets that ask for at least the best peer's result over the
// rounds of several full runs at once: for each of them, every proxy's standing against
// the best of the others, round by round (report.Pool). It reads the JSON files that
// bench/run.sh writes (bench/results/latest.json; the runs the notes cite are kept in
// bench/results/runs/):
//
//	go run ./bench/cmd/pool bench/results/runs/*.json
//
// Each line gives, per proxy, in how many rounds it was the best and the median of its
// per-round ratio to the best of the others. A proxy that leads has a ratio past 1 in its
// favour (below 1 where less is better); when every proxy's is on the wrong side of 1, none
// leads, and which one a single run's medians put first is that run's noise.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/snigate/snigate/bench/internal/report"
)

// compared lists the metrics whose targets compare snigate with the best peer.
var compared = []struct {
	test, name, label string
	lower             bool
}{
	{report.TRR, report.MRate, "requests/s, 50 connections", false},
	{report.TPG, report.MTPSSelect, "pgbench -S, transactions/s", false},
	{report.TPG, report.MTPS, "pgbench TPC-B, transactions/s", false},
	{report.TLatency, report.MAddP50, "latency added, p50", true},
	{report.TLatency, report.MAddP99, "latency added, p99", true},
	{report.TConns, report.MCPU, "CPU per new connection", true},
	{report.TShapes, report.MCPUTiny, "CPU per new connection, tiny", true},
	{report.TShapes, report.MCPUFin, "CPU per new connection, fin", true},
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pool RESULTS.json...")
		os.Exit(2)
	}
	var runs []*report.Results
	for _, path := range os.Args[1:] {
		r, err := report.ReadJSON(path)
		if errors.Is(err, report.ErrNotARun) {
			fmt.Fprintf(os.Stderr, "pool: %s: %v: left out\n", path, err)
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "pool: %s: %v\n", path, err)
			os.Exit(1)
		}
		if r.Mode != "full" {
			fmt.Fprintf(os.Stderr, "pool: %s: a %s run, not a full one: left out\n", path, r.Mode)
			continue
		}
		runs = append(runs, r)
	}
	fmt.Printf("%d full runs; per proxy: rounds it was the best in, median per-round ratio to the best of the others\n", len(runs))
	for _, c := range compared {
		st := report.Pool(runs, c.test, c.name, c.lower)
		if len(st) == 0 {
			continue
		}
		cells := make([]string, len(st))
		for i, s := range st {
			cells[i] = fmt.Sprintf("%s %d of %d, ×%.3f", s.Proxy, s.Best, s.Rounds, s.Ratio)
		}
		fmt.Printf("%-30s %s\n", c.label, strings.Join(cells, " | "))
	}
}
