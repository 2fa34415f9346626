// Package relay moves bytes both ways between pairs of connected TCP sockets from a few
// event loops, so that a proxied connection costs no goroutine while it is idle.
//
// Use it once a connection is accepted (Adopt) or routed (Dial and Attach, Start). New(n)
// starts n loops (one per CPU is right). Either let a loop dial the backend and attach the
// client to it, with the bytes already read from the client (the ClientHello) written to the
// backend first:
//
//	r, _ := relay.New(runtime.GOMAXPROCS(0))
//	p, err := r.Dial(endpoint, relay.DialOptions{Timeout: 5 * time.Second})
//	if err != nil { ... } // try another endpoint
//	p.Attach(client, hello, relay.Options{ExpectTLS: true}, func(res relay.Result) {
//		// both sockets are closed: Attach took the client's over
//	})
//
// or hand it two connections you made yourself (after talking to the backend first, as the
// PostgreSQL bridge does):
//
//	p, _ := r.Start(client, backend, relay.Options{}, func(res relay.Result) {
//		// both sockets are closed: Start took them over
//	})
//
// or, cheapest, give it the freshly accepted socket and let a loop read the client's first
// bytes, ask a Router where they go, dial and relay, with no goroutine at any point:
//
//	p := r.Adopt(fd, time.Now().Add(helloTimeout), router, conn)
//	// router.Route(p, conn, pre) → Wait, Release (the socket comes back) or Connect
//
// (Adopt leaves TCP_NODELAY to the listening socket, which accepted sockets inherit.)
//
// The done callback (Router.Done for Adopt) runs on a loop once both directions have ended;
// p.Stop ends a pair early (a drain that ran out of time).
//
// Why not a goroutine per direction: a goroutine parked in Read keeps its stack (2 KiB at
// least, usually more), so an idle database session held two of them, about 8 KB of the
// proxy's memory, where HAProxy needs 3.3 KB in all. Here an idle pair is one small struct.
//
// How it waits: each loop has an edge-triggered epoll set of its own, and that epoll fd sits
// in Go's network poller like any socket, so a loop with nothing to do is a parked goroutine
// that holds no thread and no P, and the runtime keeps scheduling accepts and handshakes
// normally (a loop blocked in epoll_wait would hold a thread and, with GOMAXPROCS=1, starve
// the runtime's own poller for up to 10 ms at a time). Adopted sockets are registered for
// input only and get EPOLLOUT once a write to them falls short, so setting up a connection
// wakes a loop only when there is something to read.
//
// How bytes move: small reads go through a pooled 16 KiB buffer that is held only while its
// bytes wait for the destination; a read that fills the buffer switches the direction to
// splice(2) through a pooled pipe until the source runs dry. Idle pairs hold their two
// sockets and nothing else. A clean EOF is passed on as a half-close (shutdown SHUT_WR); an
// error on either side ends both directions.
//
// The relay is made of Linux system calls. Elsewhere the package compiles, so that the rest
// of snigate builds and vets on a developer's machine, but New returns an error saying so
// (relay_other.go).
package relay
