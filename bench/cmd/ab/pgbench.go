package main

// pgbench through each target, and its per-statement latencies.

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/snigate/snigate/bench/internal/pgsrv"
)

// pgSeconds is how long each pgbench measurement runs; the per-transaction numbers divide
// by tps × pgSeconds (pgbench's rate leaves the connections' set-up out).
const pgSeconds = 3

// pgbench runs pgbench for pgSeconds against port (8 clients, 2 threads, TLS), on CPU 0.
// Besides the rate it returns each SQL statement's mean latency in ms (pgbench -r), keyed
// by statementKey: what a client waits per statement through the proxy under this load,
// where the rate alone mixes the turn-arounds with the time transactions wait on each
// other's row locks.
func pgbench(port int, selectOnly bool) (float64, map[string]float64, error) {
	bin, err := pgsrv.Pgbench()
	if err != nil {
		return 0, nil, err
	}
	args := []string{"-c", "0", bin, "-n", "-r", "-c", "8", "-j", "2", "-T", strconv.Itoa(pgSeconds)}
	if selectOnly {
		args = append(args, "-S")
	}
	args = append(args, pgsrv.ConnString(sniPG, "127.0.0.1", port))
	out, err := exec.Command("taskset", args...).CombinedOutput()
	if err != nil {
		return 0, nil, fmt.Errorf("pgbench: %v: %s", err, out)
	}
	m := tpsRE.FindStringSubmatch(string(out))
	if m == nil {
		return 0, nil, fmt.Errorf("no tps in: %s", out)
	}
	tps, err := strconv.ParseFloat(m[1], 64)
	return tps, statementLatencies(string(out)), err
}

// statementLatencies reads the per-statement report of pgbench -r: after its heading, a
// line per command with the mean latency in ms first (and, since PostgreSQL 15, the
// failures next). Meta-commands (\set) are left out.
func statementLatencies(out string) map[string]float64 {
	_, report, ok := strings.Cut(out, "statement latencies in milliseconds")
	if !ok {
		return nil
	}
	lat := map[string]float64{}
	for _, line := range strings.Split(report, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		ms, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			break // the report ended
		}
		cmd := f[1:]
		if _, err := strconv.Atoi(cmd[0]); err == nil && len(cmd) > 1 {
			cmd = cmd[1:] // the failures column
		}
		if strings.HasPrefix(cmd[0], "\\") {
			continue
		}
		lat[statementKey(cmd)] = ms
	}
	return lat
}

// statementKey names a statement by its verb and the first pgbench table it names:
// "UPDATE pgbench_branches", "SELECT pgbench_accounts", "BEGIN".
func statementKey(words []string) string {
	verb := strings.ToUpper(strings.TrimSuffix(words[0], ";"))
	for _, w := range words[1:] {
		if strings.HasPrefix(w, "pgbench_") {
			return verb + " " + strings.TrimRight(w, ";")
		}
	}
	return verb
}
