// Package engine is the one table of the database engines a DatabaseExposure names: each
// engine's native port, the shared listener its exposures attach to, how its clients start
// TLS (which is how snigate's certificate probe must connect, and whether SNI can route it
// at all), and the client command that reaches it through the gateway.
//
//	e, ok := engine.Lookup(v1alpha1.EnginePostgres)
//	e.Port            // 5432
//	e.Listener()      // "tls-postgres"
//	e.Start           // engine.PostgresSSLRequest
//	e.Connect("orders.pg.acme.example.com", 5432, "orders.tenant-ca.crt")
//
// docs/engines.md explains each entry; the probe (package probe) and the render stage read
// it, and nothing else decides these.
package engine

import (
	"fmt"

	"github.com/snigate/snigate/api/v1alpha1"
)

// Start is how an engine's clients begin TLS.
type Start int

const (
	// DirectTLS: the client's first bytes are a TLS ClientHello (Redis, MongoDB, NATS with
	// TLS-first, Kafka, ClickHouse, RabbitMQ, OpenSearch).
	DirectTLS Start = iota
	// PostgresSSLRequest: the client sends PostgreSQL's 8-byte SSLRequest, the server
	// answers 'S', then the ClientHello follows (or a ClientHello at once, with
	// sslnegotiation=direct; snigate answers both and negotiates classically to the server).
	PostgresSSLRequest
	// ServerFirst: the server greets first and TLS is upgraded inside its protocol (MySQL,
	// MariaDB): no ClientHello arrives before the server speaks, so SNI cannot route it.
	ServerFirst
)

func (s Start) String() string {
	switch s {
	case DirectTLS:
		return "direct TLS"
	case PostgresSSLRequest:
		return "PostgreSQL SSLRequest"
	case ServerFirst:
		return "server speaks first"
	}
	return fmt.Sprintf("Start(%d)", int(s))
}

// Engine is one row of the table.
type Engine struct {
	Name v1alpha1.Engine
	// Port is the native port (0 for custom: the exposure must name one).
	Port int32
	// Start is how clients begin TLS.
	Start Start
	// connect formats the client command: host, port, CA file.
	connect func(host string, port int32, ca string) string
}

// SNIRouted reports whether exposures of the engine share one listener routed by SNI.
func (e Engine) SNIRouted() bool { return e.Start != ServerFirst }

// Listener is the shared listener's name, tls-<engine>.
func (e Engine) Listener() string { return "tls-" + string(e.Name) }

// Connect is a client command reaching host:port through the gateway and verifying the
// database's certificate against the CA file ca.
func (e Engine) Connect(host string, port int32, ca string) string { return e.connect(host, port, ca) }

func openssl(host string, port int32, ca string) string {
	return fmt.Sprintf("openssl s_client -connect %s:%d -servername %s -CAfile %s -verify_hostname %s -verify_return_error", host, port, host, ca, host)
}

var table = []Engine{
	{v1alpha1.EnginePostgres, 5432, PostgresSSLRequest, func(h string, p int32, ca string) string {
		return fmt.Sprintf("psql \"host=%s port=%d dbname=postgres sslmode=verify-full sslrootcert=%s\"", h, p, ca)
	}},
	{v1alpha1.EngineRedis, 6379, DirectTLS, redisCLI},
	{v1alpha1.EngineValkey, 6379, DirectTLS, redisCLI},
	{v1alpha1.EngineMongoDB, 27017, DirectTLS, func(h string, p int32, ca string) string {
		return fmt.Sprintf("mongosh \"mongodb://%s:%d/?tls=true&tlsCAFile=%s&directConnection=true\"", h, p, ca)
	}},
	{v1alpha1.EngineNATS, 4222, DirectTLS, func(h string, p int32, ca string) string {
		return fmt.Sprintf("nats --server tls://%s:%d --tlsca %s --tlsfirst server check connection", h, p, ca)
	}},
	{v1alpha1.EngineKafka, 9093, DirectTLS, func(h string, p int32, ca string) string {
		return fmt.Sprintf("kcat -b %s:%d -X security.protocol=ssl -X ssl.ca.location=%s -L", h, p, ca)
	}},
	{v1alpha1.EngineClickHouse, 9440, DirectTLS, func(h string, p int32, ca string) string {
		return fmt.Sprintf("clickhouse-client --host %s --port %d --secure --config-file <(printf '<clickhouse><openSSL><client><caConfig>%s</caConfig></client></openSSL></clickhouse>')", h, p, ca)
	}},
	{v1alpha1.EngineRabbitMQ, 5671, DirectTLS, openssl},
	{v1alpha1.EngineOpenSearch, 9200, DirectTLS, openssl},
	{v1alpha1.EngineMariaDB, 3306, ServerFirst, mariadbCLI},
	{v1alpha1.EngineMySQL, 3306, ServerFirst, mariadbCLI},
	{v1alpha1.EngineCustom, 0, DirectTLS, openssl},
}

func redisCLI(h string, p int32, ca string) string {
	// Redis clients send no SNI unless told: --sni is what routes the connection.
	return fmt.Sprintf("redis-cli -h %s -p %d --tls --sni %s --cacert %s PING", h, p, h, ca)
}

func mariadbCLI(h string, p int32, ca string) string {
	return fmt.Sprintf("mariadb --host %s --port %d --ssl --ssl-ca %s --ssl-verify-server-cert", h, p, ca)
}

// Lookup returns the engine's row.
func Lookup(name v1alpha1.Engine) (Engine, bool) {
	for _, e := range table {
		if e.Name == name {
			return e, true
		}
	}
	return Engine{}, false
}

// All returns every row, in the CRD's enum order.
func All() []Engine { return append([]Engine(nil), table...) }
