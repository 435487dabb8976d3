package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	jssource "github.com/monovertex/monovertex/adapters/source/jetstream"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func testConfig(url, stream string) jssource.Config {
	return jssource.Config{
		URL: url, Stream: stream, Consumer: "runner", DeliverPolicy: "all",
		AckWait: 2 * time.Second, MaxAckPending: 10000, NakDelay: 100 * time.Millisecond,
		AckSync: true, InProgress: true, ReconnectWait: 100 * time.Millisecond, APITimeout: 5 * time.Second,
	}
}

func createStream(t *testing.T, js jetstream.JetStream, name string) {
	t.Helper()
	natstest.CreateStream(t, js, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage})
}

// serverWithStream starts a server holding the stream (capturing
// stream.>) and returns it, a JetStream handle on it and a source config
// reading the stream, for the test to adjust.
func serverWithStream(t *testing.T, stream string) (*natstest.Server, jetstream.JetStream, jssource.Config) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	createStream(t, js, stream)
	return srv, js, testConfig(srv.URL(), stream)
}

// connect builds the source and connects it, as the engine does, and
// returns the first error of the two.
func connect(ctx context.Context, cfg jssource.Config, name string, log *zap.SugaredLogger) (*jssource.Source, error) {
	src, err := jssource.New(ctx, cfg, name, log)
	if err != nil {
		return nil, err
	}
	if err := src.Connect(ctx); err != nil {
		src.Close(ctx)
		return nil, err
	}
	return src, nil
}

func newSource(t *testing.T, cfg jssource.Config) *jssource.Source {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src, err := connect(ctx, cfg, t.Name(), nil)
	if err != nil {
		t.Fatalf("new source: %v", err)
	}
	// The suite closes its sources; closing twice is harmless.
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
}

func publish(t *testing.T, js jetstream.JetStream, subject string, n int, prefix string) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	values := make([][]byte, n)
	for i := range values {
		values[i] = []byte(fmt.Sprintf("%s-%d", prefix, i))
		if _, err := js.PublishAsync(subject, values[i]); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatalf("publish acks did not arrive")
	}
	return values
}

func TestConformance(t *testing.T) {
	runConformance(t, natstest.Start(t), func(*jssource.Config) {})
}

// runConformance runs the source suite against srv, each source's
// settings adjusted by set.
func runConformance(t *testing.T, srv *natstest.Server, set func(*jssource.Config)) {
	_, js := srv.Connect(t)
	ensure := adaptertest.OncePerTest(adaptertest.HashName, func(t *testing.T, name string) { createStream(t, js, name) })
	var produced sync.Map
	conformance.RunSource(t, conformance.SourceCase{
		New: func(t *testing.T) runner.Source {
			cfg := testConfig(srv.URL(), ensure(t))
			set(&cfg)
			return newSource(t, cfg)
		},
		Produce: func(t *testing.T, n int) [][]byte {
			name := ensure(t)
			c, _ := produced.LoadOrStore(name, new(int))
			start := *c.(*int)
			*c.(*int) += n
			return publish(t, js, name+".in", n, fmt.Sprintf("v%d", start))
		},
		Peer: conformance.Peer{Stop: func(*testing.T) { srv.Shutdown() }, Start: func(t *testing.T) { srv.Restart(t) }},
		Features: conformance.SourceFeatures{
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true, Reconnects: true},
			Nack:      true, RedeliverAfterClose: true, Pending: true, KeepsValues: true,
			// Redelivery after close needs the 2s ack wait to pass.
			RedeliveryWait: 20 * time.Second,
		},
	})
}

