package main

import (
	"maps"
	"testing"
)

// The tail of pgbench 15's output with -r (Debian 15.18, the builtin TPC-B script).
const pgbench15 = `tps = 419.865981 (without initial connection time)
statement latencies in milliseconds and failures:
         0.000           0  \set aid random(1, 100000 * :scale)
         0.000           0  \set bid random(1, 1 * :scale)
         0.394           0  BEGIN;
         0.526           0  UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
         1.198           0  SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
         0.662           0  UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
         1.008           0  UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
         0.457           0  INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
         0.508           0  END;
`

// Before PostgreSQL 15 the report had no failures column.
const pgbench14 = `statement latencies in milliseconds:
         0.002  \set aid random(1, 100000 * :scale)
         0.081  SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
`

func TestStatementLatencies(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      map[string]float64
	}{
		{"15", pgbench15, map[string]float64{
			"BEGIN": 0.394, "UPDATE pgbench_accounts": 0.526, "SELECT pgbench_accounts": 1.198,
			"UPDATE pgbench_tellers": 0.662, "UPDATE pgbench_branches": 1.008,
			"INSERT pgbench_history": 0.457, "END": 0.508,
		}},
		{"14", pgbench14, map[string]float64{"SELECT pgbench_accounts": 0.081}},
		{"no report", "tps = 419.865981 (without initial connection time)\n", nil},
	} {
		if got := statementLatencies(tc.out); !maps.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
