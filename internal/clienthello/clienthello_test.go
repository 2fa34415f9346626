package clienthello

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/snigate/snigate/internal/testutil"
)

var update = flag.Bool("update", false, "recapture testdata/*.bin (needs openssl) and rewrite testdata/hellos.golden")

// summary prints every field of h, for comparisons and the golden file.
func summary(h *Hello) string {
	return fmt.Sprintf("sni=%q alpn=%q versions=%x version=%04x max=%04x ech=%v early=%v records=%d len=%d",
		h.SNI, h.ALPN, h.SupportedVersions, h.Version, h.MaxVersion(), h.ECH, h.EarlyData, h.Records, h.Len)
}

// content is summary without the framing (Len, Records), which reframing changes.
func content(h *Hello) string {
	c := *h
	c.Len, c.Records = 0, 0
	return summary(&c)
}

func parse(t testing.TB, buf []byte) *Hello {
	t.Helper()
	var p Parser
	h := new(Hello)
	if err := p.Parse(buf, h); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return h
}

func alpnList(h *Hello) []string {
	var out []string
	for l := h.ALPN; len(l) > 0; l = l[1+int(l[0]):] {
		out = append(out, string(l[1:1+int(l[0])]))
	}
	return out
}

// checkHello checks what a real client asked for, and that crypto/tls's server sees the same.
func checkHello(t *testing.T, hello []byte, sni string, alpn []string, tls13 bool) {
	t.Helper()
	h := parse(t, hello)
	if string(h.SNI) != sni || (sni == "") != (h.SNI == nil) {
		t.Errorf("SNI = %q, want %q", h.SNI, sni)
	}
	if got := alpnList(h); !slices.Equal(got, alpn) {
		t.Errorf("ALPN = %q, want %q", got, alpn)
	}
	for _, p := range alpn {
		if !h.HasALPN(p) {
			t.Errorf("HasALPN(%q) = false", p)
		}
	}
	if h.HasALPN("nope") {
		t.Error(`HasALPN("nope") = true`)
	}
	if h.SupportsVersion(0x0304) != tls13 || (h.MaxVersion() == 0x0304) != tls13 {
		t.Errorf("SupportsVersion(TLS 1.3) = %v, MaxVersion = %04x, want TLS 1.3 %v", h.SupportsVersion(0x0304), h.MaxVersion(), tls13)
	}
	if h.Len != len(hello) {
		t.Errorf("Len = %d, want %d", h.Len, len(hello))
	}
	ssni, salpn, svers, err := stdlibView(hello)
	if err != nil {
		t.Fatalf("crypto/tls refuses the hello: %v", err)
	}
	if ssni != string(h.SNI) || !slices.Equal(salpn, alpnList(h)) || slices.Contains(svers, 0x0304) != h.SupportsVersion(0x0304) {
		t.Errorf("crypto/tls sees sni=%q alpn=%q versions=%x; parser: %s", ssni, salpn, svers, summary(h))
	}
	checkFramings(t, hello)
}

// checkFramings re-cuts hello into other record sizes and checks that the content parsed
// is the same and that every prefix of each framing is incomplete.
func checkFramings(t *testing.T, hello []byte) {
	t.Helper()
	want := content(parse(t, hello))
	msg, _, _ := unframe(hello)
	framings := map[string]func(int) int{
		"1-byte records":     every(1),
		"100-byte records":   every(100),
		"1-byte first":       firstThen(1, MaxRecordLen),
		"3-byte first (hdr)": firstThen(3, MaxRecordLen),
	}
	for name, size := range framings {
		buf := reframe(t, hello, size)
		var p Parser
		var h Hello
		if err := p.Parse(buf, &h); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := content(&h); got != want {
			t.Errorf("%s: got %s\nwant %s", name, got, want)
		}
		wantRecords := 0
		for i, left := 0, len(msg); left > 0; i++ {
			left -= min(max(size(i), 1), left, MaxRecordLen)
			wantRecords++
		}
		if h.Len != len(buf) || h.Records != wantRecords {
			t.Errorf("%s: Len %d Records %d, want %d %d", name, h.Len, h.Records, len(buf), wantRecords)
		}
		checkPrefixes(t, &p, buf, 7)
	}
	var p Parser
	checkPrefixes(t, &p, hello, 1)
}

