package nats_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	natssource "github.com/monovertex/monovertex/adapters/source/nats"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func testConfig(url, subject string) natssource.Config {
	return natssource.Config{URL: url, Subject: subject, Queue: "runners", BufferBytes: 64 << 20, BufferMsgs: 65536, ReconnectWait: 100 * time.Millisecond}
}

func newSource(t *testing.T, cfg natssource.Config, log *zap.SugaredLogger) *natssource.Source {
	t.Helper()
	if err := cfg.Validate(runner.RoleSource); err != nil {
		t.Fatal(err)
	}
	src, err := natssource.New(context.Background(), cfg, t.Name(), log)
	if err != nil {
		t.Fatalf("new source: %v", err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	if err := src.Connect(context.Background()); err != nil {
		t.Fatalf("connect: %v", err)
	}
	return src
}

// publish waits until someone subscribes to subject, then publishes n
// values and flushes them.
func publish(t *testing.T, srv *natstest.Server, nc *natsgo.Conn, subject string, n int, prefix string) [][]byte {
	t.Helper()
	srv.WaitInterest(t, subject)
	values := make([][]byte, n)
	for i := range values {
		values[i] = fmt.Appendf(nil, "%s-%d", prefix, i)
		if err := nc.Publish(subject, values[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return values
}

func TestConformance(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	subject := adaptertest.OncePerTest(adaptertest.HashName, func(*testing.T, string) {})
	var produced sync.Map
	conformance.RunSource(t, conformance.SourceCase{
		New: func(t *testing.T) runner.Source {
			return newSource(t, testConfig(srv.URL(), subject(t)+".in"), nil)
		},
		Produce: func(t *testing.T, n int) [][]byte {
			name := subject(t)
			c, _ := produced.LoadOrStore(name, new(int))
			start := *c.(*int)
			*c.(*int) += n
			return publish(t, srv, nc, name+".in", n, fmt.Sprintf("v%d", start))
		},
		Peer: conformance.Peer{Stop: func(*testing.T) { srv.Shutdown() }, Start: func(t *testing.T) { srv.Restart(t) }},
		// No nack, no redelivery, no pending: core NATS keeps nothing.
		Features: conformance.SourceFeatures{
			Lifecycle:   conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true, Reconnects: true},
			KeepsValues: true,
		},
	})
}

// TestAQueueGroupSharesTheMessages: replicas in one queue group each get
// a part, every message exactly one of them; after one stops reading the
// other gets all that follow.
func TestAQueueGroupSharesTheMessages(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	a := newSource(t, testConfig(srv.URL(), "orders.>"), nil)
	b := newSource(t, testConfig(srv.URL(), "orders.>"), nil)
	const n = 2000
	want := publish(t, srv, nc, "orders.eu", n, "first")
	seen := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	counts := map[string]int{}
	for len(seen) < n && ctx.Err() == nil {
		for name, src := range map[string]*natssource.Source{"a": a, "b": b} {
			msgs, err := src.Read(ctx, 100, 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if other, dup := seen[string(m.Value)]; dup {
					t.Fatalf("%s read by %s and %s", m.Value, other, name)
				}
				seen[string(m.Value)] = name
				counts[name]++
			}
		}
	}
	for _, v := range want {
		if _, ok := seen[string(v)]; !ok {
			t.Fatalf("%s was not read", v)
		}
	}
	t.Logf("%d messages: %v", n, counts)
	if counts["a"] == 0 || counts["b"] == 0 {
		t.Fatalf("one replica got nothing: %v", counts)
	}

	a.StopReading()
	want = publish(t, srv, nc, "orders.us", 200, "second")
	got := adaptertest.ReadN(t, ctx, b, len(want), false)
	for i, m := range got {
		if !bytes.Equal(m.Value, want[i]) {
			t.Fatalf("message %d: %q, want %q (in publish order)", i, m.Value, want[i])
		}
	}
	if msgs, err := a.Read(ctx, 10, 100*time.Millisecond); len(msgs) != 0 || err == nil || !strings.Contains(err.Error(), "ended") {
		t.Fatalf("a read after StopReading: %d messages, %v; want none and the subscription ended", len(msgs), err)
	}
}

// TestStoppingWithMessagesBufferedSaysHowManyAreLost: what the client
// holds when reading stops cannot go back to core NATS; the warning
// counts it.
func TestStoppingWithMessagesBufferedSaysHowManyAreLost(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	core, logs := observer.New(zap.WarnLevel)
	src := newSource(t, testConfig(srv.URL(), "held"), zap.New(core).Sugar())
	publish(t, srv, nc, "held", 100, "h")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := len(adaptertest.ReadN(t, ctx, src, 10, false))
	for n, _ := src.Buffered(); read+n < 100; n, _ = src.Buffered() {
		if ctx.Err() != nil {
			t.Fatalf("the client holds %d of the 90 not read", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	src.StopReading()
	entries := logs.FilterMessageSnippet("buffered and not read").All()
	if len(entries) != 1 {
		t.Fatalf("%d warnings about buffered messages, want 1", len(entries))
	}
	lost := entries[0].ContextMap()["lost"].(int64)
	t.Logf("read %d, lost %d", read, lost)
	if read+int(lost) != 100 {
		t.Fatalf("read %d and %d reported lost, want 100 in all", read, lost)
	}
}

// TestANoRespondersStatusIsAnEmptyMessage: nats.go turns an empty message
// with a 503 status into an error; Numaflow passes it on empty.
func TestANoRespondersStatusIsAnEmptyMessage(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	src := newSource(t, testConfig(srv.URL(), "replies.>"), nil)
	srv.WaitInterest(t, "replies.x")
	if err := nc.PublishMsg(&natsgo.Msg{Subject: "replies.x", Header: natsgo.Header{"Status": []string{"503"}}}); err != nil {
		t.Fatal(err)
	}
	publish(t, srv, nc, "replies.y", 1, "after")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := adaptertest.ReadN(t, ctx, src, 2, false)
	if len(got[0].Value) != 0 || string(got[1].Value) != "after-0" {
		t.Fatalf("read %q, %q; want an empty message, then after-0", got[0].Value, got[1].Value)
	}
}

// TestDropsAreLoggedNotHidden: past MV_NATS_BUFFER_BYTES the client drops
// messages; the next read says how many were lost.
func TestDropsAreLoggedNotHidden(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	core, logs := observer.New(zap.WarnLevel)
	cfg := testConfig(srv.URL(), "big")
	cfg.BufferBytes, cfg.BufferMsgs = 1<<20, 10
	src := newSource(t, cfg, zap.New(core).Sugar())
	srv.WaitInterest(t, "big")
	// 4 MiB into a 1 MiB buffer, then 54 small messages into what is left
	// of 10 slots: each bound drops.
	payload := bytes.Repeat([]byte("x"), 64<<10)
	for i := range 64 {
		if i >= 10 {
			payload = []byte("small")
		}
		if err := nc.Publish("big", payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Flush says the server has the messages, not that the source's own
	// connection took them in; a read that starts at once can drain its
	// buffer while they still arrive, and nothing overflows (CI at
	// 85d3775 read all 64). Give the delivery time to fill the buffer
	// before the first read.
	time.Sleep(300 * time.Millisecond)
	// The client takes the messages in on its own; read (and note drops)
	// until all 64 are accounted for.
	read, dropped := 0, int64(0)
	deadline := time.Now().Add(20 * time.Second)
	for read+int(dropped) < 64 && time.Now().Before(deadline) {
		msgs, err := src.Read(context.Background(), 100, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		read += len(msgs)
		dropped = 0
		for _, e := range logs.FilterMessageSnippet("dropped messages").All() {
			dropped += e.ContextMap()["dropped"].(int64)
		}
	}
	t.Logf("read %d, dropped %d of 64", read, dropped)
	if dropped == 0 || read+int(dropped) != 64 {
		t.Fatalf("read %d and %d dropped, want some dropped and 64 in all", read, dropped)
	}
}

func TestValidate(t *testing.T) {
	good := testConfig("nats://127.0.0.1:4222", "orders.*")
	for _, tc := range []struct {
		name   string
		change func(*natssource.Config)
		bad    string
	}{
		{"valid", func(*natssource.Config) {}, ""},
		{"a list of urls", func(c *natssource.Config) { c.URL = "nats://a:4222,nats://b:4222" }, ""},
		{"no url", func(c *natssource.Config) { c.URL = "" }, "MV_NATS_URL"},
		{"http url", func(c *natssource.Config) { c.URL = "http://a:4222" }, "MV_NATS_URL"},
		{"no subject", func(c *natssource.Config) { c.Subject = "" }, "MV_NATS_SUBJECT"},
		{"> inside", func(c *natssource.Config) { c.Subject = "a.>.b" }, "MV_NATS_SUBJECT"},
		{"empty token", func(c *natssource.Config) { c.Subject = "a..b" }, "MV_NATS_SUBJECT"},
		{"a literal token with * in it, as the server takes it", func(c *natssource.Config) { c.Subject = "a.b*" }, ""},
		{"form feed", func(c *natssource.Config) { c.Subject = "a.\fb" }, "MV_NATS_SUBJECT"},
		{"no message slots", func(c *natssource.Config) { c.BufferMsgs = 0 }, "MV_NATS_BUFFER_MESSAGES"},
		{"no queue", func(c *natssource.Config) { c.Queue = "" }, "MV_NATS_QUEUE"},
		{"queue with a space", func(c *natssource.Config) { c.Queue = "a b" }, "MV_NATS_QUEUE"},
		{"small buffer", func(c *natssource.Config) { c.BufferBytes = 1000 }, "MV_NATS_BUFFER_BYTES"},
		{"reconnect wait", func(c *natssource.Config) { c.ReconnectWait = 0 }, "MV_NATS_RECONNECT_WAIT"},
		{"tls key alone", func(c *natssource.Config) { c.TLSKeyFile = "/k" }, "MV_NATS_TLS_CERT_FILE"},
		{"missing nkey file", func(c *natssource.Config) { c.NKeyFile = "/nonexistent/seed" }, "MV_NATS_NKEY_FILE"},
		{"a user and password", func(c *natssource.Config) { c.User, c.Password = "u\n", "p\n" }, ""},
		{"a user without a password", func(c *natssource.Config) { c.User = "u" }, "MV_NATS_PASSWORD"},
		{"a token and a user in the url", func(c *natssource.Config) { c.Token, c.URL = "t", "nats://u:p@a:4222" }, "MV_NATS_TOKEN"},
		{"a token and an nkey", func(c *natssource.Config) { c.Token, c.NKeyFile = "t", "/nonexistent/seed" }, "MV_NATS_NKEY_FILE"},
	} {
		adaptertest.ValidateRow(t, tc.name, good, runner.RoleSource, tc.change, tc.bad)
	}
}

// TestOverMutualTLSWithAnNKey: the same security settings as the
// JetStream source, under MV_NATS_* names.
func TestOverMutualTLSWithAnNKey(t *testing.T) {
	sec := natstest.WriteSecrets(t)
	srv := natstest.StartWith(t, natstest.TLS(t, sec.PKI, true), natstest.NKeyUser(t, sec.Seed))
	nc, _ := srv.Connect(t)
	cfg := testConfig(srv.URL(), "secure")
	cfg.TLSCAFile, cfg.TLSCertFile, cfg.TLSKeyFile, cfg.NKeyFile = sec.CA, sec.Cert, sec.Key, sec.NKey
	src := newSource(t, cfg, nil)
	want := publish(t, srv, nc, "secure", 50, "s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got := adaptertest.ReadN(t, ctx, src, len(want), false); len(got) != len(want) {
		t.Fatalf("%d messages", len(got))
	}
	cfg.NKeyFile = ""
	bare, err := natssource.New(ctx, cfg, t.Name(), nil)
	if err != nil {
		t.Fatalf("new without the NKey: %v, want the refusal from Connect", err)
	}
	defer bare.Close(ctx)
	if err := bare.Connect(ctx); err == nil || !strings.Contains(err.Error(), "MV_NATS_NKEY_FILE") {
		t.Fatalf("without the NKey: %v, want an authorization error naming MV_NATS_NKEY_FILE", err)
	}
}
