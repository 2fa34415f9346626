package pgwire

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// startup builds a StartupMessage for protocol version v with the given parameters.
func startup(v uint32, params ...string) []byte {
	var body []byte
	body = binary.BigEndian.AppendUint32(body, v)
	for _, p := range params {
		body = append(body, p...)
		body = append(body, 0)
	}
	body = append(body, 0)
	return append(binary.BigEndian.AppendUint32(nil, uint32(4+len(body))), body...)
}

// clientHello returns the first bytes a Go TLS client sends.
func clientHello(t *testing.T) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	go func() {
		_ = tls.Client(c, &tls.Config{ServerName: "db.example", NextProtos: []string{"postgresql"}}).Handshake()
	}()
	buf := make([]byte, 4096)
	n, err := s.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return buf[:n]
}

func TestConstantsMatchTheProtocolDocs(t *testing.T) {
	// The bytes as the PostgreSQL documentation (protocol-message-formats) and
	// shared/docs/protocols.md print them.
	for _, c := range []struct {
		name string
		got  string
		want []byte
	}{
		{"SSLRequest", SSLRequest, []byte{0x00, 0x00, 0x00, 0x08, 0x04, 0xd2, 0x16, 0x2f}},
		{"GSSENCRequest", GSSENCRequest, []byte{0x00, 0x00, 0x00, 0x08, 0x04, 0xd2, 0x16, 0x30}},
	} {
		if !bytes.Equal([]byte(c.got), c.want) {
			t.Errorf("%s = % x, want % x", c.name, c.got, c.want)
		}
	}
	if SSLRequestCode != 80877103 || GSSENCRequestCode != 80877104 || CancelRequestCode != 80877102 {
		t.Errorf("request codes %d %d %d", SSLRequestCode, GSSENCRequestCode, CancelRequestCode)
	}
	if ProtocolVersion30 != 196608 || ProtocolVersion32 != 196610 {
		t.Errorf("protocol versions %d %d", ProtocolVersion30, ProtocolVersion32)
	}
}

