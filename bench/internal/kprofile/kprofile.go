// Package kprofile sorts the samples of a perf profile by the kind of work a proxy was
// doing, so that two proxies' costs for the same connections can be compared row by row:
// each kernel sample goes under the system call it was taken in (accept, connect, send,
// close, ...), the rest under user space or faults and interrupts.
//
//	perf record -g -F 3999 -p PID -o prof.data   # while the load runs
//	perf script -F comm,ip,sym,dso -i prof.data | ... kprofile.Read(r)
//
// bench/cmd/ab's --profile does this for every proxy it measures and reports each class in
// µs per operation. Why by hand: perf's own reports sort by symbol, and where perf samples
// with a timer (cpu-clock, as on the bench's VMs, which have no PMU) a sample lands where
// the kernel turns interrupts back on, not where the time went: one proxy's top symbols
// looked nothing like another's for the same TCP work. The system call a sample was taken
// in does not depend on that.
package kprofile

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Classes are the kinds of work, in the order a table shows them.
var Classes = []string{
	"accept", "socket", "socket options", "connect", "receive", "send", "splice", "close",
	"epoll", "file I/O", "other system calls", "system call entry and exit",
	"faults and interrupts", "user space",
}

// syscalls maps a system call's name (as the kernel's entry points spell it, without their
// prefixes) to its class. read and write are sorted by what they touched (see classify).
var syscalls = map[string]string{
	"accept": "accept", "accept4": "accept",
	"socket":     "socket",
	"setsockopt": "socket options", "getsockopt": "socket options", "getsockname": "socket options",
	"getpeername": "socket options", "fcntl": "socket options", "ioctl": "socket options",
	"connect":  "connect",
	"recvfrom": "receive", "recvmsg": "receive", "recvmmsg": "receive",
	"sendto": "send", "sendmsg": "send", "sendmmsg": "send",
	"read": "read", "readv": "read", "write": "write", "writev": "write",
	"splice": "splice", "pipe2": "splice",
	"close": "close", "shutdown": "close",
	"epoll_wait": "epoll", "epoll_pwait": "epoll", "epoll_pwait2": "epoll", "epoll_ctl": "epoll",
}

// prefixes are how the kernel names a system call's entry points and the helpers right
// behind them; which of them shows up in a stack depends on inlining.
var prefixes = []string{"__x64_sys_", "__do_sys_", "__se_sys_", "__sys_", "ksys_", "do_"}

// Counts is the number of samples of each class, and of all.
type Counts struct {
	ByClass map[string]int
	Total   int
}

// Read counts the samples of `perf script -F comm,ip,sym,dso` output (call graphs
// recorded with -g): one header line per sample, then its frames, innermost first, each on
// a line of its own that starts with white space; a blank line ends the sample.
func Read(r io.Reader) (Counts, error) { return ReadExcept(r) }

// ReadExcept is Read leaving out the samples of the commands named in skip: "swapper", the
// idle task, for a recording of a whole CPU (perf record -a -C N).
func ReadExcept(r io.Reader, skip ...string) (Counts, error) {
	c := Counts{ByClass: map[string]int{}}
	var frames []frame
	in := false
	end := func() {
		if in && len(frames) > 0 {
			c.ByClass[classify(frames)]++
			c.Total++
		}
		frames, in = frames[:0], false
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	skipping := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			end()
			skipping = false
		case line[0] != ' ' && line[0] != '\t':
			end() // a header: the sample's comm
			f := strings.Fields(line)
			skipping = len(f) > 0 && slices.Contains(skip, f[0])
			in = !skipping
		case skipping:
		default:
			f, err := parseFrame(line)
			if err != nil {
				return c, fmt.Errorf("line %d: %w", n, err)
			}
			frames = append(frames, f)
		}
	}
	end()
	return c, sc.Err()
}

type frame struct {
	sym    string
	kernel bool
}

// parseFrame reads "ADDR SYMBOL (DSO)". A frame is the kernel's when its address is in the
// upper half of the address space, whatever perf could resolve.
func parseFrame(line string) (frame, error) {
	s := strings.TrimSpace(line)
	addr, rest, ok := strings.Cut(s, " ")
	if !ok {
		return frame{}, fmt.Errorf("frame %q: no symbol", s)
	}
	a, err := strconv.ParseUint(addr, 16, 64)
	if err != nil {
		return frame{}, fmt.Errorf("frame %q: address: %w", s, err)
	}
	sym := rest
	if i := strings.LastIndex(rest, " ("); i >= 0 {
		sym = rest[:i]
	}
	if i := strings.Index(sym, "+0x"); i > 0 {
		sym = sym[:i]
	}
	return frame{sym: sym, kernel: a >= 1<<63}, nil
}

// classify names the work of one sample, its frames innermost first.
func classify(frames []frame) string {
	if !frames[0].kernel {
		return "user space"
	}
	// The outermost entry point of a known system call decides.
	for i := len(frames) - 1; i >= 0; i-- {
		if !frames[i].kernel {
			continue
		}
		class, ok := syscallClass(frames[i].sym)
		if !ok {
			continue
		}
		switch class {
		case "read", "write":
			return fileOrSocket(frames[:i], class)
		}
		return class
	}
	syscall := false
	for _, f := range frames {
		switch f.sym {
		case "task_work_run":
			// The last part of a close (fput's release of the file and its socket) runs on
			// the way back to user space, outside the close call.
			return "close"
		case "do_syscall_64", "entry_SYSCALL_64_after_hwframe":
			syscall = true
		}
	}
	if syscall {
		for _, f := range frames {
			if strings.HasPrefix(f.sym, "__x64_sys_") {
				return "other system calls"
			}
		}
		return "system call entry and exit"
	}
	return "faults and interrupts"
}

func syscallClass(sym string) (string, bool) {
	for _, p := range prefixes {
		if name, ok := strings.CutPrefix(sym, p); ok {
			if class, ok := syscalls[name]; ok {
				return class, true
			}
		}
	}
	return "", false
}

// fileOrSocket sorts a read or write by what it touched: a file's (an access log, a pipe)
// when a file system's or a pipe's code is in the stack, else a socket's (receive, send). A
// proxy's reads and writes are its sockets' but for its log, and a sample taken before the
// call reached either (in vfs_writev, say) is one of those.
func fileOrSocket(inner []frame, class string) string {
	for _, f := range inner {
		if isFileCode(f.sym) {
			return "file I/O"
		}
	}
	if class == "read" {
		return "receive"
	}
	return "send"
}

// isFileCode reports whether sym is the kernel's file system or pipe code.
func isFileCode(sym string) bool {
	if strings.Contains(sym, "_file_write_iter") || strings.Contains(sym, "_file_read_iter") {
		return true
	}
	for _, p := range []string{"ext4_", "xfs_", "btrfs_", "pipe_", "generic_perform_write", "filemap_", "shmem_"} {
		if strings.HasPrefix(sym, p) {
			return true
		}
	}
	return false
}
