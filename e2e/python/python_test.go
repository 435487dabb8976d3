// Package python_test runs the runner binary with Numaflow containers
// written the way the Python SDK (pynumaflow) writes them (testutil/pyudf):
// a source, a source transformer, a batch map, a sink and a fallback sink,
// each a separate Python process serving grpc C-core's HTTP/2 on a Unix
// socket. It checks delivery by counting: every message the source made is
// acked, and acked only once its outputs were written; the sink and the
// fallback sink (for what the sink answers FALLBACK) hold each output, as
// the transformer and the map make them; no container is ever given more
// concurrency than Numaflow gives it (pyudf fails the test if one is);
// and nothing is lost when the sink is killed and comes back.
package python_test

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	mappb "github.com/numaproj/numaflow-go/pkg/apis/proto/map/v1"
	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	stpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/internal/testutil/pyudf"
	"github.com/monovertex/monovertex/runner"
)

// The Python containers' rules (pycontainer.py): a value starting with
// "drop" is dropped by the transformer, one starting with "fanout" comes
// out of the transformer three times and out of the map three times for
// each of those, and the sink answers FALLBACK to one starting with
// "fallback", which the fallback sink then takes.
const (
	dropEvery     = 10 // n%10 == 0: "drop-n"
	fanoutEvery   = 10 // n%10 == 1: "fanout-n"
	fanout        = 3 * 3
	fallbackEvery = 7  // n%7 == 3, unless dropped or fanned out: "fallback-n"
	largeEvery    = 97 // n%97 == 5: 1 MiB
	epochMS       = 1_700_000_000_000
	// holdAt is the message whose batch the sink writes and then holds
	// unanswered until released, in the kill test: "hold-n".
	holdAt = 3_000*3/4 + 2
)

// value is message n's payload: its kind and number, then filler up to
// 1 KiB, or 1 MiB for every 97th, every byte of it tied to n; message
// hold's kind is "hold".
func value(n, hold int) []byte {
	prefix := "msg"
	switch {
	case n%dropEvery == 0:
		prefix = "drop"
	case n%fanoutEvery == 1:
		prefix = "fanout"
	case n%fallbackEvery == 3:
		prefix = "fallback"
	case n == hold:
		prefix = "hold"
	}
	v := fmt.Appendf(nil, "%s-%d|", prefix, n)
	size := 1 << 10
	if n%largeEvery == 5 {
		size = 1 << 20
	}
	cell := fmt.Appendf(nil, "%08x", n)
	for len(v) < size {
		v = append(v, cell...)
	}
	return v[:size]
}

// toFallback says whether message n's output goes to the fallback sink.
func toFallback(n int) bool {
	return n%dropEvery != 0 && n%fanoutEvery != 1 && n%fallbackEvery == 3
}

// outputs is how many outputs message n has at the sink or, for the
// fallback's, at the fallback sink.
func outputs(n int) int {
	switch {
	case n%dropEvery == 0:
		return 0
	case n%fanoutEvery == 1:
		return fanout
	}
	return 1
}

// numberOf is the n a payload was made for (with hold as value made it);
// -1 if it is not well made.
func numberOf(v []byte, hold int) int {
	_, rest, ok := bytes.Cut(v, []byte("-"))
	if !ok {
		return -1
	}
	num, _, ok := bytes.Cut(rest, []byte("|"))
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(string(num))
	if err != nil || !bytes.Equal(v, value(n, hold)) {
		return -1
	}
	return n
}

// pipeline is the runner and its five Python containers.
type pipeline struct {
	t     *testing.T
	py    string
	x     *testutil.Examples
	total int
	hold  int // the message whose value starts with "hold"; -1 for none

	source, sink, fallback *pyudf.Record
}

// start starts the five containers and the runner (env adds to its
// settings), and gives the source its first produce messages of total.
func start(t *testing.T, total, produce int, env map[string]string) *pipeline {
	p := &pipeline{t: t, py: pyudf.Python(t), x: testutil.NewExamples(t, "mvpy"), total: total, hold: -1}
	dir := p.x.Dir
	// Longer than a batch of 1 MiB fan-outs takes through the Python
	// processes under -race, so redelivery is for a stalled pipeline.
	p.source = pyudf.Start(t, p.py, "source", filepath.Join(dir, "source.sock"), filepath.Join(dir, "sourcer-server-info"), sourcepb.File_pkg_apis_proto_source_v1_source_proto,
		pyudf.AckTimeout(15*time.Second))
	pyudf.Start(t, p.py, "transformer", filepath.Join(dir, "sourcetransform.sock"), filepath.Join(dir, "sourcetransformer-server-info"), stpb.File_pkg_apis_proto_sourcetransform_v1_transform_proto)
	pyudf.Start(t, p.py, "batchmap", filepath.Join(dir, "batchmap.sock"), filepath.Join(dir, "mapper-server-info"), mappb.File_pkg_apis_proto_map_v1_map_proto)
	p.startSink()
	p.fallback = pyudf.Start(t, p.py, "fallback", filepath.Join(dir, "fb-sink.sock"), filepath.Join(dir, "fb-sinker-server-info"), sinkpb.File_pkg_apis_proto_sink_v1_sink_proto)
	p.produce(0, produce)
	settings := map[string]string{
		"MV_FALLBACK_SINK":    "udsink",
		"MV_TRANSFORMER":      "udtransformer",
		"MV_UDF":              "udmap",
		"MV_READ_BATCH_SIZE":  "100",
		"MV_INFLIGHT_BATCHES": "4",
	}
	maps.Copy(settings, env)
	p.x.StartRunner(p.x.RunnerEnv(settings))
	return p
}

