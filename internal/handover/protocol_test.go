package handover

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

func samplePair() *Pair {
	return &Pair{
		Address:  "0.0.0.0:5432",
		Client:   netip.MustParseAddrPort("192.0.2.7:40000"),
		Via:      netip.MustParseAddrPort("[2001:db8::1]:1234"),
		Endpoint: netip.MustParseAddrPort("10.0.0.2:5432"),
		Start:    1_700_000_000_123_456_789,
		Listener: "default/gw/pg", Route: "default/pg", Backend: "default/pg-svc", SNI: "db.example.com",
		Negotiation: "postgres", In: 1 << 40, Out: 12345, PGCancel: true, ExpectTLS: true,
		Flow: [2]Flow{{Pending: []byte("select 1;"), EOF: true, Shut: true}, {Pending: bytes.Repeat([]byte{0x17}, 5000), EOF: true}},
	}
}

// Every message comes back as it was sent, and a decoder that dropped or reordered a field
// would fail here.
func TestRoundTrip(t *testing.T) {
	msgs := []struct {
		m   Message
		fds int
	}{
		{&Hello{PID: 4242}, 0},
		{&Listeners{Names: []string{"0.0.0.0:443", "[::]:5432", "admin:--admin"}}, 3},
		{&Listeners{Names: []string{}}, 0},
		{&Serving{}, 0},
		{&Failed{Reason: "listener default/gw/tls: cannot bind 127.0.0.1:443: permission denied"}, 0},
		{samplePair(), 2},
		{&Pair{Address: "x"}, 2},
		{&End{Pairs: 3}, 0},
		{&Taken{Pairs: 3}, 0},
	}
	for _, tc := range msgs {
		b, err := Encode(tc.m, tc.fds)
		if err != nil {
			t.Fatalf("%T: %v", tc.m, err)
		}
		h, got, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", tc.m, err)
		}
		if int(h.FDs) != tc.fds {
			t.Errorf("%T: %d fds declared, want %d", tc.m, h.FDs, tc.fds)
		}
		if !reflect.DeepEqual(got, tc.m) {
			t.Errorf("%T: got %+v, want %+v", tc.m, got, tc.m)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, _ := Encode(samplePair(), 2)
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"short":         {good[:5], errShort},
		"magic":         {append([]byte("HTTP"), good[4:]...), errMagic},
		"version":       {append(append(append([]byte{}, good[:4]...), 0, 2), good[6:]...), ErrVersion},
		"length":        {good[:len(good)-1], errShort},
		"truncated":     {append(append([]byte{}, good[:8]...), 0, 0, 0, 3, 5, 1, 2), errTruncated},
		"pair fds":      {func() []byte { b, _ := Encode(samplePair(), 1); return b }(), nil},
		"listeners fds": {func() []byte { b, _ := Encode(&Listeners{Names: []string{"a"}}, 0); return b }(), nil},
	} {
		_, m, err := Decode(tc.b)
		if err == nil {
			t.Errorf("%s: decoded %+v", name, m)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// Fds sent with a message arrive as working duplicates.
func TestConnPassesFDs(t *testing.T) {
	a, f, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := newConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := a.Send(samplePair(), int(r.Fd()), int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	w.Close()
	m, fds, err := b.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, samplePair()) || len(fds) != 2 {
		t.Fatalf("got %+v with %d fds", m, len(fds))
	}
	if _, err := unix.Write(fds[1], []byte("through the copy")); err != nil {
		t.Fatal(err)
	}
	unix.Close(fds[1])
	buf := make([]byte, 64)
	n, _ := r.Read(buf)
	if string(buf[:n]) != "through the copy" {
		t.Fatalf("read %q", buf[:n])
	}
	unix.Close(fds[0])
	a.Close()
	if _, _, err := b.Recv(); err == nil {
		t.Fatal("Recv after the peer closed: no error")
	}
}

// FuzzDecode: the decoder never panics, never reads past what a header declares, and what
// it accepts encodes back to the same bytes (one encoding per message: no field is lost or
// invented).
func FuzzDecode(f *testing.F) {
	for _, m := range []Message{&Hello{PID: 1}, &Listeners{Names: []string{"a", "b"}}, &Serving{}, &Failed{Reason: "x"}, samplePair(), &End{Pairs: 2}, &Taken{Pairs: 1}} {
		fds := 0
		switch m := m.(type) {
		case *Listeners:
			fds = len(m.Names)
		case *Pair:
			fds = 2
		}
		b, err := Encode(m, fds)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, m, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Encode(m, int(h.FDs))
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v encodes to %x, not %x", m, again, b)
		}
	})
}
