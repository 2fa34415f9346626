// Package pgsrv starts a private PostgreSQL for the benchmark: ssl=on with the harness'
// certificate, listening on 127.0.0.1 only, its data in a temporary folder, run as the
// postgres system user (the server refuses root). Its configuration files are the tests'
// (internal/testutil/fixture), sized for pgbench; the harness is a program and not a test, so
// it runs the server itself rather than through internal/testutil.
package pgsrv

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/snigate/snigate/bench/internal/proc"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// Server is a running instance.
type Server struct {
	Port   int
	Dir    string
	BinDir string
	Proc   *proc.Proc
	cred   *syscall.Credential
}

// Database is the database pgbench uses; User connects over TCP (trusted, TLS required).
const (
	Database = "bench"
	User     = "postgres"
)

// BinDir finds the newest PostgreSQL server binaries, /usr/lib/postgresql/N/bin.
func BinDir() (string, error) { return fixture.PostgresBinDir() }

// Start initializes and starts an instance on port in dir (created; must not exist yet),
// pinned to cpus, with cert as its TLS certificate.
func Start(dir string, port int, cert *fixture.Cert, cpus string) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres system user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	s := &Server{Port: port, Dir: dir, BinDir: bin, cred: cred}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	certFile, keyFile, err := cert.WriteFiles(dir, "server", 0o600)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{dir, certFile, keyFile} {
		if err := os.Chown(p, uid, gid); err != nil {
			return nil, err
		}
	}
	if err := s.run(filepath.Join(bin, "initdb"), "-D", data, "-U", User, "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %w", err)
	}
	hba := fixture.PostgresHBA("trust")
	conf := fixture.PostgresConfig{
		Port: port, SocketDir: dir, CertFile: certFile, KeyFile: keyFile,
		MaxConnections: 50, SharedBuffers: "64MB",
	}.Conf()
	for name, body := range map[string]string{"pg_hba.conf": hba, "postgresql.auto.conf": conf} {
		p := filepath.Join(data, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			return nil, err
		}
		os.Chown(p, uid, gid)
	}
	s.Proc, err = proc.Start("postgres", []string{filepath.Join(bin, "postgres"), "-D", data}, proc.Options{
		CPUs: cpus, Dir: dir, Log: filepath.Join(dir, "postgres.log"), Cred: cred,
	})
	if err != nil {
		return nil, err
	}
	s.Proc.StopSignal = syscall.SIGINT // fast shutdown
	s.Proc.StopWait = 5 * time.Second
	err = s.Proc.WaitFor(30*time.Second, func() error {
		return exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", dir, "-p", strconv.Itoa(port)).Run()
	})
	if err != nil {
		s.Proc.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) run(argv ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// Init creates the benchmark database and pgbench's tables at scale.
func (s *Server) Init(scale int) error {
	if err := s.run(filepath.Join(s.BinDir, "createdb"), "-h", s.Dir, "-p", strconv.Itoa(s.Port), "-U", User, Database); err != nil {
		return fmt.Errorf("createdb: %w", err)
	}
	pgbench, err := Pgbench()
	if err != nil {
		return err
	}
	return s.run(pgbench, "-i", "-q", "-s", strconv.Itoa(scale), "-h", s.Dir, "-p", strconv.Itoa(s.Port), "-U", User, Database)
}

// Pgbench finds the pgbench binary (package postgresql-contrib).
func Pgbench() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	bin, err := BinDir()
	if err == nil {
		p := filepath.Join(bin, "pgbench")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("pgbench not found (package postgresql-contrib)")
}

// ConnString is a libpq connection string for pgbench that reaches the database through
// addr:port with host=sni, so that libpq sends sni as SNI, over TLS (sslmode=require).
func ConnString(sni, hostaddr string, port int) string {
	return fmt.Sprintf("host=%s hostaddr=%s port=%d user=%s dbname=%s sslmode=require connect_timeout=10", sni, hostaddr, port, User, Database)
}

// Stop stops the server and removes its folder.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	s.Proc.Stop()
	os.RemoveAll(s.Dir)
}