// readUntil reads and acks until done reports true, handing each batch to got.
func readUntil(t *testing.T, src runner.Source, done func() bool, got func([]*runner.Message)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for !done() {
		if ctx.Err() != nil {
			t.Errorf("not done before the deadline")
			return
		}
		msgs, err := src.Read(ctx, 50, 200*time.Millisecond)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Logf("read: %v", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		got(msgs)
		if err := src.Ack(ctx, msgs); err != nil {
			t.Errorf("ack: %v", err)
			return
		}
	}
}

func TestTwoSourcesShareOneConsumerAndReadEachMessageOnce(t *testing.T) {
	_, js, cfg := serverWithStream(t, "SHARED")
	cfg.AckWait = 30 * time.Second // no redelivery may hide a double read
	a, b := newSource(t, cfg), newSource(t, cfg)
	const n = 3000
	publish(t, js, "SHARED.in", n, "m")

	var mu sync.Mutex
	seen := map[string]int{}
	perSource := [2]int{}
	done := func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= n }
	var wg sync.WaitGroup
	for i, src := range []runner.Source{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readUntil(t, src, done, func(msgs []*runner.Message) {
				mu.Lock()
				defer mu.Unlock()
				for _, m := range msgs {
					seen[m.ID]++
				}
				perSource[i] += len(msgs)
			})
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("read %d distinct messages, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("message %s read %d times by the two sources", id, c)
		}
	}
	if perSource[0] == 0 || perSource[1] == 0 {
		t.Fatalf("one source read nothing (%v): the consumer was not shared", perSource)
	}
	// Both may have one fetch outstanding that returns nothing more.
	extra, _ := a.Read(context.Background(), 10, 300*time.Millisecond)
	extraB, _ := b.Read(context.Background(), 10, 300*time.Millisecond)
	if len(extra)+len(extraB) != 0 {
		t.Fatalf("%d more messages after all %d were read and acked", len(extra)+len(extraB), n)
	}
	if p, ap := natstest.ConsumerState(t, js, "SHARED", "runner"); p != 0 || ap != 0 {
		t.Fatalf("consumer pending %d, ack pending %d after everything was acked, want 0 and 0", p, ap)
	}
	t.Logf("source A read %d, source B read %d: %d distinct of %d, none twice", perSource[0], perSource[1], len(seen), n)
}

