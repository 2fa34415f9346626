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

// pgRound runs pgbench directly over TLS, through snigate's SSLRequest bridge, and through
// the peers that forward the session as plain TCP (HAProxy, nginx: they cannot answer the
// SSLRequest and route by SNI, so this is the least work a proxy can do per statement), in
// a palindrome order rotated every round: A B C D D C B A. Why not A B C D: pgbench -n
// never vacuums, so every TPC-B run leaves the tables a little bigger and the next run a
// little slower; in a palindrome every target's two runs sit on average at the same place,
// so a steady drift costs them all the same (with A B, snigate ran second three times in
// five rounds, which biased the median ratio by several percent).
func (e *env) pgRound(r int) {
	if e.pg == nil {
		return
	}
	targets := []string{"direct"}
	ports := map[string]int{"direct": e.pg.Port}
	for _, kind := range []string{"snigate", "haproxy", "nginx"} {
		inst := e.proxies[kind]
		if inst == nil || inst.proc == nil {
			continue
		}
		a := inst.spec.Forward
		if kind == "snigate" {
			a = inst.spec.Pass
		}
		if a == "" {
			continue
		}
		ports[kind], _ = strconv.Atoi(a[strings.LastIndexByte(a, ':')+1:])
		targets = append(targets, kind)
	}
	if len(targets) < 2 {
		return
	}
	order := rotate(targets, r)
	for i := len(order) - 1; i >= 0; i-- {
		order = append(order, order[i])
	}
	for _, sc := range pgScripts {
		sum := map[string]float64{}
		runs := map[string]int{}
		for _, t := range order {
			tps, err := e.pgbench(ports[t], sc.flag)
			if err != nil {
				e.res.Error(fmt.Errorf("pgbench %s %s: %w", sc.name, t, err))
				continue
			}
			sum[t] += tps
			runs[t]++
		}
		for t, n := range runs {
			e.res.Add(report.TPG, sc.tps, t, "tps", sum[t]/float64(n))
			if t != "direct" && n == 2 && runs["direct"] == 2 {
				e.res.Add(report.TPG, sc.ratio, t, "ratio", sum[t]/sum["direct"])
			}
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
