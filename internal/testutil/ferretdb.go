package testutil

import (
	"syscall"
	"testing"
)

// FerretDBOptions configures StartFerretDB. Every field is optional.
type FerretDBOptions struct {
	// Name is the DNS name of the certificate made when Cert is nil. Default "mongodb.test".
	Name string
	CA   *CA   // default: a new CA
	Cert *Cert // default: CA.Issue(Name)
}

// FerretDB is a running private FerretDB v1 (the MongoDB wire protocol; built by
// scripts/install-engines.sh) on its SQLite backend in Dir, listening with TLS only on
// 127.0.0.1:Port. It is a single server: its hello has no setName, so clients connect with
// directConnection=true or a single seed (docs/engines.md).
type FerretDB struct{ *engineServer }

// StartFerretDB starts a private FerretDB and returns when its TLS listener completes a
// handshake. It is stopped in t.Cleanup.
func StartFerretDB(t testing.TB, o FerretDBOptions) *FerretDB {
	t.Helper()
	bin := engineBinary(t, "ferretdb")
	if o.Name == "" {
		o.Name = "mongodb.test"
	}
	f := &FerretDB{newEngineServer(t, "ferretdb", o.Name, o.CA, o.Cert)}
	certPath, keyPath, _ := serverFiles(t, f.Dir, f.CA, f.Cert)
	f.CertFile = certPath
	f.cleanup(t, "ferretdb")
	withPortRetry(t, func(port int) error {
		f.Port, f.Addr = port, loopback(port)
		// No plaintext listener (--listen-addr=), no debug HTTP listener (its default, a
		// fixed 127.0.0.1:8088, would collide between instances), no telemetry calls out.
		cmd := command(nil, f.Dir, bin,
			"--handler=sqlite", "--sqlite-url=file:"+f.Dir+"/", "--state-dir="+f.Dir,
			"--listen-addr=", "--listen-tls="+f.Addr, "--listen-tls-cert-file="+certPath, "--listen-tls-key-file="+keyPath,
			"--debug-addr=", "--telemetry=disable", "--log-level=warn")
		proc, err := startProcess(cmd, "ferretdb "+o.Name, f.LogPath, syscall.SIGTERM)
		if err != nil {
			return err
		}
		f.proc = proc
		if err = proc.waitReady(tlsReady(f.Addr, o.Name, nil), addrInUse); err != nil {
			proc.stop()
		}
		return err
	})
	return f
}