func TestClassify(t *testing.T) {
	cancel30 := []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0x30, 0x39, 0xde, 0xad, 0xbe, 0xef}
	cancel32 := AppendCancelRequest(nil, 4242, bytes.Repeat([]byte{7}, 32))
	st30 := startup(ProtocolVersion30, "user", "alice", "database", "app")
	st32 := startup(ProtocolVersion32, "user", "alice")
	hello := clientHello(t)

	for _, c := range []struct {
		name     string
		in       []byte
		kind     Kind
		n        int
		err      error
		wantSame bool // also check every prefix ≥ 8 bytes gives the same result
	}{
		{"empty", nil, KindUnknown, 1, ErrIncomplete, false},
		{"ssl", []byte(SSLRequest), KindSSLRequest, 8, nil, true},
		{"ssl with trailing bytes", append([]byte(SSLRequest), 0x16, 3, 1), KindSSLRequest, 8, nil, true},
		{"ssl 7 bytes", []byte(SSLRequest)[:7], KindUnknown, 8, ErrIncomplete, false},
		{"ssl 1 byte", []byte{0}, KindUnknown, 8, ErrIncomplete, false},
		{"gssenc", []byte(GSSENCRequest), KindGSSENCRequest, 8, nil, true},
		{"cancel 3.0", cancel30, KindCancelRequest, 16, nil, true},
		{"cancel 3.0 header only", cancel30[:8], KindCancelRequest, 16, nil, false},
		{"cancel 3.2", cancel32, KindCancelRequest, 44, nil, true},
		{"cancel 1-byte key", AppendCancelRequest(nil, 1, []byte{1}), KindCancelRequest, 13, nil, true},
		{"cancel 256-byte key", AppendCancelRequest(nil, 1, make([]byte, 256)), KindCancelRequest, 268, nil, true},
		{"cancel no key", []byte{0, 0, 0, 12, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1}, KindUnknown, 0, ErrBadLength, false},
		{"cancel 257-byte key", []byte{0, 0, 0x01, 0x0d, 0x04, 0xd2, 0x16, 0x2e}, KindUnknown, 0, ErrBadLength, false},
		{"startup 3.0", st30, KindStartup, len(st30), nil, true},
		{"startup 3.2", st32, KindStartup, len(st32), nil, true},
		{"startup smallest", []byte{0, 0, 0, 8, 0, 3, 0, 0}, KindStartup, 8, nil, true},
		{"startup too short", []byte{0, 0, 0, 7, 0, 3, 0, 0}, KindUnknown, 0, ErrBadLength, false},
		{"startup largest", []byte{0, 0, 0x27, 0x14, 0, 3, 0, 0}, KindStartup, 10004, nil, false},
		{"startup too long", []byte{0, 0, 0x27, 0x15, 0, 3, 0, 0}, KindUnknown, 0, ErrBadLength, false},
		{"protocol 2.0", []byte{0, 0, 1, 0x28, 0, 2, 0, 0}, KindUnknown, 0, ErrNotPostgres, false},
		{"ssl request length 9", []byte{0, 0, 0, 9, 0x04, 0xd2, 0x16, 0x2f, 0}, KindUnknown, 0, ErrBadLength, false},
		{"gssenc length 16", []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x30}, KindUnknown, 0, ErrBadLength, false},
		{"unknown 1234 code", []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x31}, KindUnknown, 0, ErrNotPostgres, false},
		{"tls clienthello", hello, KindTLS, 0, nil, false},
		{"tls first byte only", []byte{0x16}, KindTLS, 0, nil, false},
		{"http", []byte("GET / HTTP/1.1\r\n"), KindUnknown, 0, ErrNotPostgres, false},
		{"http first byte", []byte("G"), KindUnknown, 0, ErrNotPostgres, false},
		{"tls alert", []byte{0x15, 3, 3, 0, 2, 2, 40}, KindUnknown, 0, ErrNotPostgres, false},
		{"length 64K", []byte{0, 1}, KindUnknown, 0, ErrNotPostgres, false},
		{"bad code byte 5", []byte{0, 0, 0, 8, 0x05}, KindUnknown, 0, ErrNotPostgres, false},
		{"bad code byte 6", []byte{0, 0, 0, 8, 0x04, 0xd3}, KindUnknown, 0, ErrNotPostgres, false},
		{"mixed code bytes", []byte{0, 0, 0, 8, 0x00, 0xd2}, KindUnknown, 0, ErrNotPostgres, false},
		{"protocol 3 prefix", []byte{0, 0, 0, 40, 0x00, 0x03}, KindUnknown, 8, ErrIncomplete, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			kind, n, err := Classify(c.in)
			if kind != c.kind || n != c.n || !errors.Is(err, c.err) {
				t.Fatalf("Classify(% x) = %v, %d, %v; want %v, %d, %v", c.in, kind, n, err, c.kind, c.n, c.err)
			}
			if !c.wantSame {
				return
			}
			for i := 8; i <= len(c.in); i++ {
				k2, n2, err2 := Classify(c.in[:i])
				if k2 != kind || n2 != n || err2 != err {
					t.Fatalf("prefix %d: %v %d %v", i, k2, n2, err2)
				}
			}
		})
	}
}

func TestKindString(t *testing.T) {
	want := map[Kind]string{
		KindUnknown: "unknown", KindSSLRequest: "ssl_request", KindGSSENCRequest: "gssenc_request",
		KindCancelRequest: "cancel_request", KindStartup: "startup", KindTLS: "tls", Kind(99): "unknown", Kind(-1): "unknown",
	}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), k.String(), s)
		}
	}
}

func TestParseCancel(t *testing.T) {
	// Protocol 3.0: 16 bytes, pid 12345, key de ad be ef.
	cancel30 := []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0x30, 0x39, 0xde, 0xad, 0xbe, 0xef}
	pid, key, err := ParseCancel(cancel30)
	if err != nil || pid != 12345 || !bytes.Equal(key, []byte{0xde, 0xad, 0xbe, 0xef}) {
		t.Fatalf("3.0: %d % x %v", pid, []byte(key), err)
	}
	// Protocol 3.2: PostgreSQL 18 sends 32-byte keys.
	key32 := bytes.Repeat([]byte{0xab}, 32)
	pid, key, err = ParseCancel(AppendCancelRequest(nil, 77, key32))
	if err != nil || pid != 77 || !bytes.Equal(key, key32) {
		t.Fatalf("3.2: %d % x %v", pid, []byte(key), err)
	}
	// The key aliases the input and cannot be appended to in place.
	if cap(key) != len(key) {
		t.Errorf("key cap %d != len %d", cap(key), len(key))
	}

	for _, c := range []struct {
		name string
		in   []byte
		err  error
	}{
		{"empty", nil, ErrIncomplete},
		{"7 bytes", cancel30[:7], ErrIncomplete},
		{"header only", cancel30[:8], ErrIncomplete},
		{"15 bytes", cancel30[:15], ErrIncomplete},
		{"trailing", append(append([]byte{}, cancel30...), 0), ErrTrailingBytes},
		{"ssl request", []byte(SSLRequest), ErrNotCancel},
		{"startup", startup(ProtocolVersion30, "user", "x"), ErrNotCancel},
		{"no key", []byte{0, 0, 0, 12, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1}, ErrBadLength},
		{"key too long", append([]byte{0, 0, 0x01, 0x0d, 0x04, 0xd2, 0x16, 0x2e}, make([]byte, 261)...), ErrBadLength},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0x04, 0xd2, 0x16, 0x2e}, ErrBadLength},
	} {
		if _, _, err := ParseCancel(c.in); !errors.Is(err, c.err) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.err)
		}
	}
}

