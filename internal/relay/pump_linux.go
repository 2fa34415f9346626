package relay

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// direction is one way of a pair: d[0] reads A and writes B, d[1] reads B and writes A.
type direction struct {
	buf       *[]byte // bytes buf[off:end] wait for the destination
	off, end  int
	pipe      *pipe // bulk mode: splice through this pipe
	inPipe    int   // bytes in pipe waiting for the destination
	eof, shut bool  // source at EOF; the EOF was passed on
	n         int64 // bytes written to the destination
}

func (d *direction) pending() bool { return d.end > d.off || d.inPipe > 0 }

type notTLSError byte

func (e notTLSError) Error() string { return fmt.Sprintf("first byte %#02x is not TLS", byte(e)) }

// pump moves bytes of direction i until the source has nothing, the destination is full,
// or the budget is spent (left true).
func (p *Pair) pump(i int) (moved int, left bool, err error) {
	d := &p.d[i]
	src, dst := i, 1-i
	for moved < turnBudget {
		if d.pending() {
			if !p.writable[dst] {
				return moved, false, nil
			}
			m, err := d.flush(p.fd[dst])
			moved += m
			if err == unix.EAGAIN {
				p.writable[dst] = false
				if aerr := p.armOut(dst); aerr != nil {
					return moved, false, os.NewSyscallError("epoll_ctl", aerr)
				}
				return moved, false, nil
			}
			if err != nil {
				p.failed(dst)
				return moved, false, os.NewSyscallError("write", err)
			}
			if d.pending() {
				// A short write: the kernel marked the socket full and will send an edge
				// when there is room.
				if !p.sticky[dst] {
					p.writable[dst] = false
					if aerr := p.armOut(dst); aerr != nil {
						return moved, false, os.NewSyscallError("epoll_ctl", aerr)
					}
				}
				return moved, false, nil
			}
			if d.buf != nil {
				bufs.Put(d.buf)
				d.buf = nil
			}
			continue
		}
		if d.eof {
			if !d.shut {
				d.shut = true
				d.releasePipe()
				// The last direction to end: run finishes the pair next, and closing the
				// destination sends this FIN (its receive side is at EOF, so the close is not
				// a reset): a shutdown would be a system call for nothing.
				owned := p.ownsA
				if dst == 1 {
					owned = p.ownsB
				}
				if !p.d[1-i].shut || !owned {
					// ENOTCONN when the destination is gone already: the other direction's
					// read reports that.
					rawShutdown(p.fd[dst])
				}
			}
			return moved, false, nil
		}
		if !p.readable[src] {
			return moved, false, nil
		}
		if d.pipe != nil {
			n, err := spliceRetry(p.fd[src], d.pipe.w, pipeSize)
			switch {
			case err == unix.EAGAIN:
				p.readable[src] = false
				d.releasePipe() // the burst is over; small reads go through buffers again
				return moved, false, nil
			case err != nil:
				p.failed(src)
				return moved, false, os.NewSyscallError("splice", err)
			case n == 0:
				d.eof = true
			default:
				d.inPipe = int(n)
			}
			continue
		}
		bp := bufs.Get().(*[]byte)
		n, err := recvRetry(p.fd[src], *bp)
		if err != nil || n == 0 {
			bufs.Put(bp)
			if err == unix.EAGAIN {
				p.readable[src] = false
				return moved, false, nil
			}
			if err != nil {
				p.failed(src)
				return moved, false, os.NewSyscallError("read", err)
			}
			d.eof = true
			continue
		}
		if i == 1 && p.checkTLS {
			p.checkTLS = false
			if b := (*bp)[0]; b != 0x16 && b != 0x15 {
				bufs.Put(bp)
				return moved, false, notTLSError(b)
			}
		}
		d.buf, d.off, d.end = bp, 0, n
		if n == len(*bp) {
			// A full buffer: a burst. Splice the rest of it (without a pipe to be had, go on
			// through buffers).
			d.pipe = getPipe()
		} else if p.rdhup[src] && !p.sticky[src] {
			// The peer's FIN was in before this read (EPOLLRDHUP: the kernel takes a FIN in
			// sequence order, after every byte it ends), and a short read took all there
			// was: the next read could only return the EOF, so it is not made. A client
			// that ends with a last message and its FIN together (a TLS close_notify, a
			// PostgreSQL Terminate) saves a system call. After an error or a hang-up
			// (sticky) the read goes on, so that a reset is passed on as one.
			d.eof = true
		} else if !p.sticky[src] && !p.rdhup[src] {
			// A short read took everything there was: new bytes bring a new edge.
			p.readable[src] = false
		}
	}
	return moved, true, nil
}

// flush writes pending bytes to fd: the buffer first, then the pipe. Errors are bare
// errnos.
func (d *direction) flush(fd int) (int, error) {
	if d.end > d.off {
		n, err := sendRetry(fd, (*d.buf)[d.off:d.end])
		if n > 0 {
			d.off += n
			d.n += int64(n)
		}
		if err != nil || d.end > d.off {
			return max(n, 0), err
		}
		return n, nil
	}
	n, err := spliceRetry(d.pipe.r, fd, d.inPipe)
	if n > 0 {
		d.inPipe -= int(n)
		d.n += n
	}
	return int(max(n, 0)), err
}

func (d *direction) releasePipe() {
	if d.pipe == nil {
		return
	}
	if d.inPipe == 0 {
		putPipe(d.pipe)
	} else {
		d.pipe.close() // bytes are stuck in it
	}
	d.pipe, d.inPipe = nil, 0
}
