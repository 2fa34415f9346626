// Command backend is the benchmark's backend: the servers behind the proxies under test.
// Every listener is optional.
//
//	backend --echo 127.0.0.1:9001 --bulk 127.0.0.1:9002 --plain 127.0.0.1:9003 \
//	        --tls 127.0.0.1:9004 --cert tls.pem --key tls-key.pem
//
//	--echo   reads a ClientHello record, answers wire.FlightSize bytes, then echoes
//	--tiny   reads a ClientHello record, answers wire.TinyFlightSize bytes, then echoes
//	--bulk   reads a ClientHello record and an 8-byte size N, sends N bytes
//	--plain  echoes from the first byte (behind a proxy that terminates TLS)
//	--tls    a real crypto/tls echo server, to prove that passthrough is byte for byte
//
// It prints "ready" on stdout once every listener is bound, and stops on SIGTERM, SIGINT
// or after --max-lifetime.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/backend"
	"github.com/snigate/snigate/bench/internal/wire"
)

func main() {
	echoAddr := flag.String("echo", "", "hello+flight+echo listener")
	tinyAddr := flag.String("tiny", "", "hello+tiny flight+echo listener")
	bulkAddr := flag.String("bulk", "", "bulk sender listener")
	plainAddr := flag.String("plain", "", "plain echo listener")
	tlsAddr := flag.String("tls", "", "real TLS echo listener")
	certFile := flag.String("cert", "", "PEM certificate of the --tls listener")
	keyFile := flag.String("key", "", "PEM key of the --tls listener")
	maxLife := flag.Duration("max-lifetime", 30*time.Minute, "exit after this long")
	flag.Parse()
	log.SetPrefix("backend: ")
	log.SetFlags(0)

	lc := net.ListenConfig{KeepAlive: wire.NoKeepAlive}
	listen := func(addr string) net.Listener {
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		return ln
	}
	if *echoAddr != "" {
		go backend.Serve(listen(*echoAddr), backend.Echo)
	}
	if *tinyAddr != "" {
		go backend.Serve(listen(*tinyAddr), backend.Tiny)
	}
	if *bulkAddr != "" {
		go backend.Serve(listen(*bulkAddr), backend.Bulk)
	}
	if *plainAddr != "" {
		go backend.Serve(listen(*plainAddr), backend.Plain)
	}
	if *tlsAddr != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			log.Fatal(err)
		}
		cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
		go backend.Serve(tls.NewListener(listen(*tlsAddr), cfg), backend.Plain)
	}
	fmt.Println("ready")

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sigs:
	case <-time.After(*maxLife):
		log.Print("max lifetime reached")
	}
}
