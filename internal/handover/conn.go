package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Conn is one end of the hand-over socket.
type Conn struct {
	uc  *net.UnixConn
	buf []byte
	oob []byte
}

// Socketpair makes the hand-over socket: the old process keeps the Conn and gives the
// file to the new one (exec.Cmd.ExtraFiles), then closes its copy of the file.
func Socketpair() (*Conn, *os.File, error) {
	fds, err := socketpair()
	if err != nil {
		return nil, nil, err
	}
	mine := os.NewFile(uintptr(fds[0]), "handover")
	theirs := os.NewFile(uintptr(fds[1]), "handover-child")
	c, err := newConn(mine)
	if err != nil {
		theirs.Close()
		return nil, nil, err
	}
	return c, theirs, nil
}

// FromEnv returns the new process's end of the hand-over socket, nil when the process was
// not started by an upgrade. It unsets the variable, so that a process this one starts
// does not take the socket for its own.
func FromEnv() (*Conn, error) {
	v, ok := os.LookupEnv(EnvFD)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(EnvFD)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not a file descriptor", EnvFD, v)
	}
	unix.CloseOnExec(fd)
	return newConn(os.NewFile(uintptr(fd), "handover"))
}

func newConn(f *os.File) (*Conn, error) {
	defer f.Close() // FileConn duplicated it
	nc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("handover socket: %w", err)
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, fmt.Errorf("handover socket: a %T, not a unix socket", nc)
	}
	return &Conn{uc: uc, buf: make([]byte, MaxMessage), oob: make([]byte, unix.CmsgSpace(4*maxFDs))}, nil
}

// Close closes the socket; the peer's next read fails.
func (c *Conn) Close() error { return c.uc.Close() }

// SetDeadline bounds every read and write until the next call (zero: none).
func (c *Conn) SetDeadline(t time.Time) error { return c.uc.SetDeadline(t) }

// Send sends m with fds. The fds stay the caller's: the kernel gives the peer duplicates.
func (c *Conn) Send(m Message, fds ...int) error {
	b, err := Encode(m, len(fds))
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.uc.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("handover: sending %s: %w", typeOf(m), err)
	}
	if n != len(b) || oobn != len(oob) {
		return fmt.Errorf("handover: sending %s: short write", typeOf(m))
	}
	return nil
}

func typeOf(m Message) string {
	b, err := Encode(m, 0)
	if err != nil {
		return fmt.Sprintf("%T", m)
	}
	return Type(b[6]).String()
}

// Recv reads the next message and the fds that came with it, which are the caller's to
// close (close-on-exec). A message whose fds do not match what it declares is an error;
// its fds are closed.
func (c *Conn) Recv() (Message, []int, error) {
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		return nil, nil, err
	}
	fds, ferr := parseRights(c.oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if ferr != nil {
		closeAll()
		return nil, nil, ferr
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll()
		return nil, nil, errors.New("handover: message or its fds truncated")
	}
	if n == 0 {
		closeAll()
		return nil, nil, errors.New("handover: the other process closed the socket")
	}
	h, m, err := Decode(c.buf[:n])
	if err == nil && int(h.FDs) != len(fds) {
		err = fmt.Errorf("handover: %s came with %d fds, declares %d", h.Type, len(fds), h.FDs)
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return m, fds, nil
}

// parseRights returns the fds of SCM_RIGHTS messages in oob, close-on-exec.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("handover: control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("handover: control message: %w", err)
		}
		for _, fd := range got {
			unix.CloseOnExec(fd)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}
