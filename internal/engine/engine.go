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
	"strings"

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

// Label marks a route rendered for a DatabaseExposure with its engine, so that the data
// plane can name the engine's fix when its clients wait for the server to speak first
// (translate: snapshot.Port.SpeaksFirstHint).
const Label = "snigate.dev/engine"

// Engine is one row of the table.
type Engine struct {
	Name v1alpha1.Engine
	// Port is the native port (0 for custom: the exposure must name one).
	Port int32
	// Start is how clients begin TLS.
	Start Start
	// Advertise says what each node of a cluster must advertise so that its clients, which
	// learn the nodes from the first one they reach and reconnect to each by name, reach it
	// through the gateway by its member hostname (DatabaseExposure spec.members); "" for
	// an engine whose clients do not discover nodes (members are then names of their own
	// for clients that pick a node, and nothing more).
	Advertise string
	// SpeaksFirstFix is what to change when the engine's server is found speaking first
	// where a ClientHello was sent (the probe's message; "" when nothing can be changed).
	SpeaksFirstFix string
	// Protocols are the engine's protocols on other well-known ports (ClickHouse's HTTPS
	// on 8443 next to its native protocol on 9440), each with its own client command. An
	// engine with some speaks an unknown one on any other port.
	Protocols []Protocol
	// connect formats the client command: host, port, CA file.
	connect func(host string, port int32, ca string) string
}

// Protocol is one of an engine's protocols on a port other than the native one.
type Protocol struct {
	Name    string
	Port    int32
	connect func(host string, port int32, ca string) string
}

// Connect is the protocol's client command (as Engine.Connect).
func (p Protocol) Connect(host string, port int32, ca string) string {
	return p.connect(host, port, ca)
}

// Discovers reports whether the engine's clients learn the cluster's nodes from the first
// one and reconnect to each by its advertised name: spec.members is what makes such a
// cluster reachable through the gateway at all.
func (e Engine) Discovers() bool { return e.Advertise != "" }

// SNIRouted reports whether exposures of the engine share one listener routed by SNI.
func (e Engine) SNIRouted() bool { return e.Start != ServerFirst }

// Listener is the shared listener's name, tls-<engine>.
func (e Engine) Listener() string { return "tls-" + string(e.Name) }

// Connect is a client command reaching host:port through the gateway and verifying the
// database's certificate against the CA file ca.
func (e Engine) Connect(host string, port int32, ca string) string { return e.connect(host, port, ca) }

// ConnectFor is the client command for an exposure on listener port port whose backend
// listens on backendPort: the protocol of the first of the two ports that is one of the
// engine's well-known ports, so that an exposure of ClickHouse's HTTPS port is given curl,
// not the native client. An engine of one protocol speaks it on any port; one of several
// (Protocols) speaks an unknown one on a port that is none of them, and gets openssl
// s_client, which verifies the certificate whatever the protocol.
func (e Engine) ConnectFor(host string, port, backendPort int32, ca string) string {
	return e.protocol(port, backendPort)(host, port, ca)
}

func (e Engine) protocol(port, backendPort int32) func(string, int32, string) string {
	for _, p := range []int32{port, backendPort} {
		if p == e.Port {
			return e.connect
		}
		for _, pr := range e.Protocols {
			if pr.Port == p {
				return pr.connect
			}
		}
	}
	if len(e.Protocols) > 0 {
		return openssl
	}
	return e.connect
}

// ConnectCluster is the command for an exposure with members (ports as in ConnectFor): the
// bootstrap name for every engine but MongoDB, whose command lists the members' hostnames as its seed list. With
// splitHorizons a member answers with the horizon whose name the client sent as SNI, and
// the bootstrap name is no member's horizon: a driver seeded with it would be told the
// members' internal names. Seeded with the members' own names it works with horizons and
// with advertised hosts alike.
func (e Engine) ConnectCluster(bootstrap string, members []string, port, backendPort int32, ca string) string {
	if e.Name != v1alpha1.EngineMongoDB || len(members) == 0 {
		return e.ConnectFor(bootstrap, port, backendPort, ca)
	}
	seeds := make([]string, len(members))
	for i, m := range members {
		seeds[i] = fmt.Sprintf("%s:%d", m, port)
	}
	return fmt.Sprintf("mongosh \"mongodb://%s/?tls=true&tlsCAFile=%s\"", strings.Join(seeds, ","), ca)
}

func openssl(host string, port int32, ca string) string {
	return fmt.Sprintf("openssl s_client -connect %s:%d -servername %s -CAfile %s -verify_hostname %s -verify_return_error", host, port, host, ca, host)
}

