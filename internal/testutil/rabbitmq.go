package testutil

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RabbitMQOptions configures StartRabbitMQ. Every field is optional.
type RabbitMQOptions struct {
	// Name is the DNS name of the certificate made when Cert is nil. Default
	// "rabbitmq.test".
	Name string
	CA   *CA   // default: a new CA
	Cert *Cert // default: CA.Issue(Name)
}

// RabbitMQ is a running private RabbitMQ node (Debian's rabbitmq-server, Erlang) that
// listens for AMQPS only, on 127.0.0.1:Port, as guest/guest (allowed from loopback, where
// snigate dials from). It has its own node name, HOME (Erlang cookie), data and log folders
// in Dir, its own Erlang distribution port and its own epmd on a private port: the
// package's defaults (epmd on 4369, node rabbit@host) would meet any other node on the
// machine, and an epmd that Erlang starts by itself outlives the test (docs/engines.md).
type RabbitMQ struct {
	*engineServer
	epmd *process
}

// rabbitStartTimeout bounds the node's start: about 8 s alone on two cores, several times
// that with the rest of the suite running.
const rabbitStartTimeout = 3 * time.Minute

// StartRabbitMQ starts a private epmd and RabbitMQ node and returns when the AMQPS listener
// answers the AMQP 0-9-1 protocol header with the connection's first method frame. It is
// stopped in t.Cleanup.
func StartRabbitMQ(t testing.TB, o RabbitMQOptions) *RabbitMQ {
	t.Helper()
	server := Binary(t, "rabbitmq-server", "/usr/lib/rabbitmq/bin")
	epmd := Binary(t, "epmd", "/usr/bin")
	if o.Name == "" {
		o.Name = "rabbitmq.test"
	}
	r := &RabbitMQ{engineServer: newEngineServer(t, "rabbitmq", o.Name, o.CA, o.Cert)}
	certPath, keyPath, caPath := serverFiles(t, r.Dir, r.CA, r.Cert)
	r.CertFile = certPath
	if err := writeFile(filepath.Join(r.Dir, "enabled_plugins"), []byte("[].\n"), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	r.cleanup(t, "rabbitmq-server")
	t.Cleanup(func() { // after the node (cleanups run last first)
		if r.epmd != nil {
			r.epmd.stop()
		}
	})

	epmdPort := withPortRetry(t, func(port int) error {
		cmd := command(nil, r.Dir, epmd, "-port", strconv.Itoa(port))
		cmd.Env = append(cmd.Env, "ERL_EPMD_ADDRESS=127.0.0.1")
		proc, err := startProcess(cmd, "epmd", filepath.Join(r.Dir, "epmd.log"), syscall.SIGTERM)
		if err != nil {
			return err
		}
		r.epmd = proc
		// epmd says nothing when it is up; a connection to its port is the sign. It exits at
		// once when the port is taken.
		err = proc.waitReady(func() error { return dialOnce(loopback(port)) }, func(string) bool { return true })
		if err != nil {
			proc.stop()
		}
		return err
	})

	withPortRetry(t, func(port int) error {
		r.Port, r.Addr = port, loopback(port)
		distPort := FreePort(t)
		conf := fmt.Sprintf(`listeners.tcp = none
listeners.ssl.default = %s
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
`, r.Addr, caPath, certPath, keyPath)
		confPath := filepath.Join(r.Dir, "rabbitmq.conf")
		if err := writeFile(confPath, []byte(conf), 0o644, nil); err != nil {
			return err
		}
		cmd := command(nil, r.Dir, server)
		cmd.Env = append(cmd.Env,
			"HOME="+r.Dir,
			"RABBITMQ_NODENAME=snigate-"+strconv.Itoa(port)+"@localhost",
			"RABBITMQ_CONFIG_FILE="+confPath,
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(r.Dir, "enabled_plugins"),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(r.Dir, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(r.Dir, "log"),
			"RABBITMQ_LOGS=-",
			"RABBITMQ_PID_FILE="+filepath.Join(r.Dir, "rabbitmq.pid"),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
			// The distribution listener on loopback only (it binds every address otherwise).
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
			"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
			"ERL_EPMD_ADDRESS=127.0.0.1",
			// The script then execs the Erlang VM instead of keeping a shell in front of it,
			// so the VM is the process that gets SIGTERM (a clean stop) and dies with the
			// test.
			"RUNNING_UNDER_SYSTEMD=true",
		)
		proc, err := startProcess(cmd, "rabbitmq-server "+o.Name, r.LogPath, syscall.SIGTERM)
		if err != nil {
			return err
		}
		r.proc = proc
		err = proc.waitReadyWithin(rabbitStartTimeout, tlsReady(r.Addr, o.Name, amqpStarts), addrInUse)
		if err != nil {
			proc.stop()
		}
		return err
	})
	return r
}

// amqpStarts sends the AMQP 0-9-1 protocol header and expects a method frame (type 1) on
// channel 0: Connection.Start. The node opens its listeners only at the end of its boot,
// but this is the proof that it speaks AMQP there.
func amqpStarts(c *tls.Conn) error {
	if _, err := c.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return err
	}
	var hdr [3]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fmt.Errorf("after the protocol header: %w", err)
	}
	if !bytes.Equal(hdr[:], []byte{1, 0, 0}) {
		return fmt.Errorf("answer starts %x, want a method frame on channel 0", hdr)
	}
	return nil
}

// dialOnce connects to addr and closes.
func dialOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
