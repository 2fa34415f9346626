package testutil

import (
	"net/http"
	"net/netip"
	"time"
)

// Ready reports whether the snigate process whose metrics (or admin) listener is at addr
// says it serves: /readyz answers 200 within 300 ms. It is a readiness probe as a kubelet
// runs it, for the tests that stand in for one.
func Ready(addr netip.AddrPort) bool {
	c := http.Client{Timeout: 300 * time.Millisecond}
	resp, err := c.Get("http://" + addr.String() + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