var table = []Engine{
	{Name: v1alpha1.EnginePostgres, Port: 5432, Start: PostgresSSLRequest, connect: func(h string, p int32, ca string) string {
		return fmt.Sprintf("psql \"host=%s port=%d dbname=postgres sslmode=verify-full sslrootcert=%s\"", h, p, ca)
	}},
	{Name: v1alpha1.EngineRedis, Port: 6379, Start: DirectTLS, Advertise: redisCluster, connect: redisCLI},
	{Name: v1alpha1.EngineValkey, Port: 6379, Start: DirectTLS, Advertise: redisCluster, connect: redisCLI},
	{Name: v1alpha1.EngineMongoDB, Port: 27017, Start: DirectTLS,
		Advertise: "each replica set member's host (rs.conf() members[].host) is its member hostname and port, or a horizon (members[].horizons) per member whose name is the member hostname: drivers pick a horizon by the SNI they sent",
		connect: func(h string, p int32, ca string) string {
			return fmt.Sprintf("mongosh \"mongodb://%s:%d/?tls=true&tlsCAFile=%s&directConnection=true\"", h, p, ca)
		}},
	{Name: v1alpha1.EngineNATS, Port: 4222, Start: DirectTLS,
		Advertise:      "each server's client_advertise is its member hostname and port (clients add the cluster's connect_urls to their server pool)",
		SpeaksFirstFix: "a NATS server speaks first (INFO) unless the client starts TLS: set tls { handshake_first: true } in the server (nats-server 2.10.4 or later) and connect with TLS first (nats.go nats.TLSHandshakeFirst(), natscli --tlsfirst)",
		connect: func(h string, p int32, ca string) string {
			return fmt.Sprintf("nats --server tls://%s:%d --tlsca %s --tlsfirst server check connection", h, p, ca)
		}},
	{Name: v1alpha1.EngineKafka, Port: 9093, Start: DirectTLS,
		Advertise: "each broker's advertised.listeners entry for this listener is its member hostname and port (Strimzi: the listener's configuration.brokers[].advertisedHost)",
		connect: func(h string, p int32, ca string) string {
			return fmt.Sprintf("kcat -b %s:%d -X security.protocol=ssl -X ssl.ca.location=%s -L", h, p, ca)
		}},
	{Name: v1alpha1.EngineClickHouse, Port: 9440, Start: DirectTLS, connect: func(h string, p int32, ca string) string {
		return fmt.Sprintf("clickhouse-client --host %s --port %d --secure --config-file <(printf '<clickhouse><openSSL><client><caConfig>%s</caConfig></client></openSSL></clickhouse>')", h, p, ca)
	}, Protocols: []Protocol{{Name: "HTTPS", Port: 8443, connect: func(h string, p int32, ca string) string {
		return fmt.Sprintf("curl --cacert %s \"https://%s:%d/?query=SELECT%%201\"", ca, h, p)
	}}}},
	{Name: v1alpha1.EngineRabbitMQ, Port: 5671, Start: DirectTLS, connect: openssl,
		Protocols: []Protocol{{Name: "management HTTPS", Port: 15671, connect: func(h string, p int32, ca string) string {
			return fmt.Sprintf("curl --cacert %s https://%s:%d/", ca, h, p)
		}}, {Name: "MQTT over TLS", Port: 8883, connect: openssl}, {Name: "STOMP over TLS", Port: 61614, connect: openssl}}},
	{Name: v1alpha1.EngineOpenSearch, Port: 9200, Start: DirectTLS, connect: openssl,
		Protocols: []Protocol{{Name: "transport", Port: 9300, connect: openssl}}},
	{Name: v1alpha1.EngineMariaDB, Port: 3306, Start: ServerFirst, SpeaksFirstFix: mysqlFix, connect: mariadbCLI},
	{Name: v1alpha1.EngineMySQL, Port: 3306, Start: ServerFirst, SpeaksFirstFix: mysqlFix, connect: mariadbCLI},
	{Name: v1alpha1.EngineCustom, Port: 0, Start: DirectTLS, connect: openssl},
}

// mysqlFix: the MySQL protocol has no TLS-first mode (docs/engines.md).
const mysqlFix = "a MySQL or MariaDB server speaks first (its greeting) and upgrades to TLS inside its protocol, so SNI cannot route it: expose it as a DatabaseExposure of engine mariadb or mysql with spec.port (a TCP listener of its own)"

// redisCluster: Redis 7 and Valkey cluster nodes announce a hostname in MOVED and ASK
// redirects and CLUSTER SHARDS only when told to.
const redisCluster = "each cluster node's cluster-announce-hostname is its member hostname, with cluster-preferred-endpoint-type hostname and cluster-announce-tls-port the listener's port"

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

// Greeting names the engine whose server sent first, unasked, the bytes that begin b (what
// a server that speaks first sends a client that waits, or a probe that sent a
// ClientHello), when they are recognisable: NATS's INFO line, a MySQL or MariaDB greeting
// (a packet of sequence 0 whose payload starts with protocol version 10).
func Greeting(b []byte) (Engine, bool) {
	switch {
	case len(b) >= 5 && string(b[:5]) == "INFO ":
		return Lookup(v1alpha1.EngineNATS)
	case len(b) >= 5 && b[3] == 0 && b[4] == 10 && int(b[0])|int(b[1])<<8|int(b[2])<<16 > 0:
		return Lookup(v1alpha1.EngineMariaDB)
	}
	return Engine{}, false
}