func TestMessageMapping(t *testing.T) {
	_, js, cfg := serverWithStream(t, "MAP")
	src := newSource(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	eventTime := time.Date(2026, 1, 2, 3, 4, 5, 6007, time.UTC)
	keyed := nats.NewMsg("MAP.keyed")
	keyed.Data = []byte("one")
	keyed.Header["Mv-Keys"] = []string{"k,1", "k2"}
	keyed.Header.Set("Mv-Event-Time", eventTime.Format(time.RFC3339Nano))
	keyed.Header.Set("origin", "test")
	keyed.Header.Set("Nats-Msg-Id", "producer-id-1")
	if _, err := js.PublishMsg(ctx, keyed); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	if _, err := js.Publish(ctx, "MAP.plain", []byte("two")); err != nil {
		t.Fatal(err)
	}

	var got []*runner.Message
	for len(got) < 2 && ctx.Err() == nil {
		msgs, err := src.Read(ctx, 10, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	if len(got) != 2 {
		t.Fatalf("read %d messages, want 2", len(got))
	}
	k, p := got[0], got[1]
	if k.ID != "MAP:1" || p.ID != "MAP:2" {
		t.Fatalf("IDs %q and %q, want MAP:1 and MAP:2 (stream:sequence)", k.ID, p.ID)
	}
	if fmt.Sprint(k.Keys) != "[k,1 k2]" || string(k.Value) != "one" {
		t.Fatalf("keyed message: keys %q value %q", k.Keys, k.Value)
	}
	if !k.EventTime.Equal(eventTime) {
		t.Fatalf("event time %v, want %v from Mv-Event-Time", k.EventTime, eventTime)
	}
	if k.Headers["origin"] != "test" || k.Headers["Nats-Msg-Id"] != "producer-id-1" {
		t.Fatalf("headers %v, want origin and the producer's Nats-Msg-Id kept", k.Headers)
	}
	if _, ok := k.Headers["Mv-Keys"]; ok {
		t.Fatalf("Mv-Keys left in the headers: %v", k.Headers)
	}
	if p.Keys != nil {
		t.Fatalf("message without Mv-Keys: keys %q, want none, as Numaflow's JetStream source gives", p.Keys)
	}
	if p.EventTime.Before(before) || p.EventTime.After(time.Now().Add(time.Second)) {
		t.Fatalf("message without Mv-Event-Time: event time %v, want the time it was stored", p.EventTime)
	}
	if err := src.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
}

func TestPendingCountsUndeliveredAndUnacked(t *testing.T) {
	_, js, cfg := serverWithStream(t, "PEND")
	cfg.AckWait = 30 * time.Second
	src := newSource(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish(t, js, "PEND.in", 10, "p")
	got := adaptertest.ReadN(t, ctx, src, 4, false)
	waitPending(t, src, 10) // 6 undelivered + 4 unacked
	if err := src.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitPending(t, src, 6)
	// The group has finished exactly the four acked deliveries.
	if n, err := src.GroupProcessed(ctx); err != nil || n != 4 {
		t.Fatalf("group processed %d (%v), want 4", n, err)
	}
}

func waitPending(t *testing.T, src *jssource.Source, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := src.Pending(context.Background())
		if err == nil && p == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending %d (%v), want %d", p, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInProgressKeepsHeldMessagesFromRedelivery(t *testing.T) {
	for _, inProgress := range []bool{true, false} {
		t.Run(fmt.Sprintf("in progress %v", inProgress), func(t *testing.T) {
			_, js, cfg := serverWithStream(t, "SLOW")
			cfg.AckWait = time.Second
			cfg.InProgress = inProgress
			slow, other := newSource(t, cfg), newSource(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			publish(t, js, "SLOW.in", 5, "s")
			held := adaptertest.ReadN(t, ctx, slow, 5, false)
			// Hold them for 2.5 ack waits while another replica reads.
			var stolen []*runner.Message
			for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); {
				msgs, err := other.Read(ctx, 5, 200*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				stolen = append(stolen, msgs...)
			}
			if err := slow.Ack(ctx, held); err != nil && inProgress {
				t.Fatal(err)
			}
			if inProgress && len(stolen) != 0 {
				t.Fatalf("%d held messages were redelivered to another replica despite in-progress", len(stolen))
			}
			if !inProgress && len(stolen) == 0 {
				t.Fatalf("without in-progress the held messages should have been redelivered after the 1s ack wait")
			}
			if err := other.Ack(ctx, stolen); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReadFailsDuringServerOutageAndLosesNothing(t *testing.T) {
	srv, js, cfg := serverWithStream(t, "OUT")
	cfg.AckWait = 3 * time.Second
	cfg.APITimeout = time.Second
	src := newSource(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const n = 500
	publish(t, js, "OUT.in", n, "o")

	seen := map[string]int{}
	var held []*runner.Message
	for len(seen) < 250 && ctx.Err() == nil {
		msgs, err := src.Read(ctx, 50, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			seen[m.ID]++
		}
		if len(seen) <= 200 {
			if err := src.Ack(ctx, msgs); err != nil {
				t.Fatal(err)
			}
		} else {
			held = append(held, msgs...) // read, not acked when the server goes
		}
	}

	srv.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	var readErr error
	for readErr == nil && time.Now().Before(deadline) {
		var msgs []*runner.Message
		msgs, readErr = src.Read(ctx, 50, 200*time.Millisecond)
		if len(msgs) > 0 {
			t.Fatalf("read %d messages from a server that is down", len(msgs))
		}
	}
	if readErr == nil {
		t.Fatalf("Read kept returning no error while the server was down")
	}
	t.Logf("read during the outage: %v", readErr)
	if err := src.Ready(ctx); err == nil {
		t.Fatalf("Ready reported ready while the server was down")
	}
	if err := src.Ack(ctx, held); err == nil {
		t.Logf("acks of %d held messages were buffered during the outage", len(held))
	} else {
		t.Logf("ack during the outage failed as expected: %v", err)
	}

	srv.Restart(t)
	restarted := time.Now()
	readUntil(t, src, func() bool { return len(seen) >= n }, func(msgs []*runner.Message) {
		for _, m := range msgs {
			seen[m.ID]++
		}
	})
	if len(seen) != n {
		t.Fatalf("read %d distinct messages of %d after the restart", len(seen), n)
	}
	t.Logf("all %d read %v after the restart", n, time.Since(restarted).Round(time.Millisecond))
	if err := src.Ready(ctx); err != nil {
		t.Fatalf("not ready after the restart: %v", err)
	}
	// Held messages whose acks were lost come back after the ack wait.
	waitConsumerDrained(t, src, js, "OUT", seen)
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	t.Logf("%d distinct messages of %d read, %d duplicates (redeliveries of unconfirmed acks)", len(seen), n, dups)
}

// waitConsumerDrained reads and acks redeliveries until the consumer has
// nothing pending or unacked.
func waitConsumerDrained(t *testing.T, src runner.Source, js jetstream.JetStream, stream string, seen map[string]int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, ap := natstest.ConsumerState(t, js, stream, "runner")
		if p == 0 && ap == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer still has %d pending and %d unacked", p, ap)
		}
		msgs, err := src.Read(context.Background(), 100, 300*time.Millisecond)
		if err != nil {
			continue
		}
		for _, m := range msgs {
			seen[m.ID]++
		}
		if len(msgs) > 0 {
			if err := src.Ack(context.Background(), msgs); err != nil {
				t.Logf("ack: %v", err)
			}
		}
	}
}

func TestRefusesConsumersItCannotAck(t *testing.T) {
	_, js, cfg := serverWithStream(t, "BAD")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cc := range []jetstream.ConsumerConfig{
		{Durable: "none", AckPolicy: jetstream.AckNonePolicy},
		{Durable: "all", AckPolicy: jetstream.AckAllPolicy},
		{Durable: "push", AckPolicy: jetstream.AckExplicitPolicy, DeliverSubject: "push.here"},
	} {
		if _, err := js.CreateOrUpdateConsumer(ctx, "BAD", cc); err != nil && cc.DeliverSubject == "" {
			t.Fatalf("create consumer %s: %v", cc.Durable, err)
		}
		if cc.DeliverSubject != "" {
			if _, err := js.CreateOrUpdatePushConsumer(ctx, "BAD", cc); err != nil {
				t.Fatalf("create push consumer: %v", err)
			}
		}
		c := cfg
		c.Consumer = cc.Durable
		if src, err := connect(ctx, c, t.Name(), nil); err == nil {
			_ = src.Close(ctx)
			t.Fatalf("consumer %s (%s, deliver subject %q) was accepted", cc.Durable, cc.AckPolicy, cc.DeliverSubject)
		} else {
			t.Logf("%s: %v", cc.Durable, err)
		}
	}
	cfg.Stream = "MISSING"
	if _, err := connect(ctx, cfg, t.Name(), nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing stream: %v, want an error saying it does not exist", err)
	}
}

func TestCreatesTheConsumerWithTheConfiguredSettings(t *testing.T) {
	_, js, cfg := serverWithStream(t, "NEWC")
	cfg.AckWait = 7 * time.Second
	cfg.MaxAckPending = 1234
	cfg.FilterSubject = "NEWC.a"
	newSource(t, cfg)
	newSource(t, cfg) // a second replica binds to the same consumer
	got := natstest.ConsumerInfo(t, js, "NEWC", "runner").Config
	if got.AckPolicy != jetstream.AckExplicitPolicy || got.AckWait != 7*time.Second || got.MaxAckPending != 1234 || got.FilterSubject != "NEWC.a" || got.Durable != "runner" {
		t.Fatalf("consumer config %+v", got)
	}
}

func TestFilterMustOverlapTheStreamsSubjects(t *testing.T) {
	for _, tc := range []struct {
		filter   string
		subjects []string
		want     bool
	}{
		{"in.x", []string{"in.>"}, true},
		{"in.*", []string{"in.>"}, true},
		{">", []string{"in.>"}, true},
		{"*.x", []string{"in.>"}, true},
		{"in.>", []string{"in.a.b"}, true},
		{"in.a", []string{"in.*"}, true},
		{"in.a", []string{"other.>", "in.a"}, true},
		{"any.thing", nil, true}, // a mirror holds any subject
		{"other.x", []string{"in.>"}, false},
		{"in", []string{"in.>"}, false}, // '>' is one or more tokens
		{"in.a.b", []string{"in.*"}, false},
		{"*", []string{"in.a"}, false},
		{"in.a", []string{"in.b", "out.>"}, false},
	} {
		if got := jssource.OverlapsAny(tc.filter, tc.subjects); got != tc.want {
			t.Errorf("filter %q on %v: overlaps %v, want %v", tc.filter, tc.subjects, got, tc.want)
		}
	}
}

func TestRefusesAFilterOutsideTheStream(t *testing.T) {
	_, js, cfg := serverWithStream(t, "FILT")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.FilterSubject = "other.x"
	_, err := connect(ctx, cfg, t.Name(), nil)
	var ce *runner.ConfigError
	if !errors.As(err, &ce) || ce.Var != "MV_JETSTREAM_FILTER_SUBJECT" {
		t.Fatalf("filter outside the stream: %v, want a config error naming MV_JETSTREAM_FILTER_SUBJECT", err)
	}
	if _, err := js.Consumer(ctx, "FILT", cfg.Consumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the refused consumer was created: %v", err)
	}
}

func TestValidate(t *testing.T) {
	good := testConfig("nats://127.0.0.1:4222", "S")
	for _, tc := range []struct {
		name   string
		change func(*jssource.Config)
		bad    string
	}{
		{"valid", func(*jssource.Config) {}, ""},
		{"no url", func(c *jssource.Config) { c.URL = "" }, "MV_JETSTREAM_URL"},
		{"no stream", func(c *jssource.Config) { c.Stream = "" }, "MV_JETSTREAM_STREAM"},
		{"dotted consumer", func(c *jssource.Config) { c.Consumer = "a.b" }, "MV_JETSTREAM_CONSUMER"},
		{"deliver policy", func(c *jssource.Config) { c.DeliverPolicy = "first" }, "MV_JETSTREAM_DELIVER_POLICY"},
		{"numaflow's policies, in any case", func(c *jssource.Config) { c.DeliverPolicy = " LaSt_Per_Subject " }, ""},
		{"a start sequence", func(c *jssource.Config) { c.DeliverPolicy = "by_start_sequence 768" }, ""},
		{"a start sequence that is not a number", func(c *jssource.Config) { c.DeliverPolicy = "by_start_sequence 7invalid8" }, "MV_JETSTREAM_DELIVER_POLICY"},
		{"a start time in epoch milliseconds", func(c *jssource.Config) { c.DeliverPolicy = "BY_START_TIME 1753428483000" }, ""},
		{"a start time as a date", func(c *jssource.Config) { c.DeliverPolicy = "by_start_time 2025-07-25" }, "MV_JETSTREAM_DELIVER_POLICY"},
		{"a policy without its value", func(c *jssource.Config) { c.DeliverPolicy = "by_start_sequence" }, "MV_JETSTREAM_DELIVER_POLICY"},
		{"ack wait", func(c *jssource.Config) { c.AckWait = 10 * time.Millisecond }, "MV_JETSTREAM_ACK_WAIT"},
		{"max ack pending", func(c *jssource.Config) { c.MaxAckPending = 0 }, "MV_JETSTREAM_MAX_ACK_PENDING"},
		{"nak delay", func(c *jssource.Config) { c.NakDelay = -time.Second }, "MV_JETSTREAM_NAK_DELAY"},
		// What the server or the client would refuse later is refused here.
		{"url list", func(c *jssource.Config) { c.URL = "nats://a:4222, tls://b:4443,c" }, ""},
		{"websocket url with a path", func(c *jssource.Config) { c.URL = "wss://a/nats" }, ""},
		{"filter with wildcards", func(c *jssource.Config) { c.FilterSubject = "S.*.x.>" }, ""},
		{"unbalanced bracket", func(c *jssource.Config) { c.URL = "nats://[::1" }, "MV_JETSTREAM_URL"},
		{"port out of range", func(c *jssource.Config) { c.URL = "nats://127.0.0.1:99999" }, "MV_JETSTREAM_URL"},
		{"space in host", func(c *jssource.Config) { c.URL = "nats://a b:4222" }, "MV_JETSTREAM_URL"},
		{"bad escape", func(c *jssource.Config) { c.URL = "nats://%zz" }, "MV_JETSTREAM_URL"},
		{"http scheme", func(c *jssource.Config) { c.URL = "http://nats:4222" }, "MV_JETSTREAM_URL"},
		{"only commas", func(c *jssource.Config) { c.URL = " , ," }, "MV_JETSTREAM_URL"},
		{"mixed websocket", func(c *jssource.Config) { c.URL = "nats://a,ws://b" }, "MV_JETSTREAM_URL"},
		{"consumer with a slash", func(c *jssource.Config) { c.Consumer = "a/b" }, "MV_JETSTREAM_CONSUMER"},
		{"consumer with a control byte", func(c *jssource.Config) { c.Consumer = "a\x00b" }, "MV_JETSTREAM_CONSUMER"},
		{"consumer too long", func(c *jssource.Config) { c.Consumer = strings.Repeat("c", 256) }, "MV_JETSTREAM_CONSUMER"},
		{"stream with a backslash", func(c *jssource.Config) { c.Stream = `a\b` }, "MV_JETSTREAM_STREAM"},
		{"filter with an empty token", func(c *jssource.Config) { c.FilterSubject = "S..x" }, "MV_JETSTREAM_FILTER_SUBJECT"},
		{"filter with > inside", func(c *jssource.Config) { c.FilterSubject = "S.>.x" }, "MV_JETSTREAM_FILTER_SUBJECT"},
		{"filter with a space", func(c *jssource.Config) { c.FilterSubject = "S.a b" }, "MV_JETSTREAM_FILTER_SUBJECT"},
		{"negative consumer timeout", func(c *jssource.Config) { c.MissingWait = -time.Second }, "MV_JETSTREAM_CONSUMER_TIMEOUT"},
	} {
		adaptertest.ValidateRow(t, tc.name, good, runner.RoleSource, tc.change, tc.bad)
	}
}

// BenchmarkAck compares the ack modes on batches of 500 against the real
// server: MV_JETSTREAM_ACK_SYNC=true (the last ack of the batch confirmed,
// which the server takes after the others) and false (acks sent, then one flush). It reports
// messages per second; run with -bench Ack -benchtime 20x.
func BenchmarkAck(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("ack sync %v", sync), func(b *testing.B) {
			srv := natstest.Start(b)
			_, js := srv.Connect(b)
			natstest.CreateStream(b, js, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"BENCH.>"}})
			cfg := testConfig(srv.URL(), "BENCH")
			cfg.AckWait = time.Minute
			cfg.AckSync = sync
			src, err := connect(context.Background(), cfg, "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close(context.Background())
			const batch = 500
			ctx := context.Background()
			var acked time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for j := 0; j < batch; j++ {
					if _, err := js.PublishAsync("BENCH.in", []byte("x")); err != nil {
						b.Fatal(err)
					}
				}
				<-js.PublishAsyncComplete()
				msgs := adaptertest.ReadN(b, ctx, src, batch, false)
				b.StartTimer()
				start := time.Now()
				if err := src.Ack(ctx, msgs); err != nil {
					b.Fatal(err)
				}
				acked += time.Since(start)
			}
			b.ReportMetric(float64(b.N*batch)/acked.Seconds(), "acks/s")
		})
	}
}
