package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	jssink "github.com/monovertex/monovertex/adapters/sink/jetstream"
	jssource "github.com/monovertex/monovertex/adapters/source/jetstream"
	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func testConfig(url, subject string) jssink.Config {
	return jssink.Config{
		URL: url, Roles: runner.Roles[jssink.Target]{Sink: jssink.Target{Subject: subject}}, PublishTimeout: 5 * time.Second,
		MaxPending: 8192, ReconnectWait: 100 * time.Millisecond,
	}
}

func createStream(t *testing.T, js jetstream.JetStream, name string) {
	t.Helper()
	natstest.CreateStream(t, js, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute, MaxMsgSize: -1,
	})
}

// serverWithStreams starts a server holding the streams (each capturing
// name.>) and returns it with a JetStream handle on it.
func serverWithStreams(t *testing.T, names ...string) (*natstest.Server, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	for _, name := range names {
		createStream(t, js, name)
	}
	return srv, js
}

// wantStored fails t unless the stream holds want messages.
func wantStored(t *testing.T, js jetstream.JetStream, stream string, want int) {
	t.Helper()
	if n := len(natstest.ReadAll(t, js, stream)); n != want {
		t.Fatalf("stream %s holds %d messages, want %d", stream, n, want)
	}
}

func newSink(t *testing.T, cfg jssink.Config, role runner.Role) *jssink.Sink {
	t.Helper()
	s, err := jssink.New(cfg, role, t.Name(), nil)
	if err != nil {
		t.Fatalf("new sink: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	if err := s.Connect(context.Background()); err != nil {
		t.Fatalf("connect: %v", err)
	}
	return s
}

// received decodes what a stream holds the way a JetStream source would,
// with the sink's Nats-Msg-Id as the ID.
func received(t *testing.T, js jetstream.JetStream, stream string) []*runner.Message {
	var out []*runner.Message
	for _, jm := range natstest.ReadAll(t, js, stream) {
		m := &runner.Message{Value: jm.Data(), ID: jm.Headers().Get(natsjs.HeaderMsgID)}
		meta, err := jm.Metadata()
		if err != nil {
			t.Fatalf("metadata: %v", err)
		}
		natsjs.DecodeHeaders(m, jm.Headers(), meta.Timestamp)
		out = append(out, m)
	}
	return out
}

func TestConformance(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ensure := adaptertest.OncePerTest(adaptertest.HashName, func(t *testing.T, name string) { createStream(t, js, name) })
	conformance.RunSink(t, conformance.SinkCase{
		New: func(t *testing.T) runner.Sink {
			return newSink(t, testConfig(srv.URL(), ensure(t)+".out"), runner.RoleSink)
		},
		Received: func(t *testing.T) []*runner.Message { return received(t, js, ensure(t)) },
		Peer:     conformance.Peer{Stop: func(*testing.T) { srv.Shutdown() }, Start: func(t *testing.T) { srv.Restart(t) }},
		Features: conformance.SinkFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true, Reconnects: true}, KeepsKeys: true, KeepsEventTime: true, KeepsHeaders: true},
	})
}

func write(t *testing.T, s runner.Sink, msgs []*runner.Message) []runner.WriteResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.Write(ctx, msgs)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if len(res) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(res), len(msgs))
	}
	return res
}

func allOK(t *testing.T, res []runner.WriteResult) {
	t.Helper()
	for i, r := range res {
		if r.Status != runner.WriteOK {
			t.Fatalf("message %d: %s (%v)", i, r.Status, r.Err)
		}
	}
}

func batch(prefix string, n int) []*runner.Message {
	msgs := make([]*runner.Message, n)
	for i := range msgs {
		msgs[i] = &runner.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Value: []byte(fmt.Sprintf("v%d", i)), Keys: []string{"k"}, EventTime: time.Now()}
	}
	return msgs
}

func TestRewritesAreDeduplicatedByMessageID(t *testing.T) {
	srv, js := serverWithStreams(t, "DEDUP")
	s := newSink(t, testConfig(srv.URL(), "DEDUP.out"), runner.RoleSink)
	msgs := batch("d", 100)
	allOK(t, write(t, s, msgs))
	allOK(t, write(t, s, msgs))      // a retried batch
	allOK(t, write(t, s, msgs[:10])) // a redelivery after a crash
	wantStored(t, js, "DEDUP", 100)  // 100 IDs written three times
}

