package testutil

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/snigate/snigate/internal/testutil/fixture"
)

// PGOptions configures StartPostgres. Every field is optional.
type PGOptions struct {
	// Name identifies the instance: the value of its instance table and the DNS name of the
	// certificate made when Cert is nil. Default "pg.test".
	Name string
	// CA issued Cert (or issues one for Name). Default: a new CA.
	CA *CA
	// Cert is the server certificate. Default: CA.Issue(Name).
	Cert *Cert
	// Settings are extra postgresql.conf lines, e.g. "log_min_messages = debug1".
	Settings []string
	// Netns runs the server inside that network namespace, listening on its IP (and no
	// loopback) and accepting TLS from its /30, where the host's connections come from:
	// a backend an EndpointSlice can name. The unix socket stays on the shared filesystem,
	// so Admin and the readiness check work as without. Default: the host, on 127.0.0.1.
	Netns *Host
	// AcceptPlaintext makes the server accept plaintext TCP logins too (pg_hba "host", not
	// only "hostssl"): for the tests that show the gateway still carries only TLS to it.
	AcceptPlaintext bool
}

// Postgres is a running private PostgreSQL instance.
//
// It listens on 127.0.0.1:Port (or PGOptions.Netns's IP) with ssl=on and accepts TCP connections only over TLS
// (hostssl ... scram-sha-256; plain host connections are rejected), so a test can tell
// whether its client really negotiated TLS. Locally (unix socket in SocketDir) every user
// is trusted, for the test's own setup and checks (Admin).
//
// Database snigate holds table instance(name text) with one row: Name.
type Postgres struct {
	Name      string
	Port      int
	Addr      string // 127.0.0.1:Port, or the Netns IP and Port
	Version   int    // server major version, e.g. 15
	BinDir    string
	Dir       string // everything of this instance, removed in cleanup
	DataDir   string
	SocketDir string
	User      string // login role for TCP connections (scram-sha-256)
	Password  string
	Database  string
	CA        *CA
	Cert      *Cert
	// CertFile is the server's certificate file (ssl_cert_file).
	CertFile string
	LogPath  string

	proc    *process
	dir     string // where the certificate files are
	owner   *runAs
	keyFile string
}

// Fixed credentials of every test instance: nothing secret lives in a test server.
const (
	PGUser     = "snigate"
	PGPassword = "snigate-test-password"
	PGDatabase = "snigate"
	// pgAdmin is the bootstrap superuser, reachable only over the unix socket.
	pgAdmin = "postgres"
)

// PostgresBinDir returns the folder of the newest PostgreSQL server binaries
// (fixture.PostgresBinDir).
func PostgresBinDir() (string, error) { return fixture.PostgresBinDir() }

// StartPostgres starts a private PostgreSQL and returns when it accepts connections. It is
// stopped in t.Cleanup.
func StartPostgres(t testing.TB, o PGOptions) *Postgres {
	t.Helper()
	binDir, err := PostgresBinDir()
	Require(t, "PostgreSQL server", err)
	for _, b := range []string{"initdb", "postgres"} {
		_, err := os.Stat(filepath.Join(binDir, b))
		Require(t, "PostgreSQL "+b, err)
	}
	owner, err := serverUser("postgres")
	Require(t, "postgres system user", err)

	if o.Name == "" {
		o.Name = "pg.test"
	}
	if o.CA == nil {
		o.CA = NewCA(t)
	}
	if o.Cert == nil {
		o.Cert = o.CA.Issue(t, o.Name)
	}
	dir := serverDir(t, "pg", owner)
	p := &Postgres{
		Name: o.Name, BinDir: binDir, Dir: dir,
		DataDir: filepath.Join(dir, "data"), SocketDir: dir, LogPath: filepath.Join(dir, "postgres.log"),
		User: PGUser, Password: PGPassword, Database: PGDatabase,
		CA: o.CA, Cert: o.Cert,
	}
	if err := p.initdb(owner); err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, err := o.Cert.writeFilesFor(dir, owner)
	if err != nil {
		t.Fatal(err)
	}
	p.CertFile, p.keyFile, p.dir, p.owner = certPath, keyPath, dir, owner
	hba := fixture.PostgresHBA("scram-sha-256")
	if o.AcceptPlaintext {
		hba = strings.ReplaceAll(hba, "   reject\n", "   scram-sha-256\n")
	}
	listen := "127.0.0.1"
	if o.Netns != nil {
		listen = o.Netns.IP.String()
		hba += "hostssl all all " + o.Netns.Prefix.String() + " scram-sha-256\n" +
			"host    all all " + o.Netns.Prefix.String() + " reject\n"
	}
	if err := writeFile(filepath.Join(p.DataDir, "pg_hba.conf"), []byte(hba), 0o600, owner); err != nil {
		t.Fatal(err)
	}

	p.Port = withPortRetry(t, func(port int) error {
		p.Port = port
		conf := fixture.PostgresConfig{
			Port: port, SocketDir: p.SocketDir, CertFile: certPath, KeyFile: keyPath,
			MaxConnections: 40, SharedBuffers: "16MB",
			Settings: append([]string{
				"password_encryption = 'scram-sha-256'",
				"log_connections = on",
				"log_line_prefix = '%m [%p] %q%u@%d '",
				"listen_addresses = '" + listen + "'",
			}, o.Settings...),
		}
		// postgresql.auto.conf is read last and wins over postgresql.conf.
		if err := writeFile(filepath.Join(p.DataDir, "postgresql.auto.conf"), []byte(conf.Conf()), 0o600, owner); err != nil {
			return err
		}
		cmd := command(owner, dir, filepath.Join(binDir, "postgres"), "-D", p.DataDir)
		if o.Netns != nil {
			cmd = pgInNetns(o.Netns, owner, dir, filepath.Join(binDir, "postgres"), "-D", p.DataDir)
		}
		proc, err := startProcess(cmd, "postgres "+o.Name, p.LogPath, syscall.SIGINT) // SIGINT: fast shutdown
		if err != nil {
			return err
		}
		p.proc = proc
		err = proc.waitReady(p.ping, func(log string) bool {
			return strings.Contains(log, "Address already in use") || strings.Contains(log, "could not create any TCP/IP sockets")
		})
		if err != nil {
			proc.stop()
		}
		return err
	})
	t.Cleanup(func() {
		p.proc.stop()
		if t.Failed() {
			t.Logf("postgres %s log (%s):\n%s", p.Name, p.LogPath, p.proc.logTail())
		}
	})
	p.Addr = net.JoinHostPort(listen, strconv.Itoa(p.Port))
	if err := p.setup(); err != nil {
		t.Fatal(err)
	}
	return p
}