// checkPrefixes checks that buf[:i] is incomplete for every i < len(buf) in steps of step
// (and for the last few bytes), reusing p the way a connection does.
func checkPrefixes(t *testing.T, p *Parser, buf []byte, step int) {
	t.Helper()
	var h Hello
	for i := 0; i < len(buf); i++ {
		if i%step != 0 && i < len(buf)-8 {
			continue
		}
		if err := p.Parse(buf[:i], &h); err != ErrIncomplete {
			t.Fatalf("prefix of %d/%d bytes: err = %v, want ErrIncomplete", i, len(buf), err)
		}
		if h.SNI != nil || h.Len != 0 {
			t.Fatalf("prefix of %d bytes: Hello not zeroed: %s", i, summary(&h))
		}
	}
}

func TestGoClients(t *testing.T) {
	for _, c := range goCases() {
		t.Run(c.name, func(t *testing.T) {
			checkHello(t, goHello(t, c.cfg), c.sni, c.alpn, c.tls13)
		})
	}
	t.Run("go-resumed", func(t *testing.T) {
		hello := goResumedHello(t)
		checkHello(t, hello, "resume.example.com", nil, true)
	})
}

func TestOpenSSLClients(t *testing.T) {
	testutil.SkipShort(t, "the openssl client captures")
	for _, c := range opensslCases() {
		t.Run(c.name, func(t *testing.T) {
			checkHello(t, opensslHello(t, c.args...), c.sni, c.alpn, c.tls13)
		})
	}
}

// TestTestdata parses the committed captures and compares with testdata/hellos.golden.
// With -update it first recaptures them (openssl and crypto/tls) and rewrites the golden file.
func TestTestdata(t *testing.T) {
	if *update {
		captureTestdata(t)
	}
	files, err := filepath.Glob("testdata/*.bin")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.bin (%v)", err)
	}
	var got strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h := parse(t, b)
		if h.Len != len(b) {
			t.Errorf("%s: Len %d of %d bytes", f, h.Len, len(b))
		}
		if ssni, salpn, _, err := stdlibView(b); err != nil || ssni != string(h.SNI) || !slices.Equal(salpn, alpnList(h)) {
			t.Errorf("%s: crypto/tls sees sni=%q alpn=%q err=%v; parser: %s", f, ssni, salpn, err, summary(h))
		}
		fmt.Fprintf(&got, "%s %s\n", filepath.Base(f), summary(h))
	}
	const golden = "testdata/hellos.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("parsed testdata differs from %s (rerun with -update if intended):\ngot:\n%s\nwant:\n%s", golden, got.String(), want)
	}
}

