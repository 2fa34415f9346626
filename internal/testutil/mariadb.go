package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MariaDBOptions configures StartMariaDB. Every field is optional.
type MariaDBOptions struct {
	// Name identifies the instance: the value of snigate.instance and the DNS name of the
	// certificate made when Cert is nil. Default "mariadb.test".
	Name string
	CA   *CA   // default: a new CA
	Cert *Cert // default: CA.Issue(Name)
	// Netns runs the server inside that network namespace, listening on its IP: a backend
	// an EndpointSlice can name. The unix socket stays on the shared filesystem, for the
	// setup. Default: the host, on 127.0.0.1.
	Netns *Host
}

// MariaDB is a running private mariadbd on 127.0.0.1:Port with TLS, and
// require_secure_transport=ON so that every TCP client must use it. User/Password log in from
// anywhere; database snigate holds table instance(name) with one row: Name.
type MariaDB struct {
	Name    string
	Port    int
	Addr    string // 127.0.0.1:Port, or the Netns IP and Port
	Dir     string
	DataDir string
	Socket  string
	// CertFile is the server's certificate file (--ssl-cert).
	CertFile string
	User     string
	Password string
	Database string
	CA       *CA
	Cert     *Cert
	LogPath  string
	// Client is the path of the mariadb command-line client.
	Client string

	proc *process
}

// Fixed credentials of every MariaDB test instance.
const (
	MariaDBUser     = "snigate"
	MariaDBPassword = "snigate-test-password"
	MariaDBDatabase = "snigate"
)

// StartMariaDB starts a private MariaDB and returns when it accepts connections. It is
// stopped in t.Cleanup.
func StartMariaDB(t testing.TB, o MariaDBOptions) *MariaDB {
	t.Helper()
	installDB := Binary(t, "mariadb-install-db", "/usr/bin")
	serverBin := Binary(t, "mariadbd", "/usr/sbin")
	client := Binary(t, "mariadb", "/usr/bin")
	if o.Name == "" {
		o.Name = "mariadb.test"
	}
	if o.CA == nil {
		o.CA = NewCA(t)
	}
	if o.Cert == nil {
		o.Cert = o.CA.Issue(t, o.Name)
	}
	dir := serverDir(t, "mariadb", nil)
	m := &MariaDB{
		Name: o.Name, Dir: dir, DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "mariadb.sock"),
		User: MariaDBUser, Password: MariaDBPassword, Database: MariaDBDatabase,
		CA: o.CA, Cert: o.Cert, LogPath: filepath.Join(dir, "mariadb.log"), Client: client,
	}
	// mariadbd refuses to run as root unless told to with --user=root; as another user it
	// ignores --user, so naming the current user works everywhere.
	osUser := currentUserName()
	// Temporary tables go to the server's own folder, not the shared /tmp, where other
	// servers' files live too (test packages run in parallel): a bootstrap failed in CI with
	// "Could not remove temporary table: '/tmp/#sql-temptable-…'", then "Unknown table".
	tmpDir := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		t.Fatal(err)
	}
	err := runQuiet(command(nil, dir, installDB, "--no-defaults", "--datadir="+m.DataDir, "--user="+osUser,
		"--tmpdir="+tmpDir, "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"))
	if err != nil {
		t.Fatalf("mariadb-install-db: %v", err)
	}
	certPath, keyPath, err := o.Cert.writeFilesFor(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.CertFile = certPath
	caPath := o.CA.WriteFile(t, dir)

	m.Port = withPortRetry(t, func(port int) error {
		m.Port = port
		bind := bindIP(o.Netns)
		m.Addr = net.JoinHostPort(bind, strconv.Itoa(port))
		args := []string{"--no-defaults",
			"--user=" + osUser,
			"--datadir=" + m.DataDir,
			"--tmpdir=" + tmpDir,
			"--socket=" + m.Socket,
			"--pid-file=" + filepath.Join(dir, "mariadb.pid"),
			"--bind-address=" + bind,
			fmt.Sprintf("--port=%d", port),
			"--ssl-cert=" + certPath,
			"--ssl-key=" + keyPath,
			"--ssl-ca=" + caPath,
			"--require-secure-transport=ON",
			"--skip-name-resolve",
			"--innodb-buffer-pool-size=16M",
			"--performance-schema=OFF",
			"--log-error=" + m.LogPath,
		}
		cmd := command(nil, dir, serverBin, args...)
		if o.Netns != nil {
			cmd = o.Netns.Command(serverBin, args...)
			cmd.Dir = dir
		}
		proc, err := startProcess(cmd, "mariadbd "+o.Name, m.LogPath, syscall.SIGTERM)
		if err != nil {
			return err
		}
		m.proc = proc
		err = proc.waitReady(m.ping, func(log string) bool {
			return strings.Contains(log, "Address already in use") || strings.Contains(log, "Do you already have another server running")
		})
		if err != nil {
			proc.stop()
		}
		return err
	})
	t.Cleanup(func() {
		m.proc.stop()
		if t.Failed() {
			t.Logf("mariadb %s log (%s):\n%s", m.Name, m.LogPath, m.proc.logTail())
		}
	})

	name := strings.ReplaceAll(m.Name, "'", "''")
	sql := fmt.Sprintf(`CREATE USER '%[1]s'@'%%' IDENTIFIED BY '%[2]s';
CREATE DATABASE %[3]s;
GRANT ALL ON %[3]s.* TO '%[1]s'@'%%';
CREATE TABLE %[3]s.instance (name VARCHAR(255) NOT NULL);
INSERT INTO %[3]s.instance VALUES ('%[4]s');`, MariaDBUser, MariaDBPassword, MariaDBDatabase, name)
	if out, err := m.rootSQL(sql); err != nil {
		t.Fatalf("mariadb %s setup: %v\n%s", m.Name, err, out)
	}
	return m
}

// rootSQL runs statements as root over the unix socket.
func (m *MariaDB) rootSQL(sql string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.Client, "--no-defaults", "--protocol=socket", "--socket="+m.Socket, "--user=root", "--batch", "--skip-column-names", "-e", sql)
	cmd.Env = CleanEnv()
	return cmd.CombinedOutput()
}

func (m *MariaDB) ping() error {
	out, err := m.rootSQL("SELECT 1")
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ClientArgs returns arguments for the mariadb client that log in as User to Database at
// host:port (the instance or a TCP listener in front of it) over TLS, verifying the
// certificate against the CA. --ssl-verify-server-cert checks the certificate's name against
// host, so pass an address the certificate names or add "--skip-ssl-verify-server-cert"
// after these.
func (m *MariaDB) ClientArgs(host string, port int) []string {
	return []string{
		"--no-defaults", "--protocol=tcp",
		"--host=" + host, fmt.Sprintf("--port=%d", port),
		"--user=" + m.User, "--password=" + m.Password, m.Database,
		"--ssl", "--ssl-ca=" + m.CA.File,
		"--connect-timeout=10", "--batch", "--skip-column-names",
	}
}

func currentUserName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "root"
}
