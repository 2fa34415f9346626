package admin

import (
	"net"
	"net/http"
	"testing"

	"github.com/snigate/snigate/internal/metrics"
)

// The public server answers the probes and Prometheus and nothing else; the full one adds
// /status and /debug/pprof.
func TestPublicAndFull(t *testing.T) {
	state := func() State { return State{Ready: true, Generation: 7} }
	for _, c := range []struct {
		name string
		srv  *Server
		want map[string]int
	}{
		{"public", NewPublic(metrics.New(), state), map[string]int{
			"/metrics": 200, "/healthz": 200, "/readyz": 200,
			"/status": 404, "/debug/pprof/": 404, "/debug/pprof/profile?seconds=1": 404, "/debug/pprof/symbol": 404,
		}},
		{"full", New(metrics.New(), state), map[string]int{
			"/metrics": 200, "/healthz": 200, "/readyz": 200, "/status": 200, "/debug/pprof/": 200,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go c.srv.Serve(ln)
			t.Cleanup(func() { c.srv.Close() })
			for path, want := range c.want {
				resp, err := http.Get("http://" + ln.Addr().String() + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
				}
			}
		})
	}
}

// /readyz is 503 until a configuration is applied, on both servers.
func TestReadyz(t *testing.T) {
	for _, srv := range []*Server{New(metrics.New(), func() State { return State{} }), NewPublic(metrics.New(), func() State { return State{} })} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("/readyz before a configuration: %d, want 503", resp.StatusCode)
		}
	}
}
