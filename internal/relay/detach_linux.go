package relay

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Detach takes a relaying pair off its loop without ending it, for another process (a live
// upgrade): its sockets leave the loop's set untouched, the bytes it holds (a buffer, a
// splice pipe) come out with them, and its done callback (or Router.Done) is never called.
// done gets the pair's state, or ErrNotDetached (wrapped) and the pair goes on as if
// nothing was asked: it runs on the pair's loop and must not block.
//
// The request is a task posted to the loop: the relay's per-event path does not look for it.
// maxPending bounds the bytes in flight a detached pair may carry.
func (p *Pair) Detach(maxPending int, done func(Detached, error)) {
	if !p.l.post(func() { done(p.detach(maxPending)) }) {
		done(Detached{}, errClosed)
	}
}

// detach is Detach on the loop.
func (p *Pair) detach(maxPending int) (Detached, error) {
	if p.phase != phaseRelaying {
		return Detached{}, fmt.Errorf("%w: in phase %d", ErrNotDetached, p.phase)
	}
	// A socket that failed or hung up ends the pair at its next run, and a stopped pair is
	// ending: those end here, where their callbacks are expected.
	if p.broke != 0 || p.sticky[0] || p.sticky[1] || !p.ownsA || !p.ownsB {
		return Detached{}, fmt.Errorf("%w: ending", ErrNotDetached)
	}
	pending := 0
	for i := range p.d {
		pending += p.d[i].end - p.d[i].off + p.d[i].inPipe
	}
	if pending > maxPending {
		return Detached{}, fmt.Errorf("%w: %d bytes in flight", ErrNotDetached, pending)
	}
	p.mu.Lock()
	if p.stopped || p.closed {
		p.mu.Unlock()
		return Detached{}, fmt.Errorf("%w: stopped", ErrNotDetached)
	}
	p.closed = true // Stop does nothing from here on
	p.mu.Unlock()
	det := Detached{FD: p.fd, ExpectTLS: p.checkTLS}
	var rerr error
	for i := range p.d {
		d := &p.d[i]
		det.EOF[i], det.Shut[i], det.Bytes[i] = d.eof, d.shut, d.n
		var b []byte
		if n := d.end - d.off + d.inPipe; n > 0 {
			b = make([]byte, 0, n)
			if d.end > d.off {
				b = append(b, (*d.buf)[d.off:d.end]...)
			}
			for d.inPipe > 0 && rerr == nil {
				// The bytes are in the pipe already: a read returns them at once.
				m, err := unix.Read(d.pipe.r, b[len(b):cap(b)])
				switch {
				case err == unix.EINTR:
				case err != nil:
					rerr = os.NewSyscallError("read", err)
				case m == 0:
					rerr = fmt.Errorf("splice pipe ended with %d bytes in it", d.inPipe)
				default:
					b, d.inPipe = b[:len(b)+m], d.inPipe-m
				}
			}
		}
		det.Pending[i] = b
		if d.buf != nil {
			bufs.Put(d.buf)
			d.buf = nil
		}
		d.releasePipe()
	}
	p.phase = phaseDone
	for side := range 2 {
		// The fds stay open for the caller, so closing cannot take them out of the set.
		p.l.ctl(unix.EPOLL_CTL_DEL, p.fd[side], &unix.EpollEvent{Fd: p.slot<<1 | int32(side), Pad: int32(p.gen)})
	}
	p.unpublish()
	if rerr != nil {
		// Bytes left a pipe and were lost with it: the stream cannot go on whole anywhere.
		// Ended with a reset both ways, as a socket error would be.
		rawLingerZero(p.fd[0])
		rawLingerZero(p.fd[1])
		rawClose(p.fd[0])
		rawClose(p.fd[1])
		p.endDetached(rerr)
		return Detached{}, rerr
	}
	return det, nil
}

// endDetached reports a pair that detach ended, as finish would have.
func (p *Pair) endDetached(err error) {
	res := Result{Bytes: [2]int64{p.d[0].n, p.d[1].n}, Err: err}
	switch {
	case p.rt != nil:
		p.rt.Done(p.tag, res)
	case p.done != nil:
		p.done(res)
	}
}

// Resume relays a pair another relay detached (Detach, in this process or the one it
// replaced), from where it was: the pending bytes are written first, a direction that had
// ended stays ended. Like Start, done is called once when both directions have ended, and
// Result.Bytes counts from here. An error means nothing started and the fds are still the
// caller's.
func (r *Relay) Resume(det Detached, o Options, done func(Result)) (*Pair, error) {
	p := r.newPair(det.FD[0], det.FD[1], phaseRelaying)
	p.ownsA, p.ownsB = true, true
	p.setup(o, done, nil)
	p.checkTLS = det.ExpectTLS
	for i := range p.d {
		d := &p.d[i]
		d.eof, d.shut = det.EOF[i], det.Shut[i]
		if n := len(det.Pending[i]); n > 0 {
			var bp *[]byte
			if n <= bufSize {
				bp = bufs.Get().(*[]byte)
			} else {
				b := make([]byte, n)
				bp = &b
			}
			d.buf, d.off, d.end = bp, 0, copy(*bp, det.Pending[i])
		}
	}
	// What the sockets hold now is not known here: the first run finds out (a read that
	// finds nothing, a write that cannot take everything, clear these).
	p.readable, p.writable = [2]bool{true, true}, [2]bool{true, true}
	// Both sides are registered with EPOLLOUT (registerArmed): a write that cannot finish
	// before side A is registered waits for the edge its registration reports, rather than
	// asking to arm a socket not yet in the set. Set before publish: the loop reads it.
	p.outArmed = [2]bool{true, true}
	p.started.Store(true)
	p.publish()
	if err := p.registerArmed(1); err != nil {
		p.unpublish()
		p.dropBufs()
		return nil, err
	}
	if err := p.registerArmed(0); err != nil {
		// Side B is registered and may already be moving bytes: the loop ends the pair,
		// which closes both sockets.
		p.stopWith(err, "")
		return p, nil
	}
	p.poke() // pending bytes move without waiting for an event
	return p, nil
}

func (p *Pair) dropBufs() {
	for i := range p.d {
		if d := &p.d[i]; d.buf != nil {
			bufs.Put(d.buf)
			d.buf = nil
		}
	}
}