func TestSinkToSourceRoundTrip(t *testing.T) {
	srv, _ := serverWithStreams(t, "TRIP")
	s := newSink(t, testConfig(srv.URL(), "TRIP.out"), runner.RoleSink)
	at := time.Date(2026, 3, 4, 5, 6, 7, 8009, time.UTC)
	in := &runner.Message{
		ID: "IN:42", Value: []byte("payload"), Keys: []string{"a,b", "c"}, EventTime: at,
		Headers: map[string]string{
			"traceparent": "00-abc-def-01",
			// Read from another stream: must not reach the server as-is.
			"Nats-Expected-Last-Sequence": "1", "Nats-Msg-Id": "upstream-id", "Mv-Keys": "forged",
		},
	}
	allOK(t, write(t, s, []*runner.Message{in}))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src, err := jssource.New(ctx, jssource.Config{
		URL: srv.URL(), Stream: "TRIP", Consumer: "reader", DeliverPolicy: "all", AckWait: 30 * time.Second,
		MaxAckPending: 100, NakDelay: time.Second, AckSync: true, ReconnectWait: 100 * time.Millisecond, APITimeout: 5 * time.Second,
	}, t.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	if err := src.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	var got []*runner.Message
	for len(got) == 0 && ctx.Err() == nil {
		if got, err = src.Read(ctx, 10, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 {
		t.Fatalf("read %d messages, want 1", len(got))
	}
	out := got[0]
	if string(out.Value) != "payload" || fmt.Sprint(out.Keys) != "[a,b c]" || !out.EventTime.Equal(at) {
		t.Fatalf("round trip: value %q keys %q event time %v", out.Value, out.Keys, out.EventTime)
	}
	if out.Headers["traceparent"] != "00-abc-def-01" {
		t.Fatalf("user header lost: %v", out.Headers)
	}
	if out.Headers["Nats-Msg-Id"] != "IN:42" {
		t.Fatalf("Nats-Msg-Id %q, want the message ID IN:42", out.Headers["Nats-Msg-Id"])
	}
	if _, ok := out.Headers["Nats-Expected-Last-Sequence"]; ok {
		t.Fatalf("a Nats-* user header was forwarded: %v", out.Headers)
	}
	if err := src.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
}

func TestWriteFailsWhileTheServerIsDownAndWorksAfterRestart(t *testing.T) {
	srv, js := serverWithStreams(t, "DOWN")
	s := newSink(t, testConfig(srv.URL(), "DOWN.out"), runner.RoleSink)
	allOK(t, write(t, s, batch("before", 50)))

	srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := s.Write(ctx, batch("during", 10))
		if err != nil {
			t.Logf("write during the outage: %v", err)
			break
		}
		for i, r := range res {
			if r.Status == runner.WriteOK {
				t.Fatalf("message %d reported written while the server was down", i)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes kept returning per-message failures, want a whole-call error while disconnected")
		}
	}
	if err := s.Ready(ctx); err == nil {
		t.Fatalf("Ready reported ready while the server was down")
	}

	srv.Restart(t)
	after := batch("after", 50)
	for {
		res, err := s.Write(ctx, after)
		if err == nil {
			allOK(t, res)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("sink did not recover after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// "during" messages that the client buffered may have been stored too;
	// what must hold is that everything reported written is there.
	ids := map[string]bool{}
	for _, m := range received(t, js, "DOWN") {
		ids[m.ID] = true
	}
	for _, m := range append(batch("before", 50), after...) {
		if !ids[m.ID] {
			t.Fatalf("message %s was reported written but is not in the stream", m.ID)
		}
	}
}

func TestNoStreamForTheSubjectFailsEachMessage(t *testing.T) {
	srv := natstest.Start(t)
	s := newSink(t, testConfig(srv.URL(), "nowhere.out"), runner.RoleSink)
	res := write(t, s, batch("x", 3))
	for i, r := range res {
		if r.Status != runner.WriteFailed || r.Err == nil {
			t.Fatalf("message %d: %s (%v), want failed", i, r.Status, r.Err)
		}
	}
	t.Logf("publish without a stream: %v", res[0].Err)
}

func TestFallbackRoleUsesTheFallbackSubject(t *testing.T) {
	srv, js := serverWithStreams(t, "MAIN", "DLQ")
	cfg := testConfig(srv.URL(), "MAIN.out")
	cfg.Fallback.Subject = "DLQ.out" // the URL falls back to MV_JETSTREAM_URL
	if err := cfg.Validate(runner.RoleFallbackSink); err != nil {
		t.Fatal(err)
	}
	fb := newSink(t, cfg, runner.RoleFallbackSink)
	allOK(t, write(t, fb, batch("f", 5)))
	wantStored(t, js, "DLQ", 5)
	wantStored(t, js, "MAIN", 0)
}

func TestValidate(t *testing.T) {
	good := testConfig("nats://127.0.0.1:4222", "out")
	for _, tc := range []struct {
		name   string
		role   runner.Role
		change func(*jssink.Config)
		bad    string
	}{
		{"valid", runner.RoleSink, func(*jssink.Config) {}, ""},
		{"no url", runner.RoleSink, func(c *jssink.Config) { c.URL = "" }, "MV_JETSTREAM_URL"},
		{"wildcard subject", runner.RoleSink, func(c *jssink.Config) { c.Sink.Subject = "out.*" }, "MV_JETSTREAM_SUBJECT"},
		{"fallback needs its subject", runner.RoleFallbackSink, func(*jssink.Config) {}, "MV_FALLBACK_JETSTREAM_SUBJECT"},
		{"fallback ok", runner.RoleFallbackSink, func(c *jssink.Config) { c.Fallback.Subject = "dlq" }, ""},
		{"fallback without any url", runner.RoleFallbackSink, func(c *jssink.Config) { c.Fallback.Subject = "dlq"; c.URL = "" }, "MV_FALLBACK_JETSTREAM_URL"},
		{"publish timeout", runner.RoleSink, func(c *jssink.Config) { c.PublishTimeout = 0 }, "MV_JETSTREAM_PUBLISH_TIMEOUT"},
		{"own sink url without the source's", runner.RoleSink, func(c *jssink.Config) { c.URL = ""; c.Sink.URL = "nats://other:4222" }, ""},
		// A malformed URL is refused naming the variable it came from.
		{"shared url", runner.RoleSink, func(c *jssink.Config) { c.URL = "nats://[::1" }, "MV_JETSTREAM_URL"},
		{"sink url", runner.RoleSink, func(c *jssink.Config) { c.Sink.URL = "nats://h:99999" }, "MV_JETSTREAM_SINK_URL"},
		{"fallback url", runner.RoleFallbackSink, func(c *jssink.Config) { c.Fallback.Subject = "dlq"; c.Fallback.URL = "http://h" }, "MV_FALLBACK_JETSTREAM_URL"},
		{"fallback inherits", runner.RoleFallbackSink, func(c *jssink.Config) { c.Fallback.Subject = "dlq"; c.URL = "nats://a b" }, "MV_JETSTREAM_URL"},
		{"on-success url", runner.RoleOnSuccessSink, func(c *jssink.Config) { c.OnSuccess.Subject = "ok"; c.OnSuccess.URL = "nats://%zz" }, "MV_ON_SUCCESS_JETSTREAM_URL"},
		{"good list", runner.RoleSink, func(c *jssink.Config) { c.URL = "nats://a:4222,nats://b:4222" }, ""},
		{"a token", runner.RoleSink, func(c *jssink.Config) { c.Token = "t" }, ""},
		// A user or token in the role's own URL as well is refused naming
		// that URL's variable.
		{"a token here and in the fallback's url", runner.RoleFallbackSink, func(c *jssink.Config) {
			c.Fallback.Subject, c.Fallback.URL, c.Token = "dlq", "nats://t@h:4222", "t"
		}, "MV_JETSTREAM_TOKEN"},
		{"a user and the sink's creds", runner.RoleSink, func(c *jssink.Config) { c.User, c.Password, c.Sink.Creds = "u", "p", "/x.creds" }, "MV_JETSTREAM_SINK_CREDS"},
		{"the fallback's creds and a user in its url", runner.RoleFallbackSink, func(c *jssink.Config) {
			c.Fallback.Subject, c.Fallback.URL, c.Fallback.Creds = "dlq", "nats://u:p@h:4222", "/x.creds"
		}, "MV_FALLBACK_JETSTREAM_CREDS"},
	} {
		adaptertest.ValidateRow(t, tc.name, good, tc.role, tc.change, tc.bad)
	}
}

func TestSinkURLPublishesToAnotherServer(t *testing.T) {
	src, srcJS := serverWithStreams(t, "MAIN")
	dst, dstJS := serverWithStreams(t, "MAIN")
	cfg := testConfig(src.URL(), "MAIN.out")
	cfg.Sink.URL = dst.URL() // MV_JETSTREAM_URL stays the source's server
	s := newSink(t, cfg, runner.RoleSink)
	allOK(t, write(t, s, batch("x", 4)))
	wantStored(t, dstJS, "MAIN", 4) // the sink's server
	wantStored(t, srcJS, "MAIN", 0) // the source's server
}
