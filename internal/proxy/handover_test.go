//go:build linux

package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/handover"
	"github.com/snigate/snigate/internal/metrics"
	"github.com/snigate/snigate/internal/snapshot"
	"github.com/snigate/snigate/internal/testutil"
)

// loggedProxy is a proxy whose access log goes to log.
func loggedProxy(t *testing.T, log *testutil.SyncBuffer) *Proxy {
	t.Helper()
	p := New(Options{Metrics: metrics.New(), HelloTimeout: 2 * time.Second, DialTimeout: time.Second, AccessLog: testAccessLog(t, log), Logger: testLogger(t)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return p
}

// echoOnce writes msg and expects it echoed.
func echoOnce(t *testing.T, c net.Conn, r *bufio.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q, %v; want %q", got, err, msg)
	}
}

// Two proxies in one process play the old and the new: the new serves the old one's
// listening socket, the old one's relayed connection moves over (DetachPairs → Resume)
// and goes on; its access line is the new proxy's, with the bytes of its whole life. A
// send that fails leaves the connection with the old proxy, which goes on serving it.
func TestHandOverPairs(t *testing.T) {
	var oldLog, newLog testutil.SyncBuffer
	old, nu := loggedProxy(t, &oldLog), loggedProxy(t, &newLog)
	addr := freeAddr(t)
	port := &snapshot.Port{Address: addr, Protocol: snapshot.ProtocolTCP,
		TCP: &snapshot.Listener{Name: "gw/tcp", Route: route("r", backend(t, "A", nil))}}
	snap := snapshot.New(1, []*snapshot.Port{port})
	if err := old.Apply(snap); err != nil {
		t.Fatal(err)
	}
	moved, kept := dial(t, addr), dial(t, addr)
	var rs [2]*bufio.Reader
	for i, c := range []net.Conn{moved, kept} {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		rs[i] = bufio.NewReader(c)
		if line, err := rs[i].ReadString('\n'); err != nil || line != "A\n" {
			t.Fatalf("greeting %q, %v", line, err)
		}
		echoOnce(t, c, rs[i], "before\n")
	}

	addrs, fds, err := old.ListenerFDs()
	if err != nil || len(addrs) != 1 || addrs[0] != addr {
		t.Fatalf("listener fds: %v %v %v", addrs, fds, err)
	}
	nu.Inherit(map[string]int{addr: fds[0]})
	if err := nu.Apply(snap); err != nil {
		t.Fatal(err)
	}
	nu.DropInherited()
	old.StopAccepting()

	// The first pair moves; the send of the second fails, and it stays.
	sends := 0
	sent, err := old.DetachPairs(func(st *handover.Pair, client, backend int) error {
		sends++
		if sends > 1 {
			return errors.New("the new process went away")
		}
		// As SCM_RIGHTS would: the new process gets duplicates, the old closes its own.
		dc, _ := unix.Dup(client)
		db, _ := unix.Dup(backend)
		if err := nu.Resume(st, dc, db); err != nil {
			unix.Close(dc)
			unix.Close(db)
			return err
		}
		return nil
	})
	if sent != 1 || err == nil || sends != 2 {
		t.Fatalf("DetachPairs: %d sent in %d sends, %v; want 1 of 2 and the second's error", sent, sends, err)
	}
	for i, c := range []net.Conn{moved, kept} {
		echoOnce(t, c, rs[i], "after\n")
		c.(*net.TCPConn).CloseWrite()
		if rest, err := io.ReadAll(rs[i]); err != nil || len(rest) > 0 {
			t.Fatalf("after the half-close: %q, %v", rest, err)
		}
	}
	// The one that moved is logged by the new proxy once, with every byte; the one that
	// stayed by the old. Which is which is the order DetachPairs met them in.
	const want = `bytes_in=13 bytes_out=15 duration=`
	nl := waitLog(t, &newLog, "msg=connection", want, "outcome=ok")
	ol := waitLog(t, &oldLog, "msg=connection", want, "outcome=ok")
	if strings.Count(newLog.String(), "msg=connection") != 1 || strings.Count(oldLog.String(), "msg=connection") != 1 {
		t.Fatalf("access lines: new\n%s\nold\n%s\nwant one each", newLog.String(), oldLog.String())
	}
	if !strings.Contains(nl, "route=r") || !strings.Contains(nl, "listener=gw/tcp") || !strings.Contains(ol, "route=r") {
		t.Fatalf("access lines lost their route or listener:\n%s\n%s", nl, ol)
	}
	// New connections are the new proxy's.
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "A\n" {
		t.Fatalf("greeting after the hand-over %q, %v", line, err)
	}
	echoOnce(t, c, r, "new\n")
}

// A handed-over connection counts against the AccessPolicies' limits of its path in the new
// proxy: with the route capped at one connection and one customer connection moved over,
// the new proxy refuses a second until the moved one ends. An upgrade does not reset a
// database's maxConnections, nor its clients' caps.
func TestHandOverCountsAccessLimits(t *testing.T) {
	var oldLog, newLog testutil.SyncBuffer
	old, nu := loggedProxy(t, &oldLog), loggedProxy(t, &newLog)
	addr := freeAddr(t)
	mkSnap := func() *snapshot.Snapshot {
		r := route("r", backend(t, "A", nil))
		r.Access = []*access.Policy{access.New("gw/cap", "TCPRoute gw/r", access.Spec{
			MaxConnections: 1, PerClient: access.PerClient{MaxConnections: 1}})}
		return snapshot.New(1, []*snapshot.Port{{Address: addr, Protocol: snapshot.ProtocolTCP,
			TCP: &snapshot.Listener{Name: "gw/tcp", Route: r}}})
	}
	if err := old.Apply(mkSnap()); err != nil {
		t.Fatal(err)
	}
	moved := dial(t, addr)
	moved.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(moved)
	if line, err := r.ReadString('\n'); err != nil || line != "A\n" {
		t.Fatalf("greeting %q, %v", line, err)
	}
	_, fds, err := old.ListenerFDs()
	if err != nil {
		t.Fatal(err)
	}
	nu.Inherit(map[string]int{addr: fds[0]})
	// The new process's own configuration: new Policy values, as a new binary builds them.
	if err := nu.Apply(mkSnap()); err != nil {
		t.Fatal(err)
	}
	nu.DropInherited()
	old.StopAccepting()
	sent, err := old.DetachPairs(func(st *handover.Pair, client, backend int) error {
		dc, _ := unix.Dup(client)
		db, _ := unix.Dup(backend)
		return nu.Resume(st, dc, db)
	})
	if sent != 1 || err != nil {
		t.Fatalf("DetachPairs: %d sent, %v", sent, err)
	}
	echoOnce(t, moved, r, "moved\n")

	refused := func() bool {
		c := dial(t, addr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && line == "A\n" {
			return false
		}
		return true
	}
	if !refused() {
		t.Fatal("a second connection admitted past maxConnections 1 while the handed-over one is open")
	}
	waitLog(t, &newLog, `msg="connection rejected"`, "policy=gw/cap", "outcome=route_connection_limit")
	moved.Close()
	deadline := time.Now().Add(5 * time.Second)
	for refused() {
		if time.Now().After(deadline) {
			t.Fatal("still refused after the handed-over connection ended: its count was not given back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
