package testutil

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ClickHouseOptions configures StartClickHouse. Every field is optional.
type ClickHouseOptions struct {
	// Name is the DNS name of the certificate made when Cert is nil. Default
	// "clickhouse.test".
	Name string
	CA   *CA   // default: a new CA
	Cert *Cert // default: CA.Issue(Name)
}

// ClickHouse is a running private clickhouse-server (Debian's 18.16) whose only listener is
// HTTPS on 127.0.0.1:Port, with its data, configuration and users in Dir. User "default"
// has no password and may log in from loopback only.
type ClickHouse struct{ *engineServer }

// clickhouseUsers is users.xml: the default user from loopback, no password, no quota.
const clickhouseUsers = `<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>1000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
`

// StartClickHouse starts a private ClickHouse and returns when GET /ping answers "Ok." over
// HTTPS. It is stopped in t.Cleanup.
func StartClickHouse(t testing.TB, o ClickHouseOptions) *ClickHouse {
	t.Helper()
	bin := Binary(t, "clickhouse-server", "/usr/sbin", "/usr/bin")
	if o.Name == "" {
		o.Name = "clickhouse.test"
	}
	c := &ClickHouse{newEngineServer(t, "clickhouse", o.Name, o.CA, o.Cert)}
	certPath, keyPath, _ := serverFiles(t, c.Dir, c.CA, c.Cert)
	c.CertFile = certPath
	users := filepath.Join(c.Dir, "users.xml")
	if err := os.WriteFile(users, []byte(clickhouseUsers), 0o644); err != nil {
		t.Fatal(err)
	}
	c.cleanup(t, "clickhouse-server")
	withPortRetry(t, func(port int) error {
		c.Port, c.Addr = port, loopback(port)
		// Only https_port: without http_port, tcp_port and interserver_http_port the server
		// opens nothing else, so instances cannot collide on Debian's fixed defaults.
		conf := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
  <logger><level>information</level><console>1</console></logger>
  <listen_host>127.0.0.1</listen_host>
  <https_port>%d</https_port>
  <path>%[2]s/data/</path>
  <tmp_path>%[2]s/tmp/</tmp_path>
  <user_files_path>%[2]s/user_files/</user_files_path>
  <format_schema_path>%[2]s/format_schemas/</format_schema_path>
  <users_config>%[3]s</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <openSSL><server>
    <certificateFile>%[4]s</certificateFile>
    <privateKeyFile>%[5]s</privateKeyFile>
    <verificationMode>none</verificationMode>
    <loadDefaultCAFile>false</loadDefaultCAFile>
    <cacheSessions>true</cacheSessions>
    <disableProtocols>sslv2,sslv3</disableProtocols>
    <preferServerCiphers>true</preferServerCiphers>
  </server></openSSL>
</yandex>
`, port, c.Dir, users, certPath, keyPath)
		confPath := filepath.Join(c.Dir, "config.xml")
		if err := writeFile(confPath, []byte(conf), 0o644, nil); err != nil {
			return err
		}
		proc, err := startProcess(command(nil, c.Dir, bin, "--config-file="+confPath), "clickhouse-server "+o.Name, c.LogPath, syscall.SIGTERM)
		if err != nil {
			return err
		}
		c.proc = proc
		// ClickHouse logs a taken port as "Address already in use" and exits.
		if err = proc.waitReady(c.ping, addrInUse); err != nil {
			proc.stop()
		}
		return err
	})
	return c
}

// ping is GET /ping straight to the server, verifying its certificate for Name.
func (c *ClickHouse) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: c.CA.ClientConfig(c.Name)}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+c.Addr+"/ping", nil)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "Ok." {
		return fmt.Errorf("GET /ping: %d %q", resp.StatusCode, b)
	}
	return nil
}
