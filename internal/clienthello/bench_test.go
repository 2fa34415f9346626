package clienthello

import (
	"os"
	"testing"
)

// BenchmarkParse parses committed captures: a Go 1.26 crypto/tls ClientHello (1.5 KB, with
// the X25519MLKEM768 key share), OpenSSL 3.0 ones, and split-over-records variants.
func BenchmarkParse(b *testing.B) {
	for _, name := range []string{
		"go-tls13",
		"go-alpn-postgresql",
		"openssl-sni",
		"openssl-alpn-postgresql",
		"go-tls13-split100",
		"openssl-max-frag-512",
	} {
		buf, err := os.ReadFile("testdata/" + name + ".bin")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var p Parser
			var h Hello
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := p.Parse(buf, &h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// What a proxy pays on every short read of a ClientHello that spans TCP segments.
	buf, _ := os.ReadFile("testdata/go-tls13.bin")
	b.Run("go-tls13-incomplete", func(b *testing.B) {
		var p Parser
		var h Hello
		b.ReportAllocs()
		for b.Loop() {
			if p.Parse(buf[:1400], &h) != ErrIncomplete {
				b.Fatal("want ErrIncomplete")
			}
		}
	})

	// The worst framing a proxy can be sent: a ClientHello announcing 64 KiB, in 1-byte
	// records that arrive one per read. One op is a whole connection: 10922 calls with a
	// growing buffer, until the 64 KiB cap. The Parser resumes after the records it walked
	// on the previous call instead of re-walking them all.
	msg := append([]byte{1, 0, 0xff, 0xf0}, make([]byte, 0xfff0)...)
	worst := frame(msg, 1, every(1))[:64<<10]
	b.Run("1-byte-records-64KiB-connection", func(b *testing.B) {
		var p Parser
		var h Hello
		b.ReportAllocs()
		for b.Loop() {
			for k := 6; k <= len(worst); k += 6 {
				if p.Parse(worst[:k], &h) != ErrIncomplete {
					b.Fatal("want ErrIncomplete")
				}
			}
			p.Parse(nil, &h) // the next connection
		}
	})
}

// BenchmarkStdlibSniff is the peer: the trick of running crypto/tls's server until its
// GetConfigForClient callback (over a net.Pipe here), on the same Go ClientHello.
func BenchmarkStdlibSniff(b *testing.B) {
	buf, err := os.ReadFile("testdata/go-tls13.bin")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if sni, _, _, err := stdlibView(buf); err != nil || sni != "db.example.com" {
			b.Fatal(sni, err)
		}
	}
}
