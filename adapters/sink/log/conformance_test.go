package log_test

import (
	"bytes"
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

// received parses the sink's lines back into messages: ID, keys, event
// time and value (printed whole, since the case sets no value limit).
func (o *output) received(t *testing.T) []*runner.Message {
	o.mu.Lock()
	text := o.buf.String()
	o.mu.Unlock()
	var out []*runner.Message
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
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
		out = append(out, m)
	}
	return out
}

func TestConformance(t *testing.T) {
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
		New: func(t *testing.T) runner.Sink {
			return logsink.New(outputOf(t), 2<<20, "sink")
		},
		Received: func(t *testing.T) []*runner.Message { return outputOf(t).received(t) },
		// The peer is standard output: stopped, it is a full disk.
		Peer: conformance.Peer{
			Stop:  func(t *testing.T) { outputOf(t).setFull(true) },
			Start: func(t *testing.T) { outputOf(t).setFull(false) },
		},
		Features: conformance.SinkFeatures{
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true, Reconnects: true},
			// Lines carry keys and event time, not headers.
			KeepsKeys: true, KeepsEventTime: true,
		},
	})
}
