package log_test

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	logsink "github.com/monovertex/monovertex/adapters/sink/log"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

// output is the sink's standard output in the suite: it keeps what is
// written, safe for the suite to read meanwhile, and fails every write with
// ENOSPC while full, as a full disk does.
type output struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	full bool
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.full {
		return 0, syscall.ENOSPC
	}
	return o.buf.Write(p)
}

func (o *output) setFull(full bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.full = full
}

// received parses the sink's lines back into messages with parse.
func (o *output) received(t *testing.T, parse func(t *testing.T, line string) *runner.Message) []*runner.Message {
	o.mu.Lock()
	text := o.buf.String()
	o.mu.Unlock()
	var out []*runner.Message
	for _, line := range strings.Split(text, "\n") {
		if line != "" {
			out = append(out, parse(t, line))
		}
	}
	return out
}

// parseRunnerLine reads the ID, keys, event time and value (printed whole,
// since the case sets no value limit) of a runner-format line.
func parseRunnerLine(t *testing.T, line string) *runner.Message {
	m := &runner.Message{}
	rest := strings.TrimPrefix(line, "sink ")
	for rest != "" {
		name, after, ok := strings.Cut(rest, "=")
		if !ok {
			t.Fatalf("malformed line %q", line)
		}
		var val string
		if strings.HasPrefix(after, `"`) {
			q, err := strconv.QuotedPrefix(after)
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			val, _ = strconv.Unquote(q)
			after = after[len(q):]
		} else {
			val, after, _ = strings.Cut(after, " ")
			after = " " + after
		}
		rest = strings.TrimPrefix(after, " ")
		switch name {
		case "id":
			m.ID = val
		case "keys":
			m.Keys = strings.Split(val, ",")
		case "event_time":
			ts, err := time.Parse(time.RFC3339Nano, val)
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			m.EventTime = ts
		case "value":
			m.Value = []byte(val)
		}
	}
	return m
}

// parseNumaflowLine reads a numaflow-format line back, from the right, so
// that only the payload may hold the separators (the suite's payloads hold
// none of them).
func parseNumaflowLine(t *testing.T, line string) *runner.Message {
	var rec struct{ Message string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	rest, id, ok1 := cutLast(rec.Message, " ID - ")
	rest, headers, ok2 := cutLast(rest, " Headers - ")
	rest, ms, ok3 := cutLast(rest, " EventTime - ")
	rest, keys, ok4 := cutLast(rest, " Keys - ")
	value, ok5 := strings.CutPrefix(rest, "Payload - ")
	millis, err := strconv.ParseInt(ms, 10, 64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || err != nil {
		t.Fatalf("malformed message %q (%v)", rec.Message, err)
	}
	m := &runner.Message{ID: id, Value: []byte(value), EventTime: time.UnixMilli(millis), Headers: map[string]string{}}
	if keys != "" {
		m.Keys = strings.Split(keys, ",")
	}
	for _, kv := range strings.SplitAfter(headers, ", ") {
		if k, v, ok := strings.Cut(strings.TrimSuffix(kv, ", "), ": "); ok {
			m.Headers[k] = v
		}
	}
	return m
}

func TestConformance(t *testing.T) {
	t.Run("runner", func(t *testing.T) {
		runConformance(t, func(w io.Writer) runner.Sink { return logsink.New(w, 2<<20, "sink") }, parseRunnerLine, false)
	})
	t.Run("numaflow", func(t *testing.T) {
		runConformance(t, func(w io.Writer) runner.Sink { return logsink.NewNumaflow(w, nil) }, parseNumaflowLine, true)
	})
}

// runConformance runs the sink suite against the sink newSink makes.
// Lines carry keys and event time in both formats, headers in numaflow's.
func runConformance(t *testing.T, newSink func(io.Writer) runner.Sink, parse func(*testing.T, string) *runner.Message, keepsHeaders bool) {
	var mu sync.Mutex
	outputs := map[*testing.T]*output{}
	outputOf := func(t *testing.T) *output {
		mu.Lock()
		defer mu.Unlock()
		if outputs[t] == nil {
			outputs[t] = &output{}
		}
		return outputs[t]
	}
	conformance.RunSink(t, conformance.SinkCase{
		New:      func(t *testing.T) runner.Sink { return newSink(outputOf(t)) },
		Received: func(t *testing.T) []*runner.Message { return outputOf(t).received(t, parse) },
		// The peer is standard output: stopped, it is a full disk.
		Peer: conformance.Peer{
			Stop:  func(t *testing.T) { outputOf(t).setFull(true) },
			Start: func(t *testing.T) { outputOf(t).setFull(false) },
		},
		Features: conformance.SinkFeatures{
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true, Reconnects: true},
			KeepsKeys: true, KeepsEventTime: true, KeepsHeaders: keepsHeaders,
		},
	})
}
