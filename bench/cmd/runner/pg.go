package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/snigate/snigate/bench/internal/pgsrv"
	"github.com/snigate/snigate/bench/internal/report"
)

// pgScripts are the pgbench workloads: the default TPC-B-like script (seven statements per
// transaction, writes) and select-only (-S: one query per transaction, the harder case for
// a proxy since every transaction is one round trip through it).
var pgScripts = []struct{ name, flag, tps, ratio string }{
	{"tpcb", "", report.MTPS, report.MTPSRatio},
	{"select", "-S", report.MTPSSelect, report.MTPSRatioSelect},
}

func pgbenchArgs(p params, flag string) []string {
	a := []string{"-n", "-c", strconv.Itoa(p.PGClients), "-j", "2", "-T", strconv.Itoa(p.PGSeconds)}
	if flag != "" {
		a = append(a, flag)
	}
	return a
}

func pgbenchArgsText(p params) string { return strings.Join(pgbenchArgs(p, "[-S]"), " ") }

var tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgRound runs pgbench directly over TLS and through snigate's SSLRequest bridge, in the
// order A B B A (A alternating between rounds). Why not A B: pgbench -n never vacuums, so
// every TPC-B run leaves the tables a little bigger and the next run a little slower; with
// A B the second target of each round pays for that drift, and with an odd number of rounds
// one target is second more often, which biased the median ratio by several percent.
func (e *env) pgRound(r int) {
	if e.pg == nil {
		return
	}
	sg := e.proxies["snigate"]
	if sg == nil || sg.proc == nil {
		return
	}
	for _, sc := range pgScripts {
		sum := map[string]float64{}
		runs := map[string]int{}
		ab := rotate([]string{"direct", "snigate"}, r)
		for _, t := range []string{ab[0], ab[1], ab[1], ab[0]} {
			port := e.pg.Port
			if t == "snigate" {
				port, _ = strconv.Atoi(sg.spec.Pass[strings.LastIndexByte(sg.spec.Pass, ':')+1:])
			}
			tps, err := e.pgbench(port, sc.flag)
			if err != nil {
				e.res.Error(fmt.Errorf("pgbench %s %s: %w", sc.name, t, err))
				continue
			}
			sum[t] += tps
			runs[t]++
		}
		for t, n := range runs {
			e.res.Add(report.TPG, sc.tps, t, "tps", sum[t]/float64(n))
		}
		if runs["direct"] == 2 && runs["snigate"] == 2 {
			e.res.Add(report.TPG, sc.ratio, "snigate", "ratio", sum["snigate"]/sum["direct"])
		}
	}
}

func (e *env) pgbench(port int, flag string) (float64, error) {
	bin, err := pgsrv.Pgbench()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(e.p.PGSeconds+60)*time.Second)
	defer cancel()
	args := append([]string{"-c", "0", bin}, pgbenchArgs(e.p, flag)...)
	args = append(args, pgsrv.ConnString(sniPG, "127.0.0.1", port))
	out, err := exec.CommandContext(ctx, "taskset", args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, lastLines(string(out), 5))
	}
	m := tpsRE.FindStringSubmatch(string(out))
	if m == nil {
		return 0, fmt.Errorf("no tps in: %s", lastLines(string(out), 5))
	}
	if strings.Contains(string(out), "number of failed transactions: ") && !strings.Contains(string(out), "number of failed transactions: 0 ") {
		return 0, fmt.Errorf("failed transactions: %s", lastLines(string(out), 8))
	}
	return strconv.ParseFloat(m[1], 64)
}
