// Package faults_test is the fault, bad-input and security suite: it runs
// the runner binary against real peers (an in-process nats-server with
// JetStream, Numaflow SDK containers as processes, CloudEvents receivers and
// functions on 127.0.0.1), breaks one of them (kill -9, outage, timeouts,
// garbage, slow answers, protocol violations, SIGTERM in the middle), and
// ends every scenario by counting: each message the source produced is in
// the sink or the fallback sink or was dropped on purpose, and the source
// has nothing left unacked. RELIABILITY.md holds the figures of a real run
// and the command that reproduces them.
//
// The default run fits in a few minutes on 2 cores; MV_FAULTS_LONG=1 runs
// the longer variants (more messages, more kills). MV_FAULTS_REPORT=<file>
// appends one JSON line per scenario with its figures.
package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// long reports whether the longer variants were asked for.
func long() bool { return os.Getenv("MV_FAULTS_LONG") == "1" }

// pick returns short, or long when MV_FAULTS_LONG=1.
func pick(short, longer int) int {
	if long() {
		return longer
	}
	return short
}

// result is one row of the reliability table.
type result struct {
	Scenario   string `json:"scenario"`
	Messages   int    `json:"messages"`
	Lost       int    `json:"lost"`
	Duplicated string `json:"duplicated"`
	Recovery   string `json:"recovery"`
	Notes      string `json:"notes,omitempty"`
}

var reportMu sync.Mutex

// report logs a scenario's figures and, with MV_FAULTS_REPORT set, appends
// them to that file as one JSON line.
func report(t *testing.T, r result) {
	t.Helper()
	t.Logf("RELIABILITY | %s | %d | %d | %s | %s | %s", r.Scenario, r.Messages, r.Lost, r.Duplicated, r.Recovery, r.Notes)
	path := os.Getenv("MV_FAULTS_REPORT")
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	defer f.Close()
	b, _ := json.Marshal(r)
	fmt.Fprintf(f, "%s\n", b)
}

