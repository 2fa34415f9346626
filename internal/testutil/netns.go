package testutil

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Host is a network namespace of its own, joined to the host by a veth pair: a stand-in for
// a Pod. The API server refuses loopback endpoints, so a backend a test publishes in an
// EndpointSlice must listen on an address that is not 127.0.0.0/8, and tests may only use
// loopback or namespaces they made.
//
// Its /30 is in 10.213.128.0/17 (the conformance kubelet takes slots from 10.213.0.0 up):
// the host end of the pair has the first address, the namespace the second. Nothing is
// routed beyond the pair.
type Host struct {
	Name   string       // the network namespace (ip netns)
	IP     netip.Addr   // the namespace's address
	HostIP netip.Addr   // the host end's address: the source of the host's connections to IP
	Prefix netip.Prefix // the /30 both are in
	link   string       // the host end's interface
}

var (
	netnsMu   sync.Mutex
	netnsNext int
)

// netnsBase is where the /30s of NetnsHost start.
var netnsBase = netip.MustParseAddr("10.213.128.0")

// NetnsHost creates a network namespace for name (a short label, for logs) with a veth pair
// to the host and removes both in t.Cleanup. Processes started in it must stop before (start
// them after NetnsHost, so that their cleanups run first). It needs root and the ip command
// (Require: fails under CI=true, skips elsewhere).
func NetnsHost(t testing.TB, name string) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		Require(t, "root (network namespaces)", errors.New("not root"))
	}
	_, err := exec.LookPath("ip")
	Require(t, "the ip command (iproute2)", err)
	h, err := NewHost(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Remove)
	return h
}

// NewHost is NetnsHost for code that is not a test's goroutine (a stand-in kubelet creating
// a Pod's namespace): it returns the error, and the caller calls Remove.
func NewHost(name string) (*Host, error) {
	netnsMu.Lock()
	defer netnsMu.Unlock()
	used, _ := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	// Slots start at an offset from the pid so that test binaries running at once rarely
	// try the same one; an address already on the host is skipped.
	pid := os.Getpid()
	for tries := 0; tries < 2048; tries++ {
		slot := (pid*7 + netnsNext) % 8192
		netnsNext++
		h := &Host{
			Name:   fmt.Sprintf("sgt%d-%d-%s", pid, slot, name),
			HostIP: nth(netnsBase, 4*slot+1),
			IP:     nth(netnsBase, 4*slot+2),
			link:   fmt.Sprintf("sg%d-%dh", pid%100000, slot%10000), // interface names have at most 15 bytes
		}
		h.Prefix = netip.PrefixFrom(nth(netnsBase, 4*slot), 30)
		if strings.Contains(string(used), " "+h.HostIP.String()+"/") || strings.Contains(string(used), " "+h.IP.String()+"/") {
			continue
		}
		if err := h.create(); err != nil {
			h.Remove()
			return nil, fmt.Errorf("network namespace %s: %v", h.Name, err)
		}
		return h, nil
	}
	return nil, errors.New("no free /30 for a network namespace in 10.213.128.0/17")
}

func (h *Host) create() error {
	steps := [][]string{
		{"ip", "netns", "add", h.Name},
		{"ip", "link", "add", h.link, "type", "veth", "peer", "name", "eth0", "netns", h.Name},
		{"ip", "addr", "add", h.HostIP.String() + "/30", "dev", h.link},
		{"ip", "link", "set", h.link, "up"},
		{"ip", "-n", h.Name, "addr", "add", h.IP.String() + "/30", "dev", "eth0"},
		{"ip", "-n", h.Name, "link", "set", "eth0", "up"},
		{"ip", "-n", h.Name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// Remove deletes the namespace; that removes the pair with it, the explicit delete covers a
// namespace that never got its end of the pair.
func (h *Host) Remove() {
	_ = exec.Command("ip", "link", "del", h.link).Run()
	_ = exec.Command("ip", "netns", "del", h.Name).Run()
}

// Command returns a command that runs name with args inside the namespace (ip netns exec,
// which execs it: the process is name itself, and signals reach it directly). Its
// environment is CleanEnv's, and it dies with the test binary.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
	cmd.Env = CleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	DieWithParent(cmd.SysProcAttr)
	return cmd
}

// Start runs name with args inside the namespace until the test ends (SIGTERM, then SIGKILL
// after a bounded wait); its output goes to a log printed when the test failed.
func (h *Host) Start(t testing.TB, name string, args ...string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(name)+".log")
	p, err := startProcess(h.Command(name, args...), filepath.Base(name)+" in "+h.Name, logPath, syscall.SIGTERM)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", p.name, p.logPath, p.logTail())
		}
	})
}

// nth is base + n.
func nth(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
