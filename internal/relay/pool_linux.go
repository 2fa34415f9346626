package relay

import (
	"sync"

	"golang.org/x/sys/unix"
)

var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

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

// PooledPipes returns how many pipes wait in the pool for the next burst.
func PooledPipes() int {
	pipes.Lock()
	defer pipes.Unlock()
	return len(pipes.free)
}
