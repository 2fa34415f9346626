package proxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Why not io.Copy: between two *net.TCPConn it splices, which is the fastest way to move
// bulk data, but it holds a pipe (two fds and up to 1 MiB of kernel buffer) for the whole
// life of the copy, so every idle database session costs six fds instead of two, and a
// 64-byte request pays two splice calls through the pipe. relay instead waits for data
// without holding any buffer, copies what one read returns through a pooled buffer, and
// switches to splice only when a read fills the buffer (a bulk transfer); the pipe goes
// back to the pool as soon as the source runs dry. Idle connections hold no buffer and no
// pipe: two fds and their goroutines.

const (
	relayBufSize = 16 << 10  // a read that fills this switches to splice
	pipeSize     = 256 << 10 // F_SETPIPE_SZ; also the most one splice moves
	maxIdlePipes = 64        // pipes kept for reuse; more are closed after use
	spliceFlags  = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
)

var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

// relay copies src to dst until src reaches EOF (returns nil) or an error. With idle > 0,
// it returns os.ErrDeadlineExceeded once neither direction moved a byte for idle (activity
// is shared through c.touch / c.lastActive) and never splices.
func (c *conn) relay(dst, src *net.TCPConn, idle time.Duration) (int64, error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		if idle > 0 {
			src.SetReadDeadline(time.Now().Add(idle))
		}
		var (
			bp   *[]byte
			n    int
			rerr error
		)
		err := srcRC.Read(func(fd uintptr) bool {
			b := relayBufs.Get().(*[]byte)
			for {
				n, rerr = unix.Read(int(fd), *b)
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				relayBufs.Put(b)
				return false // wait for readability without holding the buffer
			}
			bp = b
			return true
		})
		if err != nil {
			if idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) &&
				time.Since(time.Unix(0, c.lastActive.Load())) < idle {
				continue // the other direction was active
			}
			return total, err
		}
		if rerr != nil {
			relayBufs.Put(bp)
			return total, os.NewSyscallError("read", rerr)
		}
		if n == 0 {
			relayBufs.Put(bp)
			return total, nil
		}
		if idle > 0 {
			c.touch()
		}
		w, werr := dst.Write((*bp)[:n])
		relayBufs.Put(bp)
		total += int64(w)
		if werr != nil {
			return total, werr
		}
		if n == relayBufSize && idle == 0 {
			m, eof, err := spliceBurst(dstRC, srcRC)
			total += m
			if err != nil || eof {
				return total, err
			}
		}
	}
}

// spliceBurst moves data from src to dst through a pooled pipe until src has nothing more to
// read right now (the pipe then goes back to the pool), EOF (eof true) or an error.
func spliceBurst(dstRC, srcRC syscall.RawConn) (total int64, eof bool, err error) {
	p := getPipe()
	if p == nil {
		return 0, false, nil // no pipe to be had: the caller goes on copying
	}
	clean := false
	defer func() {
		if clean {
			putPipe(p)
		} else {
			p.close() // bytes may be stuck in it
		}
	}()
	for {
		var n int64
		var serr error
		rerr := srcRC.Read(func(fd uintptr) bool {
			for {
				n, serr = unix.Splice(int(fd), nil, p.w, nil, pipeSize, spliceFlags)
				if serr != unix.EINTR {
					return true // never wait here: a drained source ends the burst
				}
			}
		})
		if rerr != nil {
			return total, false, rerr
		}
		if serr == unix.EAGAIN {
			clean = true
			return total, false, nil
		}
		if serr != nil {
			return total, false, os.NewSyscallError("splice", serr)
		}
		if n == 0 {
			clean = true
			return total, true, nil
		}
		for n > 0 {
			var m int64
			var werr error
			err := dstRC.Write(func(fd uintptr) bool {
				for {
					m, werr = unix.Splice(p.r, nil, int(fd), nil, int(n), spliceFlags)
					if werr != unix.EINTR {
						break
					}
				}
				return werr != unix.EAGAIN // wait for the destination to drain
			})
			if err != nil {
				return total, false, err
			}
			if werr != nil {
				return total, false, os.NewSyscallError("splice", werr)
			}
			n -= m
			total += m
		}
	}
}

type pipe struct{ r, w int }

func (p *pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

var pipes = struct {
	sync.Mutex
	free []*pipe
}{}

func getPipe() *pipe {
	pipes.Lock()
	if n := len(pipes.free); n > 0 {
		p := pipes.free[n-1]
		pipes.free = pipes.free[:n-1]
		pipes.Unlock()
		return p
	}
	pipes.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil
	}
	// A bigger pipe moves more per splice; the kernel may refuse (per-user pipe budget),
	// which only makes splices smaller.
	unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pipeSize)
	return &pipe{r: fds[0], w: fds[1]}
}

func putPipe(p *pipe) {
	pipes.Lock()
	if len(pipes.free) < maxIdlePipes {
		pipes.free = append(pipes.free, p)
		pipes.Unlock()
		return
	}
	pipes.Unlock()
	p.close()
}
