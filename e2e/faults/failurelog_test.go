package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// failureLines counts the runner's log lines with message msg at level,
// and sums their "count" fields: the failures they stand for.
func failureLines(t *testing.T, p *testutil.Process, level, msg string) (lines int, count int64) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(p.Stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Level, Msg string
			Count      *int64
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != msg {
			continue
		}
		if l.Level != level || l.Count == nil {
			t.Fatalf("%q logged at %s with count %v, want %s with a count:\n%s", msg, l.Level, l.Count, level, sc.Text())
		}
		lines++
		count += *l.Count
	}
	return lines, count
}

// deleteOutStream makes the sink's subject one no stream captures:
// every publish fails ("no responders").
func deleteOutStream(t *testing.T, f *jsFixture) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.JS.DeleteStream(ctx, outStream); err != nil {
		t.Fatal(err)
	}
}

// createOutStream creates the output stream again, as the fixture does.
func createOutStream(t *testing.T, f *jsFixture) {
	natstest.CreateStream(t, f.JS, jetstream.StreamConfig{Name: outStream, Subjects: []string{"out.>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute})
}

// Writes to a subject no stream captures fail and are retried: the log
// says so at warn with counts, a few lines for hundreds of failures, and
// once a stream captures the subject every message is written.
func TestSinkFailuresRetriedAreLogged(t *testing.T) {
	const n = 500
	f := newJS(t)
	env := f.Env("faults")
	env["MV_RETRY_INTERVAL"] = "100ms"
	p := startRunner(t, env)
	deleteOutStream(t, f)
	f.PublishAll(n, 64)
	testutil.WaitFor(t, 60*time.Second, "two warn lines of retried writes", func() bool {
		lines, _ := failureLines(t, p, "warn", "sink write failed, retrying")
		return lines >= 2
	})
	createOutStream(t, f)
	captured := time.Now()
	f.WaitSettled(n, 60*time.Second)
	recovered := time.Since(captured)
	tl := f.Count(n, true)
	tl.MustBeComplete(t)
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	stopClean(t, p)
	lines, count := failureLines(t, p, "warn", "sink write failed, retrying")
	// Every failed write is in a line's count, and the lines are few:
	// one at once, then one per 5s at most.
	if count != st.Totals.SinkErrors || count < n || lines > int(count/10) {
		t.Fatalf("%d warn lines counting %d failed writes; the runner counted %d sink errors", lines, count, st.Totals.SinkErrors)
	}
	report(t, result{
		Scenario: "JetStream sink subject captured by no stream (writes fail, retried), then a stream created", Messages: n, Lost: tl.Lost,
		Duplicated: fmt.Sprintf("%d stored twice", tl.StoredDups), Recovery: round(recovered),
		Notes: fmt.Sprintf("%d failed writes in %d warn lines with counts; recovery: stream created to all written", count, lines),
	})
}

// A CloudEvents function answering 500 to everything with
// MV_ON_FAILURE=drop: every message is dropped after its retry step, and
// the log has error lines whose counts add up to the dropped messages.
func TestTransformerDropsAreLogged(t *testing.T) {
	const n = 500
	f := newJS(t)
	fn := startCEFunction(t, func(int) bool { return true }, func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	env := transformerEnv(f, fn.URL)
	env["MV_ON_FAILURE"] = "drop"
	env["MV_RETRY_STEPS"] = "1"
	f.PublishAll(n, 64)
	p := startRunner(t, env)
	testutil.WaitFor(t, 60*time.Second, "the consumer idle", f.Idle)
	stopClean(t, p)
	stop := testutil.StopLine(t, p.Stderr.String())
	lines, count := failureLines(t, p, "error", "transformer (cloudevents) failed, message dropped")
	if stop.Dropped != n || stop.Acked != n || count != n || lines == 0 || lines > 10 {
		t.Fatalf("%d error lines counting %d dropped; the runner acked %d and dropped %d of %d", lines, count, stop.Acked, stop.Dropped, n)
	}
	if out := f.StreamMsgs(outStream); out != 0 {
		t.Fatalf("%d messages in the output stream, want 0: every one was answered 500", out)
	}
	report(t, result{
		Scenario: "CloudEvents function answering 500 to everything, MV_ON_FAILURE=drop, 1 step", Messages: n, Lost: 0,
		Duplicated: "0", Recovery: "-",
		Notes: fmt.Sprintf("all %d dropped on purpose, in %d error lines with counts (%s)", count, lines, fn.stats()),
	})
}

// Writes that fail with MV_ON_FAILURE=fallback go to the fallback sink
// after their retry step: the log has error lines naming the fallback
// sink whose counts add up to the messages sent there.
func TestSinkFallbacksAreLogged(t *testing.T) {
	const n = 500
	f := newJS(t)
	env := f.Env("faults")
	env["MV_ON_FAILURE"] = "fallback"
	env["MV_FALLBACK_SINK"] = "jetstream"
	env["MV_RETRY_STEPS"] = "1"
	env["MV_RETRY_INTERVAL"] = "20ms"
	p := startRunner(t, env)
	deleteOutStream(t, f)
	f.PublishAll(n, 64)
	testutil.WaitFor(t, 60*time.Second, "all in the fallback stream and the consumer idle", func() bool {
		return f.StreamMsgs(fbStream) >= n && f.Idle()
	})
	stopClean(t, p)
	createOutStream(t, f) // for Count
	tl := f.Count(n, true)
	tl.MustBeComplete(t)
	lines, count := failureLines(t, p, "error", "sink write failed, message sent to the fallback sink")
	if len(tl.Fallback) != n || count != n || lines == 0 || lines > 10 {
		t.Fatalf("%d error lines counting %d sent to the fallback sink; the fallback stream holds %d of %d", lines, count, len(tl.Fallback), n)
	}
	report(t, result{
		Scenario: "JetStream sink subject captured by no stream, MV_ON_FAILURE=fallback, 1 step", Messages: n, Lost: tl.Lost,
		Duplicated: fmt.Sprintf("%d stored twice", tl.StoredDups), Recovery: "-",
		Notes: fmt.Sprintf("all %d in the fallback stream, in %d error lines with counts", count, lines),
	})
}