// produce gives the source messages from to to-1.
func (p *pipeline) produce(from, to int) {
	values := make([][]byte, 0, to-from)
	for n := from; n < to; n++ {
		values = append(values, value(n, p.hold))
	}
	p.source.Produce(p.t, values)
}

func (p *pipeline) startSink() {
	dir := p.x.Dir
	p.sink = pyudf.Start(p.t, p.py, "sink", filepath.Join(dir, "sink.sock"), filepath.Join(dir, "sinker-server-info"), sinkpb.File_pkg_apis_proto_sink_v1_sink_proto)
}

// written returns, per message number, the distinct output IDs the sink
// and the fallback sink hold, checking each output against its input as
// the containers' rules carry it: the same bytes, keys, event time and
// headers, and the sink it belongs in.
func (p *pipeline) written() map[int]map[string]bool {
	p.t.Helper()
	out := map[int]map[string]bool{}
	for _, s := range []struct {
		name     string
		rec      *pyudf.Record
		fallback bool
	}{{"sink", p.sink, false}, {"fallback sink", p.fallback, true}} {
		for _, m := range s.rec.Messages(p.t) {
			n := numberOf(m.Value, p.hold)
			if n < 0 || n >= p.total {
				p.t.Fatalf("the %s holds %s, whose %d bytes no message of the source had: %.40q", s.name, m.ID, len(m.Value), m.Value)
			}
			if toFallback(n) != s.fallback {
				p.t.Fatalf("the %s holds %s of message %d, which the rules send to the other", s.name, m.ID, n)
			}
			checkOutput(p.t, n, m)
			if out[n] == nil {
				out[n] = map[string]bool{}
			}
			out[n][m.ID] = true
		}
	}
	return out
}

func checkOutput(t *testing.T, n int, m *runner.Message) {
	t.Helper()
	if outputs(n) == 0 {
		t.Fatalf("message %d was to be dropped, but the sink holds %s", n, m.ID)
	}
	if want := "k" + strconv.Itoa(n%3); len(m.Keys) != 1 || m.Keys[0] != want {
		t.Fatalf("output %s of message %d has keys %q, want [%s]", m.ID, n, m.Keys, want)
	}
	if got := m.EventTime.UnixMilli(); got != epochMS+int64(n) {
		t.Fatalf("output %s of message %d has event time %d, want %d", m.ID, n, got, epochMS+n)
	}
	if m.Headers["n"] != strconv.Itoa(n) {
		t.Fatalf("output %s of message %d has headers %v, want n=%d", m.ID, n, m.Headers, n)
	}
}

// checkNothingUnwrittenAcked checks, at this moment, that every acked
// message has all its outputs at the sink. The acks are read first:
// anything acked by then was written before.
func (p *pipeline) checkNothingUnwrittenAcked() int {
	p.t.Helper()
	acked := p.source.Acked(p.t)
	written := p.written()
	for n := range acked {
		if got, want := len(written[n]), outputs(n); got < want {
			p.t.Fatalf("message %d was acked with %d of its %d outputs written", n, got, want)
		}
	}
	return len(acked)
}

// verify waits until every message is acked and the source's pending is
// 0, checking all the while that nothing is acked before its outputs are
// written, then checks the sink's outputs against the rules exactly.
func (p *pipeline) verify(timeout time.Duration) {
	p.t.Helper()
	testutil.WaitFor(p.t, timeout, fmt.Sprintf("all %d messages acked", p.total), func() bool {
		p.x.RunnerAlive()
		return p.checkNothingUnwrittenAcked() == p.total
	})
	testutil.WaitFor(p.t, 30*time.Second, "the source's pending to reach 0", func() bool {
		st, err := p.x.Runner.Status()
		return err == nil && st.Pending == 0
	})
	p.checkNothingUnwrittenAcked()
	written := p.written()
	outs, fallbacks := 0, 0
	for n := 0; n < p.total; n++ {
		if got, want := len(written[n]), outputs(n); got != want {
			p.t.Fatalf("message %d has %d distinct outputs at the sinks, want %d", n, got, want)
		}
		outs += outputs(n)
		if toFallback(n) {
			fallbacks++
		}
	}
	if bad := p.source.NeverReadAcks(p.t); len(bad) > 0 {
		p.t.Fatalf("the runner acked offsets the source never served: %v", bad)
	}
	st, err := p.x.Runner.Status()
	if err != nil {
		p.t.Fatal(err)
	}
	if st.Totals.FallbackWritten < int64(fallbacks) {
		p.t.Fatalf("the runner counts %d written to the fallback sink, want at least %d", st.Totals.FallbackWritten, fallbacks)
	}
	p.t.Logf("%d messages acked, %d outputs at the sinks as the rules say (%d at the fallback sink); runner totals: read %d acked %d written %d fallback %d dropped %d sink errors %d",
		p.total, outs, fallbacks, st.Totals.Read, st.Totals.Acked, st.Totals.Written, st.Totals.FallbackWritten, st.Totals.Dropped, st.Totals.SinkErrors)
}