func captureTestdata(t *testing.T) {
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join("testdata", name+".bin"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range opensslCases() {
		b := opensslHello(t, c.args...)
		checkHello(t, b, c.sni, c.alpn, c.tls13)
		write(c.name, b)
	}
	for _, c := range goCases() {
		switch c.name {
		case "go-tls13", "go-tls12-only", "go-alpn-postgresql", "go-no-sni", "go-tls10-min":
			b := goHello(t, c.cfg)
			checkHello(t, b, c.sni, c.alpn, c.tls13)
			write(c.name, b)
			if c.name == "go-tls13" {
				write("go-tls13-split100", reframe(t, b, every(100)))
				write("go-tls13-first1", reframe(t, b, firstThen(1, MaxRecordLen)))
			}
		}
	}
	b := goResumedHello(t)
	checkHello(t, b, "resume.example.com", nil, true)
	write("go-resumed", b)
}

// errCase is a buffer and the error Parse must give: a sentinel (matched with errors.Is) or
// one of the detailed errors (matched exactly).
type errCase struct {
	name string
	buf  []byte
	want error
}

func checkErr(t *testing.T, c errCase) {
	t.Helper()
	var p Parser
	h := Hello{SNI: []byte("stale"), Len: 99}
	err := p.Parse(c.buf, &h)
	var pe *parseError
	if errors.As(c.want, &pe) {
		if err != c.want {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	} else if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
		t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
	}
	if err != nil && !reflectZero(&h) {
		t.Errorf("%s: Hello not zeroed on error: %s", c.name, summary(&h))
	}
}

func reflectZero(h *Hello) bool {
	return h.SNI == nil && h.ALPN == nil && h.SupportedVersions == nil && h.Len == 0 && h.Records == 0 &&
		h.Version == 0 && !h.ECH && !h.EarlyData
}

func TestRecordLayer(t *testing.T) {
	hello := defaultSpec(sniExt("a.test")).msg()
	rec := frame(hello, 1, every(MaxRecordLen))
	ccs := []byte{0x14, 3, 3, 0, 1, 1}
	cases := []errCase{
		{"empty buffer", nil, ErrIncomplete},
		{"one byte", []byte{0x16}, ErrIncomplete},
		{"two bytes", []byte{0x16, 3}, ErrIncomplete},
		{"record header only", rec[:5], ErrIncomplete},
		{"http request", []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"), errNotHandshake},
		{"http method byte", []byte("G"), ErrNotTLS},
		{"postgres SSLRequest", []byte{0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f}, ErrNotTLS},
		{"postgres startup", []byte{0, 0, 0, 0x29, 0, 3, 0, 0}, ErrNotTLS},
		{"alert record", []byte{0x15, 3, 3, 0, 2, 2, 40}, errNotHandshake},
		{"change cipher spec first", ccs, ErrNotTLS},
		{"sslv2 hello", []byte{0x80, 0x2e, 0x01, 0x00, 0x02}, ErrNotTLS},
		{"record version major 2", []byte{0x16, 2, 0, 0, 5}, errNotVersion3},
		{"record version major 0x03 minor odd", append([]byte{0x16, 3, 0x7f}, rec[3:]...), nil},
		{"oversize record, header only", []byte{0x16, 3, 1, 0x48, 0x01}, errRecordLen},
		{"max size record, header only", []byte{0x16, 3, 1, 0x48, 0x00}, ErrIncomplete},
		{"zero-length record", []byte{0x16, 3, 1, 0, 0}, errEmptyRecord},
		{"server hello", []byte{0x16, 3, 3, 0, 50, 2}, errHandshakeType},
		{"hello request", []byte{0x16, 3, 3, 0, 4, 0, 0, 0, 0}, ErrNotClientHello},
		{"too large, header only", []byte{0x16, 3, 1, 0x40, 0, 1, 0x01, 0x00, 0x00}, errMessageLen},
		{"too large split header", frame([]byte{1, 1, 0, 0}, 1, every(1)), ErrTooLarge},
		{"too short body", frame([]byte{1, 0, 0, 40}, 1, every(MaxRecordLen)), errShort},
		{"interleaved ccs", slices.Concat(frame(hello[:10], 1, every(10)), ccs), errInterleaved},
		{"interleaved alert", slices.Concat(frame(hello[:10], 1, every(10)), []byte{0x15, 3, 3, 0, 2, 2, 40}), errInterleaved},
		{"interleaved bad version", slices.Concat(frame(hello[:10], 1, every(10)), []byte{0x16, 4, 3, 0, 2, 2, 40}), errRecordVersion},
		{"second record empty", slices.Concat(frame(hello[:10], 1, every(10)), []byte{0x16, 3, 3, 0, 0}), errEmptyRecord},
		{"trailing byte in last record", frame(append(slices.Clone(hello), 0), 1, every(MaxRecordLen)), errTrailing},
		{"trailing bytes announced, record incomplete", frame(append(slices.Clone(hello), 0), 1, every(MaxRecordLen))[:20], errTrailing},
		{"second handshake message in record", frame(slices.Concat(hello, hello), 1, every(MaxRecordLen)), errTrailing},
		{"complete hello", rec, nil},
		{"hello then ccs record", slices.Concat(rec, ccs), nil},
		{"hello then garbage", slices.Concat(rec, []byte("garbage")), nil},
	}
	for _, c := range cases {
		checkErr(t, c)
	}

	// A smaller MaxLen is enforced from the handshake header.
	p := Parser{MaxLen: len(hello) - 1}
	var h Hello
	if err := p.Parse(rec[:9], &h); !errors.Is(err, ErrTooLarge) {
		t.Errorf("MaxLen one short: err = %v, want ErrTooLarge", err)
	}
	p.MaxLen = len(hello)
	if err := p.Parse(rec, &h); err != nil {
		t.Errorf("MaxLen = message length: %v", err)
	}

	// Data after the hello is left alone and not counted.
	h = *parse(t, slices.Concat(rec, ccs))
	if h.Len != len(rec) || h.Records != 1 {
		t.Errorf("hello+ccs: Len %d Records %d, want %d 1", h.Len, h.Records, len(rec))
	}
}

func TestClientHelloBody(t *testing.T) {
	rec := func(s chSpec) []byte { return s.record() }
	withSpec := func(f func(*chSpec)) []byte {
		s := defaultSpec(sniExt("a.test"))
		f(&s)
		return s.record()
	}
	many := func(n int, dup bool) []ext {
		var es []ext
		for i := range n {
			es = append(es, ext{uint16(0x1000 + i), nil})
		}
		if dup {
			es = append(es, ext{0x1000 + uint16(n/2), []byte{1}})
		}
		return es
	}
	sniBody := sniExt("a.test").data
	alpnBody := alpnExt("h2").data
	cases := []errCase{
		{"no extensions block (TLS 1.0 style)", rec(chSpec{version: 0x0301, suites: []byte{0, 0x2f}, comp: []byte{0}, noExtBlock: true}), nil},
		{"empty extensions block", rec(defaultSpec()), nil},
		{"empty session id", withSpec(func(s *chSpec) { s.sessionID = nil }), nil},
		{"session id 33 bytes", withSpec(func(s *chSpec) { s.sessionID = make([]byte, 33) }), errSessionID},
		{"session id past the end", frame(slices.Concat([]byte{1, 0, 0, 41, 3, 3}, make([]byte, 32), []byte{32}, make([]byte, 6)), 1, every(1000)), errShort},
		{"cipher suites length past the end", frame(slices.Concat([]byte{1, 0, 0, 41, 3, 3}, make([]byte, 32), []byte{6}, make([]byte, 6)), 1, every(1000)), errShort},
		{"compression length past the end", frame(slices.Concat([]byte{1, 0, 0, 41, 3, 3}, make([]byte, 32), []byte{2, 0, 0, 0, 2, 0, 0}), 1, every(1000)), errShort},
		{"colliding extension types, no duplicate", rec(defaultSpec(collidingExts()...)), nil},
		{"colliding extension types + duplicate", rec(defaultSpec(append(collidingExts(), ext{0x1000, nil})...)), errDuplicateExt},
		{"no cipher suites", withSpec(func(s *chSpec) { s.suites = nil }), errCipherSuites},
		{"odd cipher suites", withSpec(func(s *chSpec) { s.suites = []byte{0x13, 0x01, 0x13} }), errCipherSuites},
		{"no compression methods", withSpec(func(s *chSpec) { s.comp = nil }), errCompression},
		{"version major 2", withSpec(func(s *chSpec) { s.version = 0x0200 }), errVersion},
		{"extension header truncated", withSpec(func(s *chSpec) { s.extTail = []byte{0, 1, 0} }), errExtension},
		{"extension longer than block", withSpec(func(s *chSpec) { s.extTail = []byte{0, 1, 0, 5, 1} }), errExtension},
		{"duplicate server_name extension", rec(defaultSpec(sniExt("a.test"), sniExt("b.test"))), errDuplicateExt},
		{"duplicate server_name, same name", rec(defaultSpec(sniExt("a.test"), alpnExt("h2"), sniExt("a.test"))), errDuplicateExt},
		{"duplicate alpn extension", rec(defaultSpec(alpnExt("h2"), alpnExt("h2"))), errDuplicateExt},
		{"duplicate unknown extension", rec(defaultSpec(ext{0x1234, nil}, sniExt("a.test"), ext{0x1234, []byte{1}})), errDuplicateExt},
		{"60 distinct extensions", rec(defaultSpec(many(60, false)...)), nil},
		{"60 extensions + duplicate", rec(defaultSpec(many(60, true)...)), errDuplicateExt},
		{"5000 distinct extensions", rec(defaultSpec(many(5000, false)...)), nil},
		{"5000 extensions + duplicate", rec(defaultSpec(many(5000, true)...)), errDuplicateExt},
		{"two host_names", rec(defaultSpec(sniExt("a.test", "b.test"))), errDuplicateHost},
		{"empty server_name extension", rec(defaultSpec(ext{extServerName, nil})), errServerName},
		{"empty server_name list", rec(defaultSpec(ext{extServerName, []byte{0, 0}})), errServerName},
		{"server_name list length too long", rec(defaultSpec(ext{extServerName, slices.Concat([]byte{0, 10}, sniBody[2:])})), errServerName},
		{"server_name list length too short", rec(defaultSpec(ext{extServerName, slices.Concat([]byte{0, 8}, sniBody[2:])})), errServerName},
		{"host_name length past the list", rec(defaultSpec(ext{extServerName, []byte{0, 4, 0, 0, 5, 'a'}})), errServerName},
		{"host_name entry truncated", rec(defaultSpec(ext{extServerName, []byte{0, 2, 0, 0}})), errServerName},
		{"empty host_name", rec(defaultSpec(sniExt(""))), errServerName},
		{"empty alpn extension", rec(defaultSpec(ext{extALPN, nil})), errALPN},
		{"empty alpn list", rec(defaultSpec(ext{extALPN, []byte{0, 0}})), errALPN},
		{"empty alpn name", rec(defaultSpec(alpnExt("h2", ""))), errALPN},
		{"alpn name past the list", rec(defaultSpec(ext{extALPN, []byte{0, 3, 5, 'h', '2'}})), errALPN},
		{"alpn list length wrong", rec(defaultSpec(ext{extALPN, slices.Concat([]byte{0, 9}, alpnBody[2:])})), errALPN},
		{"supported_versions odd", rec(defaultSpec(ext{extSupportedVersions, []byte{3, 3, 4, 3}})), errVersions},
		{"supported_versions empty list", rec(defaultSpec(ext{extSupportedVersions, []byte{0}})), errVersions},
		{"supported_versions length wrong", rec(defaultSpec(ext{extSupportedVersions, []byte{4, 3, 4}})), errVersions},
		{"early_data with bytes", rec(defaultSpec(ext{extEarlyData, []byte{0}})), errEarlyDataBytes},
	}
	for _, c := range cases {
		checkErr(t, c)
	}

	// The extensions block length must match what follows, in both directions.
	good := defaultSpec(sniExt("a.test")).msg()
	extLenAt := len(good) - len(sniExt("a.test").data) - 4 - 2
	for _, d := range []int{-1, +1, -4, 0x100} {
		m := slices.Clone(good)
		v := int(be16(m[extLenAt:])) + d
		m[extLenAt], m[extLenAt+1] = byte(v>>8), byte(v)
		checkErr(t, errCase{fmt.Sprintf("extensions length %+d", d), frame(m, 1, every(MaxRecordLen)), errExtensions})
	}
	// A single stray byte where the extensions block length would be.
	m := defaultSpec().msg()
	m = append(m[:len(m)-2], 0)
	m[3]--
	checkErr(t, errCase{"one stray byte", frame(m, 1, every(MaxRecordLen)), errExtensions})
}

func TestFields(t *testing.T) {
	h := parse(t, defaultSpec(
		ext{0x0a0a, nil}, // GREASE
		sniEntries(sniEntry{1, "not-a-host-name"}, sniEntry{0, "Db.Example.COM."}),
		alpnExt("h2", "http/1.1", "postgresql"),
		versionsExt(0x3a3a, 0x0304, 0x0303),
		ext{extEarlyData, nil},
		ext{extECH, []byte{0, 1, 2}},
	).record())
	if string(h.SNI) != "Db.Example.COM." {
		t.Errorf("SNI = %q: want the host_name as sent", h.SNI)
	}
	if !h.HasALPN("postgresql") || !h.HasALPN("h2") || h.HasALPN("h3") || h.HasALPN("") || h.HasALPN("postgresq") {
		t.Errorf("HasALPN wrong for %q", h.ALPN)
	}
	if !h.SupportsVersion(0x0304) || !h.SupportsVersion(0x0303) || h.SupportsVersion(0x0302) || h.MaxVersion() != 0x0304 {
		t.Errorf("versions: %s", summary(h))
	}
	if !h.EarlyData || !h.ECH || h.Version != 0x0303 || h.Records != 1 {
		t.Errorf("flags: %s", summary(h))
	}
	// SNI and ALPN are capped: appending to them cannot overwrite the connection's bytes.
	if cap(h.SNI) != len(h.SNI) || cap(h.ALPN) != len(h.ALPN) {
		t.Error("SNI/ALPN capacity reaches past their bytes")
	}

	// A trailing dot comes back as sent: crypto/tls's client strips it and its server refuses
	// it, so the caller normalises (or refuses) before routing.
	dotted := defaultSpec(sniExt("a.test.")).record()
	if h := parse(t, dotted); string(h.SNI) != "a.test." {
		t.Errorf("SNI = %q, want %q", h.SNI, "a.test.")
	}
	if _, _, _, err := stdlibView(dotted); err == nil {
		t.Error("crypto/tls now accepts an SNI with a trailing dot")
	}

	// Only a server_name of another name type: no SNI.
	h = parse(t, defaultSpec(sniEntries(sniEntry{1, "x"})).record())
	if h.SNI != nil {
		t.Errorf("SNI = %q, want nil", h.SNI)
	}
	// Without supported_versions, legacy_version rules.
	h = parse(t, chSpec{version: 0x0302, suites: []byte{0, 0x2f}, comp: []byte{0}, noExtBlock: true}.record())
	if h.MaxVersion() != 0x0302 || !h.SupportsVersion(0x0301) || h.SupportsVersion(0x0303) || h.SupportsVersion(0x0200) || h.SNI != nil || h.ALPN != nil {
		t.Errorf("TLS 1.1 hello: %s", summary(h))
	}
	var zero Hello
	if zero.HasALPN("h2") {
		t.Error("zero Hello has ALPN")
	}
	bad := Hello{ALPN: []byte{5, 'h'}} // a hand-made Hello must not make HasALPN panic
	if bad.HasALPN("h") {
		t.Error("truncated ALPN list matched")
	}
}

func TestErrors(t *testing.T) {
	var p Parser
	var h Hello
	err := p.Parse(defaultSpec(sniExt("a.test"), sniExt("a.test")).record(), &h)
	if !errors.Is(err, ErrMalformed) || errors.Is(err, ErrNotTLS) {
		t.Fatalf("errors.Is mismatch for %v", err)
	}
	if got, want := err.Error(), "clienthello: malformed: duplicate extension"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if err := p.Parse([]byte{0x16, 3}, &h); err != ErrIncomplete {
		t.Errorf("ErrIncomplete is returned wrapped: %#v", err)
	}
	for _, e := range []error{errNotHandshake, errHandshakeType, errMessageLen, errTrailing} {
		if s := e.Error(); !strings.HasPrefix(s, "clienthello: ") || strings.HasSuffix(s, ".") {
			t.Errorf("error string %q", s)
		}
	}
}

func TestSplitRecords(t *testing.T) {
	hello := goHello(t, goCases()[2].cfg) // ALPN h2
	want := content(parse(t, hello))
	var p Parser
	var h Hello
	buf := reframe(t, hello, every(1))
	if err := p.Parse(buf, &h); err != nil {
		t.Fatal(err)
	}
	if content(&h) != want || h.Records != len(hello)-5 || h.Len != len(buf) {
		t.Errorf("1-byte records: %s, want %s", summary(&h), want)
	}
	// The split case reassembles into the scratch buffer; the single-record case reads buf.
	if !within(h.SNI, p.scratch) {
		t.Error("split: SNI does not alias the scratch buffer")
	}
	if err := p.Parse(hello, &h); err != nil || !within(h.SNI, hello) {
		t.Errorf("single record: SNI does not alias buf (err %v)", err)
	}
}

func TestSplitReads(t *testing.T) {
	hello := goHello(t, goCases()[0].cfg)
	var p Parser
	for _, buf := range [][]byte{hello, reframe(t, hello, every(1)), reframe(t, hello, every(100))} {
		checkPrefixes(t, &p, buf, 1) // every prefix
		var h Hello
		if err := p.Parse(buf, &h); err != nil || string(h.SNI) != "db.example.com" {
			t.Errorf("full buffer: %v %s", err, summary(&h))
		}
	}
}

// TestResume checks the state a Parser keeps between calls for a message split over records:
// it resumes only on a buffer that starts with the bytes it walked.
func TestResume(t *testing.T) {
	hello := goHello(t, goCases()[0].cfg)
	buf := reframe(t, hello, every(3))
	fresh := func(b []byte) string {
		var q Parser
		var h Hello
		err := q.Parse(b, &h)
		return fmt.Sprint(err, summary(&h))
	}
	var p Parser
	var h Hello
	half := buf[:len(buf)/2]
	if err := p.Parse(half, &h); err != ErrIncomplete || len(p.seen) == 0 {
		t.Fatalf("half: %v, %d bytes remembered", err, len(p.seen))
	}
	// The same buffer, grown: resumes and completes.
	if err := p.Parse(buf, &h); err != nil || string(h.SNI) != "db.example.com" {
		t.Fatalf("resumed: %v %s", err, summary(&h))
	}

	// Other bytes where the walked records were: a fresh walk, the same answer as a new Parser.
	msg, _, _ := unframe(hello)
	i := bytes.Index(msg, []byte("db.example.com"))
	sniAt := i/3*(recordHeaderLen+3) + recordHeaderLen + i%3 // where msg[i] went in buf
	if buf[sniAt] != 'd' || sniAt >= len(half) {
		t.Fatalf("SNI not at %d", sniAt)
	}
	for _, c := range []struct {
		name string
		at   int
		b    byte
	}{
		{"record type", 0, 0x17},
		{"record length", 4, 2},
		{"handshake type", 5, 2},
		{"fragment byte (SNI)", sniAt, 'D'},
		{"last walked byte", len(half) - 1, half[len(half)-1] ^ 1},
	} {
		p.Parse(half, &h)
		other := slices.Clone(buf)
		other[c.at] = c.b
		err := p.Parse(other, &h)
		if got, want := fmt.Sprint(err, summary(&h)), fresh(other); got != want {
			t.Errorf("%s changed: got %s, want %s", c.name, got, want)
		}
	}
	// A shorter buffer, a different MaxLen: no resuming either.
	p.Parse(half, &h)
	if err := p.Parse(buf[:20], &h); err != ErrIncomplete {
		t.Errorf("shorter buffer: %v", err)
	}
	p.Parse(half, &h)
	p.MaxLen = len(hello) - recordHeaderLen - 1
	if err := p.Parse(buf, &h); !errors.Is(err, ErrTooLarge) {
		t.Errorf("smaller MaxLen after resume: %v", err)
	}
	p.MaxLen = 0
	// After success or failure nothing is remembered.
	p.Parse(half, &h)
	p.Parse(buf, &h)
	if len(p.seen) != 0 {
		t.Error("state kept after success")
	}
}

func TestGarbage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	hello := goHello(t, goCases()[0].cfg)
	var p Parser
	var h Hello
	for i := range 20000 {
		buf := make([]byte, r.IntN(2000))
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
		switch i % 4 {
		case 1: // a plausible record header
			if len(buf) >= 5 {
				buf[0], buf[1] = 0x16, 3
			}
		case 2: // a real hello with random bytes flipped
			buf = slices.Clone(hello)
			for range 1 + r.IntN(4) {
				buf[r.IntN(len(buf))] ^= byte(1 + r.IntN(255))
			}
		case 3: // a real hello cut into small records, bytes flipped
			buf = reframe(t, hello, every(1+r.IntN(64)))
			buf[r.IntN(len(buf))] ^= byte(1 + r.IntN(255))
		}
		err := p.Parse(buf, &h)
		if err == nil {
			checkInvariants(t, &p, buf, &h)
		} else if err != ErrIncomplete && !errors.Is(err, ErrNotTLS) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrNotClientHello) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("unexpected error %v", err)
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	single := goHello(t, goCases()[0].cfg)
	split := reframe(t, single, every(100))
	bad := defaultSpec(sniExt("a.test"), sniExt("a.test")).record()
	var p Parser
	var h Hello
	p.Parse(split, &h) // grow the scratch buffer once
	for name, buf := range map[string][]byte{
		"single record": single,
		"split":         split,
		"incomplete":    single[:100],
		"not tls":       []byte("GET / HTTP/1.1\r\n"),
		"malformed":     bad,
	} {
		if n := testing.AllocsPerRun(100, func() { p.Parse(buf, &h) }); n != 0 {
			t.Errorf("%s: %v allocs per Parse", name, n)
		}
	}
	// A fresh Parser does not allocate for a single record either.
	if n := testing.AllocsPerRun(100, func() {
		var q Parser
		q.Parse(single, &h)
	}); n != 0 {
		t.Errorf("fresh parser, single record: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() { h.HasALPN("h2") }); n != 0 {
		t.Errorf("HasALPN: %v allocs", n)
	}
}

// within reports whether b lies inside outer's backing array (up to its capacity).
func within(b, outer []byte) bool {
	if len(b) == 0 {
		return true
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(outer)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(cap(outer))
}

// collidingExts returns a few extensions whose types share a bit of parseBody's filter, so
// that the exact duplicate check runs.
func collidingExts() []ext {
	bit := func(t uint16) uint32 { return uint32(t) * 0x9e3779b1 >> 22 }
	es := []ext{{0x1000, nil}}
	for t := uint16(0x1001); len(es) < 3; t++ {
		if bit(t) == bit(0x1000) {
			es = append(es, ext{t, nil})
		}
	}
	return es
}
