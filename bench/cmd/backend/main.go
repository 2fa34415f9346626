// Command backend is the benchmark's backend: the servers behind the proxies under test.
// Every listener is optional.
//
//	backend --echo 127.0.0.1:9001 --bulk 127.0.0.1:9002 --plain 127.0.0.1:9003 \
//	        --tls 127.0.0.1:9004 --cert tls.pem --key tls-key.pem
//
//	--echo   reads a ClientHello record, answers wire.FlightSize bytes, then echoes
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
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/wire"
)

func main() {
	echoAddr := flag.String("echo", "", "hello+flight+echo listener")
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
		go serve(listen(*echoAddr), handleEcho)
	}
	if *bulkAddr != "" {
		go serve(listen(*bulkAddr), handleBulk)
	}
	if *plainAddr != "" {
		go serve(listen(*plainAddr), handlePlain)
	}
	if *tlsAddr != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			log.Fatal(err)
		}
		cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
		go serve(tls.NewListener(listen(*tlsAddr), cfg), handlePlain)
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

func serve(ln net.Listener, h func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			log.Printf("accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			h(c)
		}()
	}
}

var flight = wire.Flight()

func handleEcho(c net.Conn) {
	buf := make([]byte, 4096)
	if _, err := wire.ReadRecord(c, buf); err != nil {
		return
	}
	if _, err := c.Write(flight); err != nil {
		return
	}
	echo(c, buf)
}

func handlePlain(c net.Conn) { echo(c, make([]byte, 4096)) }

func echo(c net.Conn, buf []byte) {
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// bulkData is what the bulk port sends: 256 KB written again and again, starting with a TLS
// flight as a real server's answer does.
var bulkData = func() []byte {
	b := make([]byte, 256<<10)
	copy(b, wire.Flight())
	return b
}()

func handleBulk(c net.Conn) {
	buf := make([]byte, 4096)
	if _, err := wire.ReadRecord(c, buf); err != nil {
		return
	}
	if _, err := io.ReadFull(c, buf[:8]); err != nil {
		return
	}
	n := wire.ParseBulkRequest(buf[:8])
	for n > 0 {
		chunk := bulkData
		if int64(len(chunk)) > n {
			chunk = chunk[:n]
		}
		w, err := c.Write(chunk)
		n -= int64(w)
		if err != nil {
			return
		}
	}
	io.Copy(io.Discard, c) // until the client closes
}