// checkSDKInfo checks that the runner exports numaflow-core's sdk_info for
// each container, as its server-info file says it.
func (p *pipeline) checkSDKInfo() {
	p.t.Helper()
	resp, err := http.Get(p.x.Runner.AdminURL + "/metrics")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	for _, typ := range []string{"sourcer", "sourcetransformer", "mapper", "sinker", "fb-sinker"} {
		want := `sdk_info{component="mono-vertex",component_name="local",language="python",type="` + typ + `",version="0.11.0"} 1`
		if !strings.Contains(string(body), want) {
			p.t.Errorf("/metrics has no %s", want)
		}
	}
}

// TestEveryMessageIsAckedOnceItsOutputsAreWritten runs 3,000 messages,
// 1 KiB and 1 MiB, through the five Python containers in batch and in
// streaming mode.
func TestEveryMessageIsAckedOnceItsOutputsAreWritten(t *testing.T) {
	for _, c := range []struct {
		mode string
		env  map[string]string
	}{
		{"batch", nil},
		{"streaming", map[string]string{"MV_STREAMING": "true", "MV_CONCURRENCY": "200"}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			const total = 3_000
			p := start(t, total, total, c.env)
			p.verify(150 * time.Second)
			p.checkSDKInfo()
			p.x.StopRunner()
		})
	}
}

// TestASinkKilledMidStreamIsWaitedForAndNothingIsLost kills the Python
// sink (SIGKILL) in the middle of a batch: once a quarter of the messages
// are acked, the rest are produced, and the sink has written, but holds
// unanswered, the batch with message holdAt. It is started again: the
// same runner waits for it, acks nothing it did not hear written (the held
// batch's messages included), and delivers everything.
func TestASinkKilledMidStreamIsWaitedForAndNothingIsLost(t *testing.T) {
	const total = 3_000
	// A Python process takes over 30 s (the default) to start again on a
	// loaded 2-core machine (a run beside the cluster suite gave up on it);
	// waiting is what this test shows, not how long.
	p := start(t, total, total/4, map[string]string{"MV_UDF_RECONNECT_TIMEOUT": "180s"})
	testutil.WaitFor(t, 90*time.Second, "the first quarter acked", func() bool {
		p.x.RunnerAlive()
		return p.checkNothingUnwrittenAcked() == total/4
	})
	p.hold = holdAt
	p.produce(total/4, total)
	testutil.WaitFor(t, 90*time.Second, fmt.Sprintf("the sink to write message %d's batch and hold it", holdAt), func() bool {
		p.x.RunnerAlive()
		return len(p.written()[holdAt]) > 0
	})
	time.Sleep(200 * time.Millisecond) // the runner has nothing to hear; it must not ack
	if n := p.source.Acked(t)[holdAt]; n != 0 {
		t.Fatalf("message %d was acked while its batch was still unanswered", holdAt)
	}
	p.sink.Process.Kill()
	testutil.WaitFor(t, 10*time.Second, "/readyz to report the sink away", func() bool { return p.x.Runner.Readyz() == http.StatusServiceUnavailable })
	acked := p.checkNothingUnwrittenAcked()
	time.Sleep(time.Second)
	p.checkNothingUnwrittenAcked()
	if n := p.source.Acked(t)[holdAt]; n != 0 {
		t.Fatalf("message %d, written by a sink that died before it answered, was acked", holdAt)
	}
	p.sink.Release(t)
	restarted := time.Now()
	p.startSink()
	p.verify(120 * time.Second)
	t.Logf("all %d messages final %v after the sink was started again", total, time.Since(restarted).Round(time.Millisecond))
	if p.x.Runner.Exited() {
		t.Fatalf("the runner exited")
	}
	if !strings.Contains(p.x.Runner.Stderr.String(), "reconnected to Numaflow container") {
		t.Fatalf("no reconnect logged")
	}
	st, err := p.x.Runner.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.SinkErrors == 0 {
		t.Fatalf("no sink error counted, though the sink died in the middle of a batch")
	}
	t.Logf("%d of %d acked when the sink was killed", acked, total)
	p.x.StopRunner()
}