// round formats a duration for the table.
func round(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// noRaces fails the test if a process built with -race reported a race.
func noRaces(t *testing.T, procs ...*testutil.Process) {
	t.Helper()
	for _, p := range procs {
		if p != nil && strings.Contains(p.Stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", p.Name, tail(p.Stderr.String(), 8000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// sigterm sends SIGTERM and returns the exit code and how long the exit took.
func sigterm(t *testing.T, p *testutil.Process, wait time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.Wait(wait)
	return code, time.Since(start)
}

// vmRSS returns the resident set size of a process in bytes, from /proc.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// Stream and subject names of the JetStream fixture.
const (
	inStream  = "IN"
	outStream = "OUT"
	fbStream  = "FB"
	consumer  = "runner"
)

// jsFixture is a nats-server with an input stream the runner reads, an
// output stream and a fallback stream it writes (both de-duplicating on
// Nats-Msg-Id), and a plain subscriber that sees every publish to them,
// de-duplicated or not.
type jsFixture struct {
	t   *testing.T
	srv *natstest.Server
	nc  *nats.Conn
	js  jetstream.JetStream

	mu        sync.Mutex
	publishes map[string]int // Nats-Msg-Id -> publishes seen on out.> and fb.>
}

func newJS(t *testing.T) *jsFixture {
	t.Helper()
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	for _, s := range []struct{ name, subj string }{{inStream, "in.>"}, {outStream, "out.>"}, {fbStream, "fb.>"}} {
		natstest.CreateStream(t, js, jetstream.StreamConfig{
			Name: s.name, Subjects: []string{s.subj}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
		})
	}
	f := &jsFixture{t: t, srv: srv, nc: nc, js: js, publishes: map[string]int{}}
	sub, err := nc.Subscribe("*.events", func(m *nats.Msg) {
		if m.Subject == "in.events" {
			return
		}
		id := m.Header.Get(nats.MsgIdHdr)
		f.mu.Lock()
		f.publishes[id]++
		f.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	// Never drop a publish for being slow: the count is the evidence.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return f
}

// env is the runner's environment for JetStream in, sink chosen by the test.
func (f *jsFixture) env() map[string]string {
	return map[string]string{
		"MV_NAME":                          "faults",
		"MV_SOURCE":                        "jetstream",
		"MV_SINK":                          "jetstream",
		"MV_JETSTREAM_URL":                 f.srv.URL(),
		"MV_JETSTREAM_STREAM":              inStream,
		"MV_JETSTREAM_CONSUMER":            consumer,
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

// value is the payload of input message i, size bytes or more.
func value(i, size int) []byte {
	v := []byte("m-" + strconv.Itoa(i))
	for len(v) < size {
		v = append(v, 'x')
	}
	return v
}

// publish puts messages [from, to) on the input stream, each with its own
// Nats-Msg-Id so a publish retried is stored once, pausing tick after every
// batch. A batch is published again until the stream holds it.
func (f *jsFixture) publish(ctx context.Context, from, to, batch, size int, tick time.Duration) error {
	for i := from; i < to; {
		end := min(i+batch, to)
		for j := i; j < end; {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, err := f.js.PublishAsync("in.events", value(j, size), jetstream.WithMsgID("p-"+strconv.Itoa(j))); err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			j++
		}
		select {
		case <-f.js.PublishAsyncComplete():
		case <-time.After(10 * time.Second):
		}
		if f.streamMsgs(inStream) < uint64(end) {
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

// publishAll puts n messages of size bytes on the input stream.
func (f *jsFixture) publishAll(n, size int) {
	f.t.Helper()
	if err := f.publish(context.Background(), 0, n, 1000, size, 0); err != nil {
		f.t.Fatal(err)
	}
}

func (f *jsFixture) streamMsgs(name string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := f.js.Stream(ctx, name)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

func (f *jsFixture) consumerInfo() (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := f.js.Consumer(ctx, inStream, consumer)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// idle reports whether the runner's consumer has delivered everything and
// has nothing unacked.
func (f *jsFixture) idle() bool {
	info, err := f.consumerInfo()
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// waitSettled waits until the output and fallback streams together hold at
// least n messages and the consumer is idle.
func (f *jsFixture) waitSettled(n int, timeout time.Duration) {
	f.t.Helper()
	testutil.WaitFor(f.t, timeout, fmt.Sprintf("%d messages in %s+%s and the consumer idle", n, outStream, fbStream), func() bool {
		return f.streamMsgs(outStream)+f.streamMsgs(fbStream) >= uint64(n) && f.idle()
	})
}

// redeliveries is the number of deliveries beyond one per input message:
// the consumer's delivery sequence counts every delivery.
func (f *jsFixture) redeliveries(n int) int {
	info, err := f.consumerInfo()
	if err != nil {
		f.t.Fatalf("consumer info: %v", err)
	}
	return int(info.Delivered.Consumer) - n
}

// tally is the count at the end of a JetStream scenario.
type tally struct {
	n                int
	out, fallback    map[string]bool // input ids stored in each stream
	lost             int             // input ids in neither stream
	inBoth           int             // input ids in both streams
	storedDups       int             // messages stored twice in one stream
	publishes        int             // publishes seen on out.> and fb.>
	duplicatePublish int             // publishes beyond one per stored id
}

// count reads every stream and checks that each stored message is an input
// message with its value (when checkValue) under Nats-Msg-Id IN:<seq>.
func (f *jsFixture) count(n int, checkValue bool) tally {
	f.t.Helper()
	in := natstest.ReadAll(f.t, f.js, inStream)
	if len(in) != n {
		f.t.Fatalf("input stream holds %d messages, want %d", len(in), n)
	}
	want := make(map[string]string, n)
	for _, m := range in {
		meta, err := m.Metadata()
		if err != nil {
			f.t.Fatal(err)
		}
		want[inStream+":"+strconv.FormatUint(meta.Sequence.Stream, 10)] = string(m.Data())
	}
	tl := tally{n: n, out: map[string]bool{}, fallback: map[string]bool{}}
	for _, s := range []struct {
		name string
		into map[string]bool
	}{{outStream, tl.out}, {fbStream, tl.fallback}} {
		for _, m := range natstest.ReadAll(f.t, f.js, s.name) {
			id := m.Headers().Get(nats.MsgIdHdr)
			v, ok := want[id]
			if !ok {
				f.t.Fatalf("%s holds %q, which is no input message", s.name, id)
			}
			if checkValue && v != string(m.Data()) {
				f.t.Fatalf("%s holds %s with value %.40q, want %.40q", s.name, id, m.Data(), v)
			}
			if s.into[id] {
				tl.storedDups++
			}
			s.into[id] = true
		}
	}
	for id := range want {
		switch {
		case tl.out[id] && tl.fallback[id]:
			tl.inBoth++
		case !tl.out[id] && !tl.fallback[id]:
			tl.lost++
		}
	}
	f.mu.Lock()
	for _, c := range f.publishes {
		tl.publishes += c
	}
	f.mu.Unlock()
	tl.duplicatePublish = tl.publishes - len(tl.out) - len(tl.fallback)
	return tl
}

// mustBeComplete fails the test unless every input message is stored once.
func (tl tally) mustBeComplete(t *testing.T) {
	t.Helper()
	if tl.lost > 0 || tl.storedDups > 0 || tl.inBoth > 0 {
		t.Fatalf("of %d input messages: %d lost, %d stored twice in one stream, %d in both the output and the fallback stream", tl.n, tl.lost, tl.storedDups, tl.inBoth)
	}
	t.Logf("all %d input messages stored once: %d in %s, %d in %s; %d publishes seen (%d beyond one per message, de-duplicated by the streams)",
		tl.n, len(tl.out), outStream, len(tl.fallback), fbStream, tl.publishes, tl.duplicatePublish)
}

// totals fetches /status; an error is reported as a zero status.
func totals(p *testutil.Process) (read, acked, written int64) {
	st, err := p.Status()
	if err != nil {
		return -1, -1, -1
	}
	return st.Totals.Read, st.Totals.Acked, st.Totals.Written
}

// lastTotals reads the read and acked totals of the runner's "runner
// stopped" log line, for a runner that has exited.
func lastTotals(t *testing.T, p *testutil.Process) (read, acked int64) {
	t.Helper()
	read, acked = -1, -1
	for _, l := range strings.Split(p.Stderr.String(), "\n") {
		var line struct {
			Msg   string `json:"msg"`
			Read  int64  `json:"read"`
			Acked int64  `json:"acked"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "runner stopped" {
			read, acked = line.Read, line.Acked
		}
	}
	if read < 0 {
		t.Fatalf("no \"runner stopped\" line in the runner's log:\n%s", tail(p.Stderr.String(), 3000))
	}
	return read, acked
}

// goMetric reads an unlabelled metric (such as go_goroutines) from the
// runner's /metrics; -1 if it is missing.
func goMetric(p *testutil.Process, name string) float64 {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.AdminURL + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// checkShutdown judges a SIGTERM whose drain could not finish (a peer was
// down): the contract is exit 0 within MV_SHUTDOWN_TIMEOUT (drain and close
// share the budget; unfinished work is handed back, never acked). It
// returns a note for the table.
func checkShutdown(t *testing.T, code int, took, budget time.Duration, why string) string {
	t.Helper()
	if code != 0 || took > budget+2*time.Second {
		t.Fatalf("SIGTERM with the %s: exit %d after %v; want 0 within MV_SHUTDOWN_TIMEOUT=%v", why, code, took.Round(time.Millisecond), budget)
	}
	return fmt.Sprintf("exit %d after %s (MV_SHUTDOWN_TIMEOUT=%v)", code, round(took), budget)
}
