//go:build linux

package relay

import (
	"bytes"
	"testing"
)

// reframe drops a consumed PROXY header and puts the backend's in front of the rest, in
// place when the new one fits where the old one was, shifting the rest otherwise; what
// cannot fit the buffer is refused untouched.
func TestReframe(t *testing.T) {
	hello := bytes.Repeat([]byte{0x16}, 100)
	for _, c := range []struct {
		name       string
		skip       int
		prefix     string
		bufLen, in int
		ok         bool
	}{
		{"longer header in, shorter out: in place", 40, "PROXY v1 header\r\n", 16 << 10, 140, true},
		{"shorter in, longer out: shifted", 10, "a prefix longer than ten bytes", 16 << 10, 110, true},
		{"nothing in, a prefix out", 0, "PROXY TCP4\r\n", 16 << 10, 100, true},
		{"skip only", 20, "", 16 << 10, 120, true},
		{"nothing read yet (a TCP route)", 0, "hdr", 16 << 10, 0, true},
		{"does not fit", 0, "0123456789", 105, 100, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := make([]byte, c.bufLen)
			d := &direction{}
			rest := hello[:max(0, c.in-c.skip)]
			if c.in > 0 {
				copy(b, bytes.Repeat([]byte{'P'}, c.skip))
				copy(b[c.skip:], rest)
				d.buf, d.end = &b, c.in
			}
			ok := d.reframe(c.skip, []byte(c.prefix))
			if ok != c.ok {
				t.Fatalf("reframe: %v, want %v", ok, c.ok)
			}
			if !ok {
				if d.off != 0 || d.end != c.in || !bytes.Equal(b[c.skip:c.in], rest) {
					t.Fatal("a refused reframe changed the buffer")
				}
				return
			}
			want := append([]byte(c.prefix), rest...)
			if got := (*d.buf)[d.off:d.end]; !bytes.Equal(got, want) {
				t.Fatalf("to write: %q, want %q", got, want)
			}
		})
	}
}
