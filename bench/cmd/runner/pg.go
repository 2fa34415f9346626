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

func pgbenchArgs(p params) []string {
	return []string{"-n", "-S", "-c", strconv.Itoa(p.PGClients), "-j", "2", "-T", strconv.Itoa(p.PGSeconds)}
}

func pgbenchArgsText(p params) string { return strings.Join(pgbenchArgs(p), " ") }

var tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgRound runs pgbench directly over TLS and through snigate's SSLRequest bridge.
func (e *env) pgRound(r int) {
	if e.pg == nil {
		return
	}
	sg := e.proxies["snigate"]
	if sg == nil || sg.proc == nil {
		return
	}
	got := map[string]float64{}
	for _, t := range rotate([]string{"direct", "snigate"}, r) {
		port := e.pg.Port
		if t == "snigate" {
			port, _ = strconv.Atoi(sg.spec.Pass[strings.LastIndexByte(sg.spec.Pass, ':')+1:])
		}
		tps, err := e.pgbench(port)
		if err != nil {
			e.res.Error(fmt.Errorf("pgbench %s: %w", t, err))
			continue
		}
		got[t] = tps
		e.res.Add(report.TPG, report.MTPS, t, "tps", tps)
	}
	if d, s := got["direct"], got["snigate"]; d > 0 && s > 0 {
		e.res.Add(report.TPG, report.MTPSRatio, "snigate", "ratio", s/d)
	}
}

func (e *env) pgbench(port int) (float64, error) {
	bin, err := pgsrv.Pgbench()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(e.p.PGSeconds+60)*time.Second)
	defer cancel()
	args := append([]string{"-c", "0", bin}, pgbenchArgs(e.p)...)
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
