package clienthello

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// addSeeds adds the committed captures, fresh crypto/tls ClientHellos, re-framed variants and
// a few non-TLS first bytes. Nothing here needs openssl.
func addSeeds(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.bin")
	var hellos [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		hellos = append(hellos, b)
	}
	for _, c := range goCases()[:4] {
		hellos = append(hellos, goHello(f, c.cfg))
	}
	for _, h := range hellos {
		f.Add(h)
		f.Add(reframe(f, h, every(100)))
		f.Add(reframe(f, h, firstThen(1, MaxRecordLen)))
	}
	f.Add(reframe(f, hellos[0], every(7)))
	f.Add(defaultSpec(sniExt("a.test"), alpnExt("h2"), versionsExt(0x0304), ext{extEarlyData, nil}, ext{extECH, []byte{1}}).record())
	f.Add(chSpec{version: 0x0301, suites: []byte{0, 0x2f}, comp: []byte{0}, noExtBlock: true}.record())
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte{0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f})
	f.Add([]byte{0x15, 3, 3, 0, 2, 2, 40})
}

// FuzzParse checks that Parse never panics and that what it accepts is self-consistent:
// slices in bounds, Len exact, the same answer on buf[:Len] and under any other framing, and
// every prefix incomplete.
func FuzzParse(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, buf []byte) {
		var p Parser
		var h Hello
		err := p.Parse(buf, &h)
		if err != nil {
			if err != ErrIncomplete && !errors.Is(err, ErrNotTLS) && !errors.Is(err, ErrMalformed) &&
				!errors.Is(err, ErrNotClientHello) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unexpected error %v", err)
			}
			if !reflectZero(&h) {
				t.Fatalf("Hello not zeroed on error: %s", summary(&h))
			}
			return
		}
		checkInvariants(t, &p, buf, &h)
	})
}

// checkInvariants checks a successful Parse of buf by p into h.
func checkInvariants(t *testing.T, p *Parser, buf []byte, h *Hello) {
	t.Helper()
	if h.Len > len(buf) || h.Len < recordHeaderLen+handshakeHeaderLen+minBodyLen || h.Records < 1 || h.Records > h.Len/(recordHeaderLen+1) {
		t.Fatalf("Len %d Records %d for %d bytes", h.Len, h.Records, len(buf))
	}
	home := buf[:h.Len:h.Len] // where the slices must point
	if h.Records > 1 {
		home = p.scratch
	}
	for _, s := range [][]byte{h.SNI, h.ALPN, h.SupportedVersions} {
		if !within(s, home) {
			t.Fatalf("a slice points outside its buffer: %s", summary(h))
		}
	}
	want := summary(h)
	wantContent := content(h)
	// The message itself, for reframing below (copied: the next Parse reuses the scratch).
	var msg []byte
	if h.Records == 1 {
		msg = slices.Clone(buf[recordHeaderLen:h.Len])
	} else {
		msg = slices.Clone(p.scratch)
	}
	minor := buf[2]

	// Only buf[:Len] matters, whatever follows, with a fresh or a reused Parser.
	var q Parser
	var g Hello
	if err := q.Parse(buf[:h.Len], &g); err != nil || summary(&g) != want {
		t.Fatalf("buf[:Len]: %v %s, want %s", err, summary(&g), want)
	}
	if err := p.Parse(append(slices.Clone(buf[:h.Len]), 0x17, 3, 3), &g); err != nil || summary(&g) != want {
		t.Fatalf("buf[:Len]+junk: %v %s, want %s", err, summary(&g), want)
	}

	// A few prefixes are incomplete.
	for _, i := range []int{0, 1, 4, 5, 6, 9, h.Len / 2, h.Len - 1, (len(buf) * 7919) % h.Len} {
		if err := p.Parse(buf[:i], &g); err != ErrIncomplete {
			t.Fatalf("prefix %d of %d: err %v, want ErrIncomplete", i, h.Len, err)
		}
	}

	// A Parser that walked part of buf resumes only on the same bytes: after a prefix, a
	// buffer with one byte changed gives what a fresh Parser gives.
	if h.Records > 1 {
		cut := (len(buf) * 31) % h.Len
		p.Parse(buf[:cut], &g)
		other := slices.Clone(buf[:h.Len])
		at := (len(buf) * 17) % max(cut, 1)
		other[at] ^= byte(len(buf)) | 1
		var fg Hello
		ferr := new(Parser).Parse(other, &fg)
		if err := p.Parse(other, &g); err != ferr || summary(&g) != summary(&fg) {
			t.Fatalf("resumed after %d bytes, byte %d changed: %v %s; fresh: %v %s", cut, at, err, summary(&g), ferr, summary(&fg))
		}
	}

	// Another framing gives the same content.
	size := 1 + len(buf)%97
	re := frame(msg, minor, every(size))
	if err := p.Parse(re, &g); err != nil || content(&g) != wantContent {
		t.Fatalf("reframed into %d-byte records: %v %s, want %s", size, err, content(&g), wantContent)
	}
	if h.Records > 1 {
		one := frame(msg, minor, every(MaxRecordLen))
		if err := p.Parse(one, &g); len(msg) <= MaxRecordLen && (err != nil || content(&g) != wantContent) {
			t.Fatalf("reframed into one record: %v %s, want %s", err, content(&g), wantContent)
		}
	}
}

// FuzzStdlib is a differential check against crypto/tls's server (slower: a net.Pipe and
// goroutine per input). Whenever crypto/tls gets as far as GetConfigForClient, the parser
// must agree on SNI and ALPN, or refuse for one of the reasons where it is deliberately
// stricter than crypto/tls.
func FuzzStdlib(f *testing.F) {
	addSeeds(f)
	stricter := []error{
		// crypto/tls accepts any record version below 0x1000 before it negotiates one.
		errNotVersion3, errRecordVersion,
		// RFC 5246 section 6.2.1 forbids zero-length handshake fragments.
		errEmptyRecord,
		// crypto/tls reads the ClientHello before it looks at what follows in the record.
		errTrailing,
		// legacy_version major other than 3.
		errVersion,
		// crypto/tls accepts empty cipher_suites and compression_methods vectors, and a
		// legacy_session_id longer than the 32 bytes RFC 8446 section 4.1.2 allows.
		errShort, errCipherSuites, errCompression, errSessionID,
		// DefaultMaxLen counts the 4-byte header, crypto/tls's 65536 does not.
		errMessageLen,
	}
	f.Fuzz(func(t *testing.T, buf []byte) {
		var p Parser
		var h Hello
		err := p.Parse(buf, &h)
		if err == ErrIncomplete {
			return // crypto/tls would wait for more bytes too
		}
		ssni, salpn, _, serr := stdlibView(buf)
		if serr != nil {
			return // crypto/tls refuses: the parser may accept (it checks less)
		}
		if err != nil {
			if slices.Contains(stricter, err) {
				return
			}
			t.Fatalf("crypto/tls accepts (sni=%q alpn=%q), parser refuses: %v", ssni, salpn, err)
		}
		if ssni != string(h.SNI) || !slices.Equal(salpn, alpnList(&h)) {
			t.Fatalf("crypto/tls sees sni=%q alpn=%q; parser: %s", ssni, salpn, summary(&h))
		}
	})
}
