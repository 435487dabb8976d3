package log_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	logsink "github.com/monovertex/monovertex/adapters/sink/log"
	"github.com/monovertex/monovertex/runner"
)

// flakyWriter takes up to room bytes, then fails every write with err
// (after taking what fits) until room is raised again.
type flakyWriter struct {
	out  bytes.Buffer
	room int
	err  error
}

func (w *flakyWriter) Write(p []byte) (int, error) {
	if len(p) <= w.room {
		w.room -= len(p)
		return w.out.Write(p)
	}
	n := w.room
	w.out.Write(p[:n])
	w.room = 0
	return n, w.err
}

func messages(from, n int) []*runner.Message {
	msgs := make([]*runner.Message, n)
	for i := range msgs {
		msgs[i] = &runner.Message{ID: "m" + strconv.Itoa(from+i), Value: []byte("value of " + strconv.Itoa(from+i)), EventTime: time.Unix(0, 0)}
	}
	return msgs
}

// formats are the sink's line formats. Everything but the line is the
// same in each, so the tests of failing outputs run in both.
var formats = []struct {
	name string
	new  func(w io.Writer) *logsink.Sink
	// id is the message ID of a line, failing on one that is not a whole
	// line of the format.
	id func(t *testing.T, line string) string
}{
	{"runner", func(w io.Writer) *logsink.Sink { return logsink.New(w, 256, "sink") }, runnerLineID},
	{"numaflow", func(w io.Writer) *logsink.Sink { return logsink.NewNumaflow(w, nil) }, numaflowLineID},
}

func runnerLineID(t *testing.T, l string) string {
	t.Helper()
	f := strings.Fields(l)
	if len(f) < 5 || f[0] != "sink" || !strings.HasPrefix(f[1], "id=") || !strings.Contains(l, " value=\"") || !strings.HasSuffix(l, "\"") {
		t.Fatalf("malformed line %q", l)
	}
	id, err := strconv.Unquote(strings.TrimPrefix(f[1], "id="))
	if err != nil {
		t.Fatalf("line %q: %v", l, err)
	}
	return id
}

func numaflowLineID(t *testing.T, l string) string {
	t.Helper()
	var rec struct{ Timestamp, Level, Message, Target string }
	if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Level != "INFO" || rec.Target != "numaflow_core::sinker::sink::log" || !strings.HasPrefix(rec.Message, "Payload - ") {
		t.Fatalf("malformed line %q (%v)", l, err)
	}
	_, id, ok := cutLast(rec.Message, " ID - ")
	if !ok {
		t.Fatalf("line %q has no ID", l)
	}
	return id
}

// cutLast is strings.Cut at the last sep: a payload may hold sep, an ID
// from these tests does not.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// ids returns the IDs of the output's lines, failing on a line that is not
// a whole line of the sink.
func ids(t *testing.T, out string, id func(*testing.T, string) string) []string {
	t.Helper()
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		got = append(got, id(t, l))
	}
	return got
}

