package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestClientHelloIsOneRecordWithSNI(t *testing.T) {
	h, err := ClientHello("echo.bench.test")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ReadRecord(bytes.NewReader(h), nil)
	if err != nil || len(rec) != len(h) {
		t.Fatalf("record: %d of %d bytes, %v", len(rec), len(h), err)
	}
	if h[5] != 1 { // handshake type client_hello
		t.Fatalf("handshake type %d", h[5])
	}
	if !bytes.Contains(h, []byte("echo.bench.test")) {
		t.Fatal("no SNI in the ClientHello")
	}
}

func TestFlightIsTLSRecords(t *testing.T) {
	f := Flight()
	if len(f) != FlightSize {
		t.Fatalf("%d bytes", len(f))
	}
	types := []byte{}
	for at := 0; at < len(f); {
		types = append(types, f[at])
		at += 5 + int(binary.BigEndian.Uint16(f[at+3:]))
		if at > len(f) {
			t.Fatalf("record runs past the flight")
		}
	}
	if !bytes.Equal(types, []byte{0x16, 0x14, 0x17}) {
		t.Fatalf("record types %x", types)
	}
}

func TestBulkRequestRoundTrip(t *testing.T) {
	if got := ParseBulkRequest(BulkRequest(1 << 33)); got != 1<<33 {
		t.Fatal(got)
	}
}
