package pgwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func FuzzClassify(f *testing.F) {
	f.Add([]byte(SSLRequest))
	f.Add([]byte(GSSENCRequest))
	f.Add(AppendCancelRequest(nil, 12345, []byte{1, 2, 3, 4}))
	f.Add(AppendCancelRequest(nil, 1, bytes.Repeat([]byte{9}, 32)))
	f.Add(startup(ProtocolVersion30, "user", "u", "database", "d"))
	f.Add(startup(ProtocolVersion32, "user", "u"))
	f.Add([]byte{0x16, 3, 1, 0, 200, 1})
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, n, err := Classify(b)
		switch {
		case errors.Is(err, ErrIncomplete):
			if kind != KindUnknown || n <= len(b) || n > ClassifyBytes {
				t.Fatalf("incomplete: kind %v, n %d for %d bytes", kind, n, len(b))
			}
			// Reading the n bytes asked for makes progress: decided, or asking for more.
			ext := append(append([]byte{}, b...), make([]byte, n-len(b))...)
			if _, n2, err := Classify(ext); errors.Is(err, ErrIncomplete) && n2 <= n {
				t.Fatalf("still incomplete with the %d bytes it asked for", n)
			}
		case err != nil:
			if kind != KindUnknown || n != 0 {
				t.Fatalf("rejected with kind %v, n %d", kind, n)
			}
		default:
			if kind == KindUnknown {
				t.Fatal("KindUnknown without error")
			}
		}
		if err != nil && !errors.Is(err, ErrIncomplete) && !errors.Is(err, ErrNotPostgres) && !errors.Is(err, ErrBadLength) {
			t.Fatalf("unexpected error %v", err)
		}
		if err == nil {
			switch kind {
			case KindTLS:
				if b[0] != 0x16 || n != 0 {
					t.Fatalf("tls: % x, n %d", b[:1], n)
				}
			case KindSSLRequest, KindGSSENCRequest:
				if n != 8 || len(b) < 8 {
					t.Fatalf("%v: n %d", kind, n)
				}
			case KindCancelRequest, KindStartup:
				if len(b) < 8 || n != int(binary.BigEndian.Uint32(b)) || n < 8 || n > 4+MaxStartupPacketLength {
					t.Fatalf("%v: n %d for % x", kind, n, b[:8])
				}
			}
			if kind == KindCancelRequest && len(b) >= n {
				if _, _, err := ParseCancel(b[:n]); err != nil {
					t.Fatalf("Classify says cancel, ParseCancel: %v", err)
				}
			}
		}
		// Bytes after the first 8 never change the kind, and a longer read never turns an
		// acceptance into a rejection or back.
		if len(b) > ClassifyBytes {
			k8, n8, err8 := Classify(b[:ClassifyBytes])
			if k8 != kind || n8 != n || (err8 == nil) != (err == nil) {
				t.Fatalf("first 8 bytes: %v %d %v; all %d bytes: %v %d %v", k8, n8, err8, len(b), kind, n, err)
			}
		}
		for i := 1; i < len(b) && i < ClassifyBytes; i++ {
			kp, _, errp := Classify(b[:i])
			if errors.Is(errp, ErrIncomplete) {
				continue
			}
			if kp != kind || (errp == nil) != (err == nil) {
				t.Fatalf("prefix %d decided %v %v, full input %v %v", i, kp, errp, kind, err)
			}
		}
	})
}

func FuzzParseCancel(f *testing.F) {
	f.Add(AppendCancelRequest(nil, 12345, []byte{0xde, 0xad, 0xbe, 0xef}))
	f.Add(AppendCancelRequest(nil, 7, bytes.Repeat([]byte{1}, 32)))
	f.Add(AppendCancelRequest(nil, 7, bytes.Repeat([]byte{1}, 256)))
	f.Add([]byte(SSLRequest))
	f.Add([]byte{0, 0, 0, 12, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		pid, key, err := ParseCancel(b)
		if err != nil {
			if key != nil || pid != 0 {
				t.Fatal("values with an error")
			}
			return
		}
		if len(key) < 1 || len(key) > MaxCancelKeyLength || len(b) != 12+len(key) {
			t.Fatalf("key length %d for %d bytes", len(key), len(b))
		}
		if got := AppendCancelRequest(nil, pid, key); !bytes.Equal(got, b) {
			t.Fatalf("round trip: % x != % x", got, b)
		}
		if kind, n, err := Classify(b); kind != KindCancelRequest || n != len(b) || err != nil {
			t.Fatalf("Classify disagrees: %v %d %v", kind, n, err)
		}
	})
}

func FuzzErrorResponse(f *testing.F) {
	f.Add("28000", "TLS with SNI required", "use sslmode=require host=<name>")
	f.Add("08P01", "", "")
	f.Add("XX000", "a\x00b", "\x00")
	f.Fuzz(func(t *testing.T, sqlstate, message, hint string) {
		if !validSQLState(sqlstate) {
			return
		}
		b := ErrorResponse(sqlstate, message, hint)
		fields, err := parseErrorResponse(b)
		if err != nil {
			t.Fatalf("%v: %q", err, b)
		}
		strip := func(s string) string { return string(bytes.ReplaceAll([]byte(s), []byte{0}, nil)) }
		if fields['S'] != "FATAL" || fields['V'] != "FATAL" || fields['C'] != sqlstate || fields['M'] != strip(message) {
			t.Fatalf("fields %q", fields)
		}
		if h, ok := fields['H']; ok != (hint != "") || h != strip(hint) {
			t.Fatalf("hint %q (present %v) for %q", h, ok, hint)
		}
	})
}
