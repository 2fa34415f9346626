package testutil

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestMariaDB(t *testing.T) {
	t.Parallel()
	m := StartMariaDB(t, MariaDBOptions{Name: "maria.db.test"})

	t.Run("mariadb client over TLS", func(t *testing.T) {
		// The certificate names maria.db.test, not 127.0.0.1; the client resolves no test
		// names, so the name check is off here and the serial check below proves the server.
		args := append(m.ClientArgs("127.0.0.1", m.Port), "--skip-ssl-verify-server-cert",
			"-e", "SELECT name FROM instance; SHOW SESSION STATUS LIKE 'Ssl_version'")
		out, errOut, err := run(t, 20*time.Second, nil, m.Client, args...)
		if err != nil {
			t.Fatalf("mariadb: %v %s", err, errOut)
		}
		lines := strings.Split(out, "\n")
		if len(lines) != 2 || lines[0] != m.Name || !strings.HasPrefix(lines[1], "Ssl_version\tTLSv1.") {
			t.Fatalf("output %q", out)
		}
	})
	t.Run("mariadb client refused without TLS", func(t *testing.T) {
		args := append(m.ClientArgs("127.0.0.1", m.Port), "--skip-ssl", "-e", "SELECT 1")
		_, errOut, err := run(t, 20*time.Second, nil, m.Client, args...)
		// MariaDB 10.11 answers an insecure TCP login under require_secure_transport=ON with
		// a plain "Access denied" (1045), not with a message that names TLS.
		if err == nil || !strings.Contains(errOut, "ERROR 1045") {
			t.Fatalf("plaintext: %v %s", err, errOut)
		}
	})
	t.Run("served certificate", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		cert, err := PeerCertMySQL(ctx, m.Addr, m.Name)
		checkSerial(t, "PeerCertMySQL", cert, err, m.Cert)
		if got := opensslSerial(t, m.Addr, m.Name, "-starttls", "mysql"); got != m.Cert.SerialHex() {
			t.Fatalf("openssl -starttls mysql: serial %s, want %s", got, m.Cert.SerialHex())
		}
	})
}
