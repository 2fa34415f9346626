package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// The MongoDB wire protocol through a DatabaseExposure: FerretDB on SQLite with its TLS
// listener, and the official Go driver inserting and finding by both of the exposure's
// names. What went in through snigate is then read straight from the server: it reached
// that server and no other. FerretDB has no replica set (its hello has no setName), so
// this is the single-server case: directConnection=true, and a single seed without it.
func TestEngineMongoDB(t *testing.T) {
	t.Parallel()
	needBinary(t)
	ca := testutil.NewCA(t)
	names := engineHostnames("orders", "mongodb")
	srv := testutil.StartFerretDB(t, testutil.FerretDBOptions{CA: ca, Name: names[0], Cert: ca.Issue(t, names...)})
	e := startEngineTenant(t, ca, 27017,
		exposureYAML("orders", "mongodb", 27017),
		fixture.ServiceYAML("acme", "orders", 27017, srv.Port, "127.0.0.1"))

	t.Run("status", func(t *testing.T) {
		e.waitVerified(t, map[string][]*testutil.Cert{"orders": {srv.Cert}})
	})

	for i, c := range []struct{ name, query string }{
		{names[0], "tls=true&directConnection=true"},
		{names[1], "tls=true&directConnection=true"},
		{names[0], "tls=true"},
	} {
		t.Run(fmt.Sprintf("driver insert and find by %s?%s", c.name, c.query), func(t *testing.T) {
			var peers peerRecorder
			uri := fmt.Sprintf("mongodb://%s/?%s", net.JoinHostPort(c.name, "27017"), c.query)
			cl := mongoConnect(t, uri, peers.config(ca), e.dial)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			coll := cl.Database("snigate").Collection("engines")
			doc := bson.D{{Key: "case", Value: i}, {Key: "via", Value: c.name}}
			if _, err := coll.InsertOne(ctx, doc); err != nil {
				t.Fatalf("insert by %s: %v", c.name, err)
			}
			var got bson.M
			if err := coll.FindOne(ctx, bson.D{{Key: "case", Value: i}}).Decode(&got); err != nil {
				t.Fatalf("find by %s: %v", c.name, err)
			}
			if got["via"] != c.name {
				t.Fatalf("found %v, want via %s", got, c.name)
			}
			peers.check(t, c.name, srv.Cert)

			// Straight to the server: the document is there.
			direct := mongoConnect(t, fmt.Sprintf("mongodb://%s/?tls=true&directConnection=true", srv.Addr), ca.ClientConfig(names[0]), nil)
			n, err := direct.Database("snigate").Collection("engines").CountDocuments(ctx, bson.D{{Key: "case", Value: i}, {Key: "via", Value: c.name}})
			if err != nil || n != 1 {
				t.Fatalf("the server itself has %d documents of case %d (%v), want 1", n, i, err)
			}
		})
	}

	t.Run("the certificate is the server's own", func(t *testing.T) {
		e.checkServed(t, srv.Cert, names...)
	})

	t.Run("no SNI is closed with zero bytes", func(t *testing.T) {
		e.checkNoSNI(t, func() error {
			// By the address the driver sends no SNI.
			opts := options.Client().ApplyURI("mongodb://" + e.addr() + "/?tls=true&directConnection=true").
				SetTLSConfig(&tls.Config{InsecureSkipVerify: true}).
				SetServerSelectionTimeout(5 * time.Second).SetConnectTimeout(ioTimeout)
			cl, err := mongo.Connect(opts)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			defer cl.Disconnect(ctx)
			return cl.Ping(ctx, nil)
		})
	})
}

// mongoConnect connects the driver with uri and cfg, through dial when not nil, pings, and
// disconnects when the test ends.
func mongoConnect(t *testing.T, uri string, cfg *tls.Config, dial func(context.Context, string, string) (net.Conn, error)) *mongo.Client {
	t.Helper()
	opts := options.Client().ApplyURI(uri).SetTLSConfig(cfg).
		SetServerSelectionTimeout(20 * time.Second).SetConnectTimeout(ioTimeout)
	if dial != nil {
		opts.SetDialer(dialerFunc(dial))
	}
	cl, err := mongo.Connect(opts)
	if err != nil {
		t.Fatalf("%s: %v", uri, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl.Disconnect(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Ping(ctx, nil); err != nil {
		t.Fatalf("ping %s: %v", uri, err)
	}
	return cl
}

// dialerFunc is a DialContext function as the interface the drivers take.
type dialerFunc func(ctx context.Context, network, address string) (net.Conn, error)

func (f dialerFunc) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f(ctx, network, address)
}