// pgInNetns is command's in the namespace: entering it takes root, so ip netns exec runs
// as root and setpriv drops to owner before the server starts (both exec, so the process is
// the server itself and stop signals it directly).
func pgInNetns(h *Host, owner *runAs, dir, name string, args ...string) *exec.Cmd {
	argv := []string{name}
	if owner != nil {
		argv = []string{"setpriv", "--reuid=" + strconv.Itoa(int(owner.uid)), "--regid=" + strconv.Itoa(int(owner.gid)), "--clear-groups", name}
	}
	cmd := h.Command(argv[0], append(argv[1:], args...)...)
	cmd.Dir = dir
	if owner != nil {
		cmd.Env = append(cmd.Env, "HOME="+dir, "USER="+owner.name, "LOGNAME="+owner.name)
	}
	return cmd
}

// initdb gives the instance a fresh data folder: a copy of a template that initdb made once.
// initdb costs 2-3 s of CPU (10-20 s on a busy machine) and its output is the same for every
// instance, while a copy takes a fraction of a second.
func (p *Postgres) initdb(owner *runAs) error {
	tmpl, err := pgTemplate(p.BinDir, owner)
	if err != nil {
		return err
	}
	if err := runQuiet(exec.Command("cp", "-a", tmpl, p.DataDir)); err != nil {
		return fmt.Errorf("copying the initdb template: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(p.DataDir, "PG_VERSION"))
	if err != nil {
		return err
	}
	p.Version, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	return nil
}

var pgTemplateMu sync.Mutex

// pgTemplate returns a data folder that initdb made with this package's options, for these
// binaries and this owner. It is kept in the system temp dir across test runs, like a build
// cache, and made atomically (initdb into a temporary name, then rename), so parallel test
// binaries share it safely. Bump the version in its name when the initdb options change.
func pgTemplate(binDir string, owner *runAs) (string, error) {
	pgTemplateMu.Lock()
	defer pgTemplateMu.Unlock()
	st, err := os.Stat(filepath.Join(binDir, "initdb"))
	if err != nil {
		return "", err
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d|%d", binDir, st.ModTime().UnixNano(), os.Geteuid())
	if owner != nil {
		fmt.Fprintf(h, "|%d", owner.uid)
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("snigate-pg-template-v1-%x", h.Sum64()))
	if _, err := os.Stat(filepath.Join(path, "PG_VERSION")); err == nil {
		return path, nil
	}

	tmp, err := os.MkdirTemp("", "snigate-pg-initdb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if owner != nil {
		if err := os.Chown(tmp, int(owner.uid), int(owner.gid)); err != nil {
			return "", err
		}
	}
	pwfile := filepath.Join(tmp, "pwfile")
	if err := writeFile(pwfile, []byte(PGPassword+"\n"), 0o600, owner); err != nil {
		return "", err
	}
	data := filepath.Join(tmp, "data")
	cmd := command(owner, tmp, filepath.Join(binDir, "initdb"),
		"-D", data, "-U", pgAdmin, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256",
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	if err := runQuiet(cmd); err != nil {
		return "", fmt.Errorf("initdb: %w", err)
	}
	if err := os.Rename(data, path); err != nil {
		// Another test binary may have made it meanwhile.
		if _, serr := os.Stat(filepath.Join(path, "PG_VERSION")); serr != nil {
			return "", err
		}
	}
	return path, nil
}

// adminConnString is the superuser over the unix socket (trust): setup and checks only.
func (p *Postgres) adminConnString(dbname string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable connect_timeout=5", p.SocketDir, p.Port, pgAdmin, dbname)
}

func (p *Postgres) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.adminConnString("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func (p *Postgres) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.adminConnString("postgres"))
	if err != nil {
		return err
	}
	for _, q := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", PGUser, PGPassword),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", PGDatabase, PGUser),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(ctx)
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	conn.Close(ctx)
	conn, err = pgx.Connect(ctx, p.adminConnString(PGDatabase))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"CREATE TABLE instance (name text NOT NULL)",
		"INSERT INTO instance VALUES ('" + strings.ReplaceAll(p.Name, "'", "''") + "')",
		"ALTER TABLE instance OWNER TO " + PGUser,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// ConnString returns a libpq keyword/value connection string that reaches this instance's
// database as User through hostaddr:port (the instance itself, or a gateway in front of it)
// with host=Name, so that libpq sends Name as SNI and verifies the certificate against it
// with the CA (sslmode=verify-full). extra "key=value" settings are appended; libpq and pgx
// take the last value of a repeated key, so they override (e.g. "sslmode=require").
//
// pgx ignores hostaddr: use PgxConfig for it.
func (p *Postgres) ConnString(hostaddr string, port int, extra ...string) string {
	s := fmt.Sprintf("host=%s hostaddr=%s port=%d user=%s password=%s dbname=%s sslmode=verify-full sslrootcert=%s connect_timeout=10",
		p.Name, hostaddr, port, p.User, p.Password, p.Database, p.CA.File)
	for _, e := range extra {
		s += " " + e
	}
	return s
}

// DirectConnString is ConnString to the instance itself.
func (p *Postgres) DirectConnString(extra ...string) string {
	host, _, _ := net.SplitHostPort(p.Addr)
	return p.ConnString(host, p.Port, extra...)
}

// Rotate makes the server serve c from its next handshake on: the files are rewritten and
// the configuration reloaded (PostgreSQL reloads its TLS files on reload), as a database's
// sidecar does when cert-manager renews its Secret. Established sessions keep theirs.
func (p *Postgres) Rotate(t testing.TB, c *Cert) {
	t.Helper()
	if _, _, err := c.writeFilesFor(p.dir, p.owner); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.adminConnString(p.Database))
	if err != nil {
		t.Fatalf("postgres %s admin connection: %v", p.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "select pg_reload_conf()"); err != nil {
		t.Fatalf("postgres %s reload: %v", p.Name, err)
	}
	p.Cert = c
}

// Admin connects as superuser over the unix socket (closed in t.Cleanup): for checks such
// as pg_stat_activity or pg_stat_ssl that a test makes behind the gateway's back.
func (p *Postgres) Admin(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.adminConnString(p.Database))
	if err != nil {
		t.Fatalf("postgres %s admin connection: %v", p.Name, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// PgxConfig parses a connection string (ConnString's, say) for pgx and makes every host name
// resolve to hostaddr: pgx does not implement libpq's hostaddr, and the name must stay as
// host so that pgx sends it as SNI and verifies the certificate against it. Values in
// connString must not be quoted (ConnString's never are).
//
// A cancelled context makes pgx send a CancelRequest (a new connection, TLS like the
// original), not just close the connection as pgx does by default.
func PgxConfig(t testing.TB, connString, hostaddr string) *pgx.ConnConfig {
	t.Helper()
	// pgx would send hostaddr to the server as a run-time parameter: drop it.
	var kept []string
	for _, f := range strings.Fields(connString) {
		if !strings.HasPrefix(f, "hostaddr=") {
			kept = append(kept, f)
		}
	}
	cfg, err := pgx.ParseConfig(strings.Join(kept, " "))
	if err != nil {
		t.Fatalf("pgx config: %v", err)
	}
	// One LookupFunc serves the main host and every fallback (sslmode=prefer makes one).
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{hostaddr}, nil }
	// pgx's default on a cancelled context only sets a deadline and closes the connection;
	// send a CancelRequest like libpq does, and give the server 5 s to act on it.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
	}
	return cfg
}
