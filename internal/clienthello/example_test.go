package clienthello_test

import (
	"fmt"
	"os"

	"github.com/snigate/snigate/internal/clienthello"
)

func ExampleParser_Parse() {
	data, err := os.ReadFile("testdata/go-alpn-postgresql.bin") // a crypto/tls ClientHello
	if err != nil {
		panic(err)
	}
	var p clienthello.Parser
	var h clienthello.Hello
	// The bytes arrive in pieces; Parse says when it has seen the whole ClientHello.
	var buf []byte
	for len(data) > 0 {
		n := min(len(data), 1000)
		buf, data = append(buf, data[:n]...), data[n:]
		err = p.Parse(buf, &h)
		if err != clienthello.ErrIncomplete {
			break
		}
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("sni=%s postgresql=%v tls1.3=%v len=%d\n",
		h.SNI, h.HasALPN("postgresql"), h.SupportsVersion(0x0304), h.Len)

	err = p.Parse([]byte{0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f}, &h) // a PostgreSQL SSLRequest
	fmt.Println(err)
	// Output:
	// sni=pg.example.com postgresql=true tls1.3=true len=1523
	// clienthello: not a tls handshake record: first record is not a handshake record
}
