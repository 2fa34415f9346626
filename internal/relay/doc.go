// Package relay accepts, routes and relays TCP connections from a few event loops, so that
// a proxied connection costs no goroutine at any point and a message costs one epoll wait,
// as in an event loop written in C.
//
// New(n) starts n loops (one per CPU is right). Give it a listening socket and an Acceptor:
// the loops accept its connections themselves, and for each one the Acceptor names a
// Router, which decides from the client's first bytes where it goes. The loop that accepted
// reads those bytes, asks the router, dials the backend (a raw non-blocking connect,
// registered once for the connect and the relay), writes the bytes to it and relays,
// without a goroutine or Go's poller at any point:
//
//	r, _ := relay.New(runtime.GOMAXPROCS(0))
//	ln, _ := r.Listen(fd, acceptor) // acceptor.Accepted(fd, peer) → router, tag, deadline
//	// router.Route(p, tag, pre) → Wait, Release (the socket comes back) or Connect
//	...
//	ln.Close() // no Accepted call runs any more once it returns
//
// Connections a router releases (Router.Release) go on with Go's net package; they can come
// back to the relay once their backend is chosen: let a loop dial it and attach the client,
// with bytes already read from the client (the ClientHello) written to the backend first,
//
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
// The done callback (Router.Done for accepted clients) runs on a loop once both
// directions have ended; p.Stop ends a pair early (a drain that ran out of time).
//
// Why not a goroutine per direction: a goroutine parked in Read keeps its stack (2 KiB at
// least, usually more), so an idle database session held two of them, about 8 KB of the
// proxy's memory, where HAProxy needs 3.3 KB in all. Here an idle pair is one small struct.
//
// How it waits: each loop has an edge-triggered epoll set of its own, and a goroutine that
// waits on it with a raw epoll_pwait, which the runtime is not told of: the goroutine keeps
// its P and its thread, and the kernel wakes that thread directly when a socket is ready.
// New raises GOMAXPROCS by n so that the rest of the program keeps the Ps it had (and
// Close lowers it again). Through Go's poller a message cost three epoll calls and a
// scheduler round (loop.run says more, and how the garbage collector still stops the
// loops). An idle loop blocks with an ordinary system call after 100 ms, which lets the
// runtime take its P back. Listening sockets sit in every loop's set with EPOLLEXCLUSIVE,
// so a new connection wakes one loop, which keeps what it accepts.
//
// A loop that has just worked may ask its set again without waiting for up to 10 µs
// before it sleeps (WithSpin), while such spins have been paying (finding events soon
// enough to cost less than the sleep and wake-up they spare): under many busy connections
// that spares the CPUs sending to the loop a wake-up each, which bound the rate when they
// are the busy ones; new connections, whose events come further apart, and a loop sharing
// its CPU with its clients mostly do not spin (spin_linux.go has the rule and the numbers).
//
// New(n, WithIOURing(true)) has the loops wait on an io_uring instead (Linux 6.12, where
// neither seccomp nor kernel.io_uring_disabled refuses it; epoll otherwise, and Wait says
// why): the same sockets, reads and writes, but a busy loop waits for a few completions at
// once, which costs fewer wake-ups (ring_linux.go has the numbers, and why it is not the
// default: new connections cost more on it in the benchmark machine's slow phases).
//
// What wakes a goroutine is not done on a loop but handed to a goroutine of the relay's own
// (Router.Release, Dial's outcome): a goroutine made runnable on a loop would wait in the
// run queue of the P the loop holds (see handoffs).
//
// How bytes move: small reads go through a pooled 16 KiB buffer that is held only while its
// bytes wait for the destination; a read that fills the buffer switches the direction to
// splice(2) through a pooled pipe until the source runs dry. Idle pairs hold their two
// sockets and nothing else. A clean EOF is passed on as a half-close (shutdown SHUT_WR); an
// error on either side (a reset) ends both directions and is passed on as a reset: the
// other side is closed with SO_LINGER 0, because a FIN would make a reply cut off by a
// crash look complete to a peer that reads until the end of the stream.
//
// A live upgrade moves relaying pairs to another process: p.Detach posts a task to the
// pair's loop, which takes both sockets out of its set untouched, reads out the bytes its
// buffer and splice pipe hold, and hands them over with each direction's half-close state
// (Detached) instead of calling done; r.Resume, in the process that received the sockets,
// goes on from there. Nothing in the per-event path looks for it.
//
// The relay is made of Linux system calls. Elsewhere the package compiles, so that the rest
// of snigate builds and vets on a developer's machine, but New returns an error saying so
// (relay_other.go).
package relay
