package runner

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// fakeFailureLog is a failure log on an observed logger and a clock the
// test moves.
func fakeFailureLog() (*failureLog, *observer.ObservedLogs, *time.Time) {
	core, logs := observer.New(zapcore.DebugLevel)
	f := newFailureLog(zap.New(core).Sugar())
	now := time.Unix(1_000_000, 0)
	f.now = func() time.Time { return now }
	return f, logs, &now
}

// lineCounts sums the "count" fields of the lines with message msg.
func lineCounts(t *testing.T, logs *observer.ObservedLogs, msg string) (lines int, total int64) {
	t.Helper()
	for _, e := range logs.FilterMessage(msg).All() {
		c, ok := e.ContextMap()["count"].(int64)
		if !ok {
			t.Fatalf("line %q has no count: %v", msg, e.ContextMap())
		}
		lines++
		total += c
	}
	return lines, total
}

func TestFailureLogBoundsLinesAndKeepsCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		// errOf is the error of failure i.
		errOf func(i int) error
		// id is the ID of failure i's message, "" for none.
		id func(i int) string
		// maxLines bounds the lines of 10,000 failures over 20s.
		maxLines int
	}{
		{"one error", func(int) error { return errors.New("broker down") }, nil, 1 + 4 + 1},
		{"ten errors", func(i int) error { return errors.New("error " + strconv.Itoa(i%10)) }, nil, 10 * (1 + 4 + 1)},
		// An error naming the failed message is one kind without its ID.
		{"an error naming its message", func(i int) error { return errors.New("publish m-" + strconv.Itoa(i) + ": no responders") },
			func(i int) string { return "m-" + strconv.Itoa(i) }, 1 + 4 + 1},
		// Distinct errors past the cap are counted together.
		{"an error per message", func(i int) error { return errors.New("message " + strconv.Itoa(i)) }, nil, (maxFailureKinds + 1) * (1 + 4 + 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, logs, now := fakeFailureLog()
			const n = 10_000
			for i := range n {
				// 10,000 failures over 20s, flushed as run's ticker would.
				*now = now.Add(2 * time.Millisecond)
				id := ""
				if tc.id != nil {
					id = tc.id(i)
				}
				f.warn("sink write failed, retrying", tc.errOf(i), id, 1)
				if i%2500 == 2499 {
					f.flush(false)
				}
			}
			f.flush(true)
			lines, total := lineCounts(t, logs, "sink write failed, retrying")
			if total != n || lines > tc.maxLines || lines == 0 {
				t.Fatalf("%d lines counting %d failures; want at most %d lines counting %d", lines, total, tc.maxLines, n)
			}
			if len(f.kinds) > maxFailureKinds {
				t.Fatalf("%d kinds tracked, want at most %d", len(f.kinds), maxFailureKinds)
			}
			t.Logf("%d failures: %d lines", n, lines)
		})
	}
}

func TestFailureLogLevelsAndFirstLineAtOnce(t *testing.T) {
	f, logs, now := fakeFailureLog()
	boom := errors.New("HTTP 500")
	f.error("transformer failed, message dropped", boom, "", 3)
	f.error("transformer failed, message dropped", boom, "", 4)
	f.warn("sink write failed, retrying", boom, "", 1)
	// The first of each kind is logged at once, with its count.
	if got := logs.Len(); got != 2 {
		t.Fatalf("%d lines before a period passed, want 2 (the first of each kind)", got)
	}
	first := logs.All()[0]
	if first.Level != zapcore.ErrorLevel || first.ContextMap()["count"] != int64(3) || first.ContextMap()["error"] != "HTTP 500" {
		t.Fatalf("first line %v %v", first.Level, first.ContextMap())
	}
	if l := logs.All()[1]; l.Level != zapcore.WarnLevel {
		t.Fatalf("a retried failure logged at %v, want warn", l.Level)
	}
	// The 4 since are logged once the period has passed.
	*now = now.Add(failureLogPeriod)
	f.flush(false)
	if lines, total := lineCounts(t, logs, "transformer failed, message dropped"); lines != 2 || total != 7 {
		t.Fatalf("dropped: %d lines counting %d, want 2 counting 7", lines, total)
	}
	// A kind quiet for a period is forgotten: its next failure is
	// logged at once.
	*now = now.Add(failureLogPeriod)
	f.flush(false)
	f.error("transformer failed, message dropped", boom, "", 1)
	if lines, total := lineCounts(t, logs, "transformer failed, message dropped"); lines != 3 || total != 8 {
		t.Fatalf("after a quiet period: %d lines counting %d, want 3 counting 8", lines, total)
	}
}
