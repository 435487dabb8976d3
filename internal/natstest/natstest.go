// Package natstest starts a real nats-server with JetStream inside the test
// process, listening on 127.0.0.1 with its file store in a test temp dir, so
// adapter, end-to-end and fault tests run against the real broker with
// nothing mocked. A Server can be shut down and started again on the same
// port and store, which is how tests simulate a broker outage or restart.
//
//	srv := natstest.Start(t)
//	nc, js := srv.Connect(t)
//	natstest.CreateStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
//	... point the code under test at srv.URL() ...
//	srv.Restart(t) // same port, same store: streams and consumers survive
package natstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/internal/peerauth"
	"github.com/monovertex/monovertex/internal/testutil"
)

// Server is an in-process nats-server with JetStream. Its methods are safe
// to call from several goroutines.
type Server struct {
	storeDir   string
	user, pass string
	// server and client are what Options add to the server's settings and
	// to Connect's client.
	server []func(*server.Options)
	client []nats.Option

	mu   sync.Mutex
	port int
	srv  *server.Server
}

// Start starts a JetStream server on 127.0.0.1 at a free port with a file
// store in t.TempDir(); it is shut down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t)
}

// StartWithUser is Start with a server that accepts only clients that
// authenticate as user with password (NATS basic auth), as a secured
// cluster does; Connect authenticates, URL carries no credentials.
func StartWithUser(t testing.TB, user, password string) *Server {
	t.Helper()
	return StartWith(t, User(user, password))
}

// Option secures a server started with StartWith.
type Option func(*Server)

// TLS makes the server speak TLS only, with p's server certificate, and
// with verifyClients also require a client certificate signed by p's CA.
// Connect trusts p's CA and presents p's client certificate.
func TLS(t testing.TB, p testutil.PKI, verifyClients bool) Option {
	t.Helper()
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatalf("natstest: server key pair: %v", err)
	}
	clientCert, err := tls.X509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatalf("natstest: client key pair: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CA)
	return func(s *Server) {
		s.server = append(s.server, func(o *server.Options) {
			o.TLS, o.TLSVerify = true, verifyClients
			o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
			if verifyClients {
				o.TLSConfig.ClientAuth, o.TLSConfig.ClientCAs = tls.RequireAndVerifyClientCert, roots
			}
			o.TLSTimeout = 5
		})
		s.client = append(s.client, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{clientCert}}))
	}
}

