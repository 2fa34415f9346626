// Package backend holds the benchmark backends' connection handlers (see package wire for
// the protocol); bench/cmd/backend serves them, and tests serve them in process.
package backend

import (
	"errors"
	"io"
	"log"
	"net"
	"time"

	"github.com/snigate/snigate/bench/internal/wire"
)

// Serve accepts on ln until it is closed, handling each connection in its own goroutine.
func Serve(ln net.Listener, h func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if isClosed(err) {
				return
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

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

var flight, tinyFlight = wire.Flight(), wire.TinyFlight()

// Echo reads a ClientHello record, answers the flight, then echoes.
func Echo(c net.Conn) { hello(c, flight) }

// Tiny reads a ClientHello record, answers the tiny flight, then echoes.
func Tiny(c net.Conn) { hello(c, tinyFlight) }

func hello(c net.Conn, answer []byte) {
	buf := make([]byte, 4096)
	if _, err := wire.ReadRecord(c, buf); err != nil {
		return
	}
	if _, err := c.Write(answer); err != nil {
		return
	}
	echo(c, buf)
}

// Plain echoes from the first byte.
func Plain(c net.Conn) { echo(c, make([]byte, 4096)) }

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

// bulkData is what Bulk sends: 256 KB written again and again, starting with a TLS flight
// as a real server's answer does.
var bulkData = func() []byte {
	b := make([]byte, 256<<10)
	copy(b, wire.Flight())
	return b
}()

// Bulk reads a ClientHello record and an 8-byte size N, sends N bytes, then waits for the
// client to close.
func Bulk(c net.Conn) {
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
