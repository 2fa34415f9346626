package main

import (
	"net"
	"os"
)

// sdNotify sends state to systemd's notification socket ($NOTIFY_SOCKET), when the process
// runs under a unit of Type=notify; otherwise it does nothing. A live upgrade's new process
// sends MAINPID with its READY, so that systemd follows it rather than the old process,
// which exits after its drain (NotifyAccess=all in the unit: examples/systemd).
func sdNotify(state string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	c.Write([]byte(state))
}