// NKeyUser makes the server let in only clients that sign its challenge
// with the user NKey whose seed is seed (NATS NKey authentication);
// Connect signs with it.
func NKeyUser(t testing.TB, seed []byte) Option {
	t.Helper()
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatalf("natstest: nkey seed: %v", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatalf("natstest: nkey public key: %v", err)
	}
	return func(s *Server) {
		s.server = append(s.server, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
		s.client = append(s.client, nats.Nkey(pub, kp.Sign))
	}
}

// Secrets are a PKI and a user NKey written to files, as Numaflow's tls
// and auth.nkey Secrets are mounted in a pod.
type Secrets struct {
	PKI  testutil.PKI
	Seed []byte
	// Files: the CA, the client certificate and key, the NKey seed; all in Dir.
	CA, Cert, Key, NKey, Dir string
}

// WriteSecrets makes a PKI and a user NKey and writes them to files.
func WriteSecrets(t testing.TB) Secrets {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	s := Secrets{PKI: testutil.NewPKI(t), Seed: seed, Dir: t.TempDir()}
	for _, f := range []struct {
		path *string
		name string
		b    []byte
	}{{&s.CA, "ca.crt", s.PKI.CA}, {&s.Cert, "tls.crt", s.PKI.ClientCert}, {&s.Key, "tls.key", s.PKI.ClientKey}, {&s.NKey, "nkey", seed}} {
		*f.path = filepath.Join(s.Dir, f.name)
		if err := os.WriteFile(*f.path, f.b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Auth is the runner's setting that uses all of the secrets.
func (s Secrets) Auth() natsjs.Auth {
	return natsjs.Auth{TLSFiles: peerauth.TLSFiles{TLSCAFile: s.CA, TLSCertFile: s.Cert, TLSKeyFile: s.Key}, NKeyFile: s.NKey}
}

// User makes the server let in only clients that authenticate as user
// with password; Connect does.
func User(user, password string) Option {
	return func(s *Server) { s.user, s.pass = user, password }
}

// Token makes the server let in only clients that present token; Connect
// does.
func Token(token string) Option {
	return func(s *Server) {
		s.server = append(s.server, func(o *server.Options) { o.Authorization = token })
		s.client = append(s.client, nats.Token(token))
	}
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts ...Option) *Server {
	t.Helper()
	// A port of testutil.FreePort's, which nothing else takes while the
	// server is down between a Restart's shutdown and start.
	s := &Server{storeDir: t.TempDir(), port: testutil.FreePort(t)}
	for _, o := range opts {
		o(s)
	}
	if err := s.start(); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	opts := &server.Options{
		ServerName: "natstest",
		Host:       "127.0.0.1",
		Port:       s.port,
		JetStream:  true,
		StoreDir:   s.storeDir,
		NoLog:      true,
		NoSigs:     true,
		// Large enough for the conformance suite's 1 MiB payloads plus headers.
		MaxPayload: 8 << 20,
		Username:   s.user,
		Password:   s.pass,
	}
	for _, o := range s.server {
		o(opts)
	}
	var lastErr error
	// The port of a server that was just shut down can take a moment to be
	// free again; retry briefly instead of failing the test.
	for attempt := 0; attempt < 50; attempt++ {
		srv, err := server.NewServer(opts)
		if err != nil {
			return fmt.Errorf("new server: %w", err)
		}
		go srv.Start()
		if srv.ReadyForConnections(10 * time.Second) {
			s.srv = srv
			s.port = srv.Addr().(*net.TCPAddr).Port
			return nil
		}
		srv.Shutdown()
		srv.WaitForShutdown()
		lastErr = fmt.Errorf("server on 127.0.0.1:%d not ready for connections", s.port)
		time.Sleep(100 * time.Millisecond)
	}
	return lastErr
}

// URL is the client URL, nats://127.0.0.1:<port>; it stays the same across
// Restart.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://127.0.0.1:" + strconv.Itoa(s.port)
}

// StoreDir is the JetStream store directory, kept across Restart.
func (s *Server) StoreDir() string { return s.storeDir }

// Running reports whether the server is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// Shutdown stops the server and waits until it is down; clients see the
// connection drop and start reconnecting. Calling it again does nothing.
func (s *Server) Shutdown() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart shuts the server down (if it is running) and starts a new one on
// the same port with the same store, so streams, consumers and their ack
// state survive, as with a broker pod restart.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Shutdown()
	if err := s.start(); err != nil {
		t.Fatalf("natstest: restart: %v", err)
	}
}

// WaitInterest waits until some client subscribes to subject (core NATS
// delivers a message only to the subscriptions that exist when it is
// published), and fails t after 30 s.
func (s *Server) WaitInterest(t testing.TB, subject string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv != nil && srv.GlobalAccount().SubscriptionInterest(subject) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: no subscription to %s after 30s", subject)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Connect opens a client connection (closed when the test ends) and a
// JetStream context on it, for setting up streams and checking results.
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	if s.user != "" {
		opts = append(opts, nats.UserInfo(s.user, s.pass))
	}
	opts = append(opts, s.client...)
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		t.Fatalf("natstest: connect to %s: %v", s.URL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream context: %v", err)
	}
	return nc, js
}

// CreateStream creates (or updates) a stream and fails the test on error.
func CreateStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("natstest: create stream %s: %v", cfg.Name, err)
	}
	return st
}

// ReadAll returns every message the stream holds now, in sequence order,
// read with an ordered consumer (which leaves no state behind).
func ReadAll(t testing.TB, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("natstest: stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("natstest: stream info %s: %v", stream, err)
	}
	want := int(info.State.Msgs)
	out := make([]jetstream.Msg, 0, want)
	if want == 0 {
		return out
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("natstest: ordered consumer on %s: %v", stream, err)
	}
	for len(out) < want {
		if ctx.Err() != nil {
			t.Fatalf("natstest: read %d of %d messages of %s", len(out), want, stream)
		}
		batch, err := cons.Fetch(min(want-len(out), 1000), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatalf("natstest: fetch from %s: %v", stream, err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
	}
	return out
}

// ConsumerInfo returns what the server holds for the consumer now (its
// configuration and delivery state).
func ConsumerInfo(t testing.TB, js jetstream.JetStream, stream, consumer string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		t.Fatalf("natstest: consumer %s/%s: %v", stream, consumer, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("natstest: consumer info %s/%s: %v", stream, consumer, err)
	}
	return info
}

// ConsumerState returns the consumer's NumPending and NumAckPending.
func ConsumerState(t testing.TB, js jetstream.JetStream, stream, consumer string) (pending, ackPending int) {
	t.Helper()
	info := ConsumerInfo(t, js, stream, consumer)
	return int(info.NumPending), info.NumAckPending
}
