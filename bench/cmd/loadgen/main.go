// Command loadgen is the benchmark's load generator. Each command is bounded in count and
// time, prints one JSON object on stdout and exits non-zero on error. The runner starts it
// pinned to CPU 0; it can be run by hand against any proxy in front of bench/cmd/backend.
//
//	loadgen conns     --addr A --sni S [-n 5000] [-c 16] [--max 30s]   new connections
//	                  (SIGINT or SIGTERM: stop early and print the result)
//	loadgen bulk      --addr A --sni S [--bytes 1073741824]            one download
//	loadgen latency   --addr A --sni S [-n 10000]                      64-byte echo
//	loadgen idle      --addr A --sni S [-n 3000] [--hold 60s]          open, print, wait
//	loadgen handshake --addr A --sni S [-n 2000] [-c 16]               TLS (terminate mode)
//	loadgen probe     --addr A --sni S --ca ca.pem                     one real TLS echo
//
// idle prints {"ready":true,...} once all connections are open, then holds them until its
// standard input closes or --hold passes.
package main

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/load"
	"github.com/snigate/snigate/bench/internal/wire"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen conns|bulk|latency|rr|idle|handshake|probe --addr A --sni S [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	addr := fs.String("addr", "", "proxy (or backend) address")
	sni := fs.String("sni", "", "server name")
	n := fs.Int("n", 0, "count (connections, round trips, handshakes)")
	conc := fs.Int("c", 16, "concurrent connections")
	max := fs.Duration("max", 60*time.Second, "stop after this long")
	bytes := fs.Int64("bytes", 1<<30, "bulk: bytes to download")
	hold := fs.Duration("hold", 60*time.Second, "idle: hold connections at most this long")
	caFile := fs.String("ca", "", "probe: PEM CA file")
	shape := fs.String("shape", "std", "conns: std, tiny, fin or last (see load.Shapes)")
	fs.Parse(os.Args[2:])
	if *addr == "" || *sni == "" {
		fail(errors.New("--addr and --sni are required"))
	}
	def := func(v, d int) int {
		if v > 0 {
			return v
		}
		return d
	}

	var hello []byte
	if cmd != "handshake" && cmd != "probe" {
		var err error
		if hello, err = wire.ClientHello(*sni); err != nil {
			fail(err)
		}
	}
	var out any
	switch cmd {
	case "conns":
		// SIGINT or SIGTERM ends the run early with a result: the runner's "load while
		// reloading" runs until the last reload was seen.
		stop := make(chan struct{})
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go func() { <-sigs; close(stop) }()
		sh, ok := load.Shapes[*shape]
		if !ok {
			fail(fmt.Errorf("unknown --shape %q", *shape))
		}
		r := load.Conns(*addr, hello, sh, def(*n, 5000), *conc, *max, stop)
		out = r
		if r.Failed > 0 || r.OK == 0 {
			emit(out)
			os.Exit(1)
		}
	case "bulk":
		r, err := load.Bulk(*addr, hello, *bytes)
		if err != nil {
			fail(err)
		}
		out = r
	case "latency":
		r, err := load.Latency(*addr, hello, def(*n, 10000), 200)
		if err != nil {
			fail(err)
		}
		out = r
	case "rr":
		r, err := load.RR(*addr, hello, *conc, int64(def(*n, 1_000_000)), *max)
		if err != nil {
			fail(err)
		}
		out = r
	case "idle":
		conns, err := load.OpenIdle(*addr, hello, def(*n, 3000), *conc)
		if err != nil {
			fail(err)
		}
		emit(map[string]any{"ready": true, "open": len(conns)})
		done := make(chan struct{})
		go func() { io.Copy(io.Discard, bufio.NewReader(os.Stdin)); close(done) }()
		select {
		case <-done:
		case <-time.After(*hold):
		}
		load.CloseAll(conns)
		out = map[string]any{"closed": len(conns)}
	case "handshake":
		r := load.Handshakes(*addr, *sni, def(*n, 2000), *conc, *max)
		out = r
		if r.Failed > 0 || r.OK == 0 {
			emit(out)
			os.Exit(1)
		}
	case "probe":
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			fail(errors.New("no certificate in --ca"))
		}
		if err := load.Probe(*addr, *sni, roots); err != nil {
			fail(err)
		}
		out = map[string]any{"ok": true}
	default:
		fail(fmt.Errorf("unknown command %q", cmd))
	}
	emit(out)
}

func emit(v any) {
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

func fail(err error) {
	emit(map[string]string{"error": err.Error()})
	os.Exit(1)
}