func TestCancelKeyIsRedacted(t *testing.T) {
	key := CancelKey{0xde, 0xad, 0xbe, 0xef}
	var logged bytes.Buffer
	// Without the time: its digits may hold "222", the key's first byte in decimal.
	noTime := &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	slog.New(slog.NewTextHandler(&logged, noTime)).Info("cancel", "key", key)
	slog.New(slog.NewJSONHandler(&logged, noTime)).Info("cancel", "key", key)
	js, _ := json.Marshal(struct{ Key CancelKey }{key})
	for _, s := range []string{
		fmt.Sprint(key), fmt.Sprintf("%v %s %x %q %+v %#v", key, key, key, key, key, key),
		logged.String(), string(js),
	} {
		if strings.Contains(strings.ToLower(s), "dead") || strings.Contains(s, "\xde") || strings.Contains(s, "222") {
			t.Errorf("key leaked: %q", s)
		}
		if !strings.Contains(s, "redacted") && !strings.Contains(s, "5b72656461637465645d") { // %x of "[redacted]"
			t.Errorf("no [redacted] in %q", s)
		}
	}
}

func TestAppendCancelRequestPanics(t *testing.T) {
	for _, n := range []int{0, 257} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("key length %d: no panic", n)
				}
			}()
			AppendCancelRequest(nil, 1, make([]byte, n))
		}()
	}
}

func TestErrorResponse(t *testing.T) {
	got := ErrorResponse(SQLStateInvalidAuthorization, "TLS required", "use sslmode=require")
	want := []byte("E\x00\x00\x00\x3d" +
		"SFATAL\x00VFATAL\x00C28000\x00MTLS required\x00Huse sslmode=require\x00\x00")
	if !bytes.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if n := binary.BigEndian.Uint32(got[1:5]); int(n) != len(got)-1 {
		t.Fatalf("length word %d, message %d", n, len(got)-1)
	}

	// No hint, NUL bytes dropped, appended after existing bytes.
	got = AppendErrorResponse([]byte("xy"), "08P01", "a\x00b", "")
	want = []byte("xyE\x00\x00\x00\x1eSFATAL\x00VFATAL\x00C08P01\x00Mab\x00\x00")
	if !bytes.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	fields, err := parseErrorResponse(got[2:])
	if err != nil || fields['M'] != "ab" || fields['C'] != "08P01" || fields['S'] != "FATAL" {
		t.Fatalf("parse: %v %q", err, fields)
	}

	for _, bad := range []string{"", "2800", "280000", "28a00", "28\x0000"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("sqlstate %q: no panic", bad)
				}
			}()
			ErrorResponse(bad, "m", "")
		}()
	}
}

// parseErrorResponse reads an ErrorResponse as a client does, strictly.
func parseErrorResponse(b []byte) (map[byte]string, error) {
	if len(b) < 6 || b[0] != 'E' {
		return nil, errors.New("not an ErrorResponse")
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if int(n) != len(b)-1 {
		return nil, fmt.Errorf("length %d, have %d", n, len(b)-1)
	}
	body := b[5:]
	fields := map[byte]string{}
	for {
		if len(body) == 0 {
			return nil, errors.New("no terminator")
		}
		code := body[0]
		if code == 0 {
			if len(body) != 1 {
				return nil, errors.New("bytes after terminator")
			}
			return fields, nil
		}
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return nil, errors.New("unterminated field")
		}
		fields[code] = string(body[1 : 1+end])
		body = body[2+end:]
	}
}

func TestNoAllocations(t *testing.T) {
	ssl, cancel := []byte(SSLRequest), AppendCancelRequest(nil, 1, []byte{1, 2, 3, 4})
	http := []byte("GET / HTTP/1.1")
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		Classify(ssl)
		Classify(cancel)
		Classify(http)
		ParseCancel(cancel)
		ParseCancel(ssl)
		AppendErrorResponse(buf[:0], "28000", "m", "h")
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
