package snapshot

import (
	"crypto/tls"
	"testing"
)

// HasPassthrough tells the proxy whether any connection to a TLS port may be relayed.
func TestHasPassthrough(t *testing.T) {
	pass := &Listener{Name: "p", Mode: ModePassthrough}
	term := &Listener{Name: "t", Mode: ModeTerminate, TLS: &tls.Config{}}
	https := &Listener{Name: "h", Mode: ModeTerminate, TLS: &tls.Config{}, HTTP: &HTTPTable{}}
	port := func(ls map[string]*Listener) *Port {
		p := &Port{Address: "127.0.0.1:443", Protocol: ProtocolTLS}
		for h, l := range ls {
			p.Listeners.Add(h, l)
		}
		return p
	}
	for _, c := range []struct {
		name string
		ls   map[string]*Listener
		want bool
	}{
		{"passthrough only", map[string]*Listener{"a.test": pass}, true},
		{"terminate only", map[string]*Listener{"a.test": term}, false},
		{"terminate and HTTPS", map[string]*Listener{"a.test": term, "b.test": https}, false},
		{"terminate and passthrough", map[string]*Listener{"a.test": term, "*.b.test": pass}, true},
		{"no listener", nil, false},
	} {
		p := port(c.ls)
		New(1, []*Port{p})
		if got := p.HasPassthrough(); got != c.want {
			t.Errorf("%s: HasPassthrough() = %v, want %v", c.name, got, c.want)
		}
	}
}
