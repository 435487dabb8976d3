package natstest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/testutil"
)

// The streams, subjects and consumer of a Pipeline.
const (
	InStream  = "IN"
	OutStream = "OUT"
	FBStream  = "FB"
	Consumer  = "runner"
)

// Pipeline is the JetStream end-to-end fixture: a nats-server with an input
// stream the runner reads, an output and a fallback stream it writes (both
// de-duplicating on Nats-Msg-Id), and a plain subscriber that sees every
// publish to them, de-duplicated or not.
type Pipeline struct {
	T   *testing.T
	Srv *Server
	NC  *nats.Conn
	JS  jetstream.JetStream

	mu        sync.Mutex
	publishes map[string]int // Nats-Msg-Id -> publishes seen on out.> and fb.>
}

// NewPipeline starts the server and makes the streams.
func NewPipeline(t *testing.T) *Pipeline {
	t.Helper()
	srv := Start(t)
	nc, js := srv.Connect(t)
	for _, s := range []struct{ name, subj string }{{InStream, "in.>"}, {OutStream, "out.>"}, {FBStream, "fb.>"}} {
		CreateStream(t, js, jetstream.StreamConfig{
			Name: s.name, Subjects: []string{s.subj}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
		})
	}
	p := &Pipeline{T: t, Srv: srv, NC: nc, JS: js, publishes: map[string]int{}}
	sub, err := nc.Subscribe("*.events", func(m *nats.Msg) {
		if m.Subject == "in.events" {
			return
		}
		id := m.Header.Get(nats.MsgIdHdr)
		p.mu.Lock()
		p.publishes[id]++
		p.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	// Never drop a publish for being slow: the count is the evidence.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return p
}

// Env is the runner's environment for JetStream in and out; tests change
// or add what their scenario needs.
func (p *Pipeline) Env(name string) map[string]string {
	return map[string]string{
		"MV_NAME":                          name,
		"MV_SOURCE":                        "jetstream",
		"MV_SINK":                          "jetstream",
		"MV_JETSTREAM_URL":                 p.Srv.URL(),
		"MV_JETSTREAM_STREAM":              InStream,
		"MV_JETSTREAM_CONSUMER":            Consumer,
		"MV_JETSTREAM_SUBJECT":             "out.events",
		"MV_FALLBACK_JETSTREAM_SUBJECT":    "fb.events",
		"MV_JETSTREAM_ACK_WAIT":            "3s",
		"MV_JETSTREAM_RECONNECT_WAIT":      "100ms",
		"MV_JETSTREAM_NAK_DELAY":           "100ms",
		"MV_JETSTREAM_PUBLISH_MAX_PENDING": "4096",
		"MV_READ_BATCH_SIZE":               "500",
		"MV_READ_TIMEOUT":                  "200ms",
		"MV_PENDING_INTERVAL":              "200ms",
		"MV_SHUTDOWN_TIMEOUT":              "10s",
	}
}

// Value is the payload of input message i: "m-<i>", padded with x to size
// bytes.
func Value(i, size int) []byte {
	v := []byte("m-" + strconv.Itoa(i))
	for len(v) < size {
		v = append(v, 'x')
	}
	return v
}

// Publish puts messages [from, to) on the input stream, each with its own
// Nats-Msg-Id so a publish retried across a server outage is stored once,
// pausing tick after every batch. A batch is published again until the
// stream holds it.
func (p *Pipeline) Publish(ctx context.Context, from, to, batch, size int, tick time.Duration) error {
	for i := from; i < to; {
		end := min(i+batch, to)
		for j := i; j < end; {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, err := p.JS.PublishAsync("in.events", Value(j, size), jetstream.WithMsgID("p-"+strconv.Itoa(j))); err != nil {
				time.Sleep(50 * time.Millisecond) // the server may be restarting
				continue
			}
			j++
		}
		select {
		case <-p.JS.PublishAsyncComplete():
		case <-time.After(10 * time.Second):
		}
		// Every message of the batch must be stored before the next; what
		// is not (its ack lost to an outage) is published again, and its ID
		// keeps it from being stored twice.
		if p.StreamMsgs(InStream) < uint64(end) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		i = end
		if tick > 0 {
			select {
			case <-time.After(tick):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// PublishAll puts n messages of size bytes on the input stream.
func (p *Pipeline) PublishAll(n, size int) {
	p.T.Helper()
	if err := p.Publish(context.Background(), 0, n, 1000, size, 0); err != nil {
		p.T.Fatal(err)
	}
}

// StreamMsgs is the number of messages stream name holds; 0 if it cannot
// be read (the server may be down).
func (p *Pipeline) StreamMsgs(name string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := p.JS.Stream(ctx, name)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// ConsumerInfo reads the runner's consumer.
func (p *Pipeline) ConsumerInfo() (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := p.JS.Consumer(ctx, InStream, Consumer)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// Idle reports whether the runner's consumer has delivered everything and
// has nothing unacked.
func (p *Pipeline) Idle() bool {
	info, err := p.ConsumerInfo()
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// WaitSettled waits until the output and fallback streams together hold at
// least n messages and the consumer is idle.
func (p *Pipeline) WaitSettled(n int, timeout time.Duration) {
	p.T.Helper()
	testutil.WaitFor(p.T, timeout, fmt.Sprintf("%d messages in %s+%s and the consumer idle", n, OutStream, FBStream), func() bool {
		return p.StreamMsgs(OutStream)+p.StreamMsgs(FBStream) >= uint64(n) && p.Idle()
	})
}

// Redeliveries is the number of deliveries beyond one per input message:
// the consumer's delivery sequence counts every delivery.
func (p *Pipeline) Redeliveries(n int) int {
	info, err := p.ConsumerInfo()
	if err != nil {
		p.T.Fatalf("consumer info: %v", err)
	}
	return int(info.Delivered.Consumer) - n
}

// Tally is the count at the end of a JetStream scenario.
type Tally struct {
	N                int
	Out, Fallback    map[string]bool // input ids stored in each stream
	Lost             int             // input ids in neither stream
	InBoth           int             // input ids in both streams
	StoredDups       int             // messages stored twice in one stream
	Publishes        int             // publishes seen on out.> and fb.>
	DuplicatePublish int             // publishes beyond one per stored id
}

// Count reads every stream and checks that each stored message is an input
// message with its value (when checkValue) under Nats-Msg-Id IN:<seq>.
func (p *Pipeline) Count(n int, checkValue bool) Tally {
	p.T.Helper()
	in := ReadAll(p.T, p.JS, InStream)
	if len(in) != n {
		p.T.Fatalf("input stream holds %d messages, want %d", len(in), n)
	}
	want := make(map[string]string, n)
	for _, m := range in {
		meta, err := m.Metadata()
		if err != nil {
			p.T.Fatal(err)
		}
		want[InStream+":"+strconv.FormatUint(meta.Sequence.Stream, 10)] = string(m.Data())
	}
	tl := Tally{N: n, Out: map[string]bool{}, Fallback: map[string]bool{}}
	for _, s := range []struct {
		name string
		into map[string]bool
	}{{OutStream, tl.Out}, {FBStream, tl.Fallback}} {
		for _, m := range ReadAll(p.T, p.JS, s.name) {
			id := m.Headers().Get(nats.MsgIdHdr)
			v, ok := want[id]
			if !ok {
				p.T.Fatalf("%s holds %q, which is no input message", s.name, id)
			}
			if checkValue && v != string(m.Data()) {
				p.T.Fatalf("%s holds %s with value %.40q, want %.40q", s.name, id, m.Data(), v)
			}
			if s.into[id] {
				tl.StoredDups++
			}
			s.into[id] = true
		}
	}
	for id := range want {
		switch {
		case tl.Out[id] && tl.Fallback[id]:
			tl.InBoth++
		case !tl.Out[id] && !tl.Fallback[id]:
			tl.Lost++
		}
	}
	p.mu.Lock()
	for _, c := range p.publishes {
		tl.Publishes += c
	}
	p.mu.Unlock()
	tl.DuplicatePublish = tl.Publishes - len(tl.Out) - len(tl.Fallback)
	return tl
}

// MustBeComplete fails the test unless every input message is stored once.
func (tl Tally) MustBeComplete(t *testing.T) {
	t.Helper()
	if tl.Lost > 0 || tl.StoredDups > 0 || tl.InBoth > 0 {
		t.Fatalf("of %d input messages: %d lost, %d stored twice in one stream, %d in both the output and the fallback stream", tl.N, tl.Lost, tl.StoredDups, tl.InBoth)
	}
	t.Logf("all %d input messages stored once: %d in %s, %d in %s; %d publishes seen (%d beyond one per message, de-duplicated by the streams)",
		tl.N, len(tl.Out), OutStream, len(tl.Fallback), FBStream, tl.Publishes, tl.DuplicatePublish)
}