func TestWriteFormatsOneLinePerMessage(t *testing.T) {
	var out bytes.Buffer
	s := logsink.New(&out, 4, "sink")
	msgs := []*runner.Message{
		{ID: "a", Keys: []string{"k1", "k2"}, Value: []byte("hello"), EventTime: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)},
		{ID: "b", Value: []byte{0xff, 0xfe}, EventTime: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)},
	}
	res, err := s.Write(context.Background(), msgs)
	if err != nil || len(res) != 2 {
		t.Fatalf("write: %v, %d results", err, len(res))
	}
	want := `sink id="a" keys="k1,k2" event_time=2024-01-02T03:04:05Z bytes=5 value="hell"...` + "\n" +
		`sink id="b" event_time=2024-01-02T03:04:05Z bytes=2 value=(binary)` + "\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestFullOutputIsRetriedAndRecovers(t *testing.T) {
	for _, f := range formats {
		for _, tc := range []struct {
			name string
			room int // bytes the output takes before it fills
			n    int // messages in the batch
		}{
			{"full before the first byte", 0, 10},
			{"full in the middle of a line", 100, 10},
			{"full on a line boundary", 0, 10}, // room set below to a line's length
			{"full after several chunks", 200 << 10, 5000},
		} {
			t.Run(f.name+"/"+tc.name, func(t *testing.T) {
				w := &flakyWriter{room: tc.room, err: syscall.ENOSPC}
				s := f.new(w)
				msgs := messages(0, tc.n)
				if tc.name == "full on a line boundary" {
					var one bytes.Buffer
					f.new(&one).Write(context.Background(), msgs[:1])
					w.room = one.Len()
				}
				ctx := context.Background()
				for attempt := 0; attempt < 3; attempt++ {
					if _, err := s.Write(ctx, msgs); err == nil || !errors.Is(err, syscall.ENOSPC) || runner.IsFatal(err) {
						t.Fatalf("write to a full output: %v, want a retryable ENOSPC error", err)
					}
					if err := s.Ready(ctx); err == nil {
						t.Fatalf("ready while the output is full")
					}
				}
				w.room = 1 << 30 // space freed
				if _, err := s.Write(ctx, msgs); err != nil {
					t.Fatalf("write after space was freed: %v", err)
				}
				if err := s.Ready(ctx); err != nil {
					t.Fatalf("not ready after a write succeeded: %v", err)
				}
				got := ids(t, w.out.String(), f.id)
				if len(got) != tc.n {
					t.Fatalf("%d lines for %d messages", len(got), tc.n)
				}
				for i, id := range got {
					if id != "m"+strconv.Itoa(i) {
						t.Fatalf("line %d is %s, want m%d", i, id, i)
					}
				}
			})
		}
	}
}

func TestFailedCallRetriedByAnotherBatchFirst(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			w := &flakyWriter{room: 150, err: syscall.ENOSPC}
			s := f.new(w)
			ctx := context.Background()
			a, b := messages(0, 5), messages(5, 5)
			if _, err := s.Write(ctx, a); err == nil {
				t.Fatal("write to a full output succeeded")
			}
			w.room = 1 << 30
			for _, batch := range [][]*runner.Message{b, a} {
				if _, err := s.Write(ctx, batch); err != nil {
					t.Fatal(err)
				}
			}
			seen := map[string]int{}
			for _, id := range ids(t, w.out.String(), f.id) {
				seen[id]++
			}
			for _, m := range append(a, b...) {
				if seen[m.ID] != 1 {
					t.Fatalf("%s printed %d times: %v", m.ID, seen[m.ID], seen)
				}
			}
		})
	}
}

func TestClosedPipeIsFatal(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			r.Close()
			s := f.new(w)
			_, err = s.Write(context.Background(), messages(0, 3))
			if !runner.IsFatal(err) || !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("write to a pipe without a reader: %v, want a fatal EPIPE error", err)
			}
			if s.Ready(context.Background()) == nil {
				t.Fatal("ready after the reader went away")
			}
		})
	}
}

func TestCloseFinishesACutLine(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			w := &flakyWriter{room: 30, err: syscall.ENOSPC}
			s := f.new(w)
			if _, err := s.Write(context.Background(), messages(0, 1)); err == nil {
				t.Fatal("write to a full output succeeded")
			}
			w.room = 1 << 30
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := ids(t, w.out.String(), f.id); len(got) != 1 || got[0] != "m0" {
				t.Fatalf("output %q", w.out.String())
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		max int
		ok  bool
	}{{0, true}, {256, true}, {-1, false}} {
		err := (&logsink.Config{MaxValue: tc.max, Format: "runner"}).Validate(runner.RoleSink)
		var ce *runner.ConfigError
		if tc.ok != (err == nil) || (!tc.ok && (!errors.As(err, &ce) || ce.Var != "MV_LOG_MAX_VALUE")) {
			t.Errorf("MaxValue %d: %v", tc.max, err)
		}
	}
}
