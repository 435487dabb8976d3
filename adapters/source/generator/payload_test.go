package generator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// reference is the payload layout as first written (make, then append):
// the generator's payloads must stay byte for byte the same.
func reference(size int, v int64, now time.Time) []byte {
	b := make([]byte, 0, max(size, 64))
	b = append(b, `{"value":`...)
	b = strconv.AppendInt(b, v, 10)
	b = append(b, `,"createdts":`...)
	b = strconv.AppendInt(b, now.UnixNano(), 10)
	b = append(b, `,"padding":"`...)
	if pad := size - len(b) - 2; pad > 0 {
		b = append(b, strings.Repeat("x", pad)...)
	}
	return append(b, `"}`...)
}

var payloadSizes = []int{0, 1, 8, 50, 51, 52, 53, 64, 100, 1024, 64 << 10, 1 << 20}

func TestPayloadsKeepTheirLayout(t *testing.T) {
	now := time.Unix(1_700_000_000, 123456789)
	seven := int64(7)
	for _, size := range payloadSizes {
		for _, value := range []*int64{nil, &seven} {
			s := New(Config{RPU: 1, Duration: time.Second, MsgSize: size, Value: value}, 3)
			msgs := s.make(41, 3, now)
			for i, m := range msgs {
				v := int64(41 + i)
				if value != nil {
					v = *value
				}
				if want := reference(size, v, now); !bytes.Equal(m.Value, want) {
					t.Fatalf("size %d value %v message %d: got %q, want %q", size, value, i, head(m.Value), head(want))
				}
				var doc struct {
					Value     int64  `json:"value"`
					CreatedTS int64  `json:"createdts"`
					Padding   string `json:"padding"`
				}
				if err := json.Unmarshal(m.Value, &doc); err != nil {
					t.Fatalf("size %d: payload is not JSON: %v", size, err)
				}
				if doc.Value != v || doc.CreatedTS != now.UnixNano() || strings.Trim(doc.Padding, "x") != "" {
					t.Fatalf("size %d: got %+v", size, doc)
				}
				if cap(m.Value) != len(m.Value) {
					t.Fatalf("size %d: payload has spare capacity (%d of %d) that an append could write into", size, cap(m.Value), len(m.Value))
				}
				if len(m.Value) < size {
					t.Fatalf("size %d: payload of %d bytes", size, len(m.Value))
				}
			}
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 100)] }

func TestAFixedValueIsSharedWithinARead(t *testing.T) {
	seven := int64(7)
	s := New(Config{RPU: 1, Duration: time.Second, MsgSize: 4096, Value: &seven}, 0)
	now := time.Now()
	a, b := s.make(0, 4, now), s.make(4, 4, now.Add(time.Millisecond))
	for _, batch := range [][]*runner.Message{a, b} {
		for _, m := range batch[1:] {
			if &m.Value[0] != &batch[0].Value[0] {
				t.Fatal("messages of one read with a fixed value must share one payload")
			}
		}
	}
	if bytes.Equal(a[0].Value, b[0].Value) {
		t.Fatal("reads at different times must carry their own createdts")
	}
	// Without a fixed value every message has its own bytes.
	s = New(Config{RPU: 1, Duration: time.Second, MsgSize: 4096}, 0)
	c := s.make(0, 2, now)
	if &c[0].Value[0] == &c[1].Value[0] || bytes.Equal(c[0].Value, c[1].Value) {
		t.Fatal("messages with their sequence number as value must not share a payload")
	}
}

func TestFixedPayloadIsOneSliceForEveryMessage(t *testing.T) {
	for _, value := range []*int64{nil, new(int64(-5))} {
		start := time.Now()
		s := New(Config{RPU: 1000, Duration: time.Second, MsgSize: 1 << 20, Value: value, Fixed: true}, 0)
		var v int64
		if value != nil {
			v = *value
		}
		want := reference(1<<20, v, s.last)
		if s.last.Before(start) {
			t.Fatal("the fixed payload's createdts must be the start time")
		}
		wantOneSharedPayload(t, s, want)
	}
}

// wantOneSharedPayload reads three times from s and fails t unless every
// message carries want in one shared slice whose capacity ends at it.
func wantOneSharedPayload(t *testing.T, s *Source, want []byte) {
	t.Helper()
	var first *byte
	n := 0
	for range 3 {
		msgs, err := s.Read(context.Background(), 10, time.Second)
		if err != nil || len(msgs) == 0 {
			t.Fatalf("read: %d messages, %v", len(msgs), err)
		}
		for _, m := range msgs {
			if first == nil {
				first = &m.Value[0]
			}
			if &m.Value[0] != first || !bytes.Equal(m.Value, want) || cap(m.Value) != len(want) {
				t.Fatalf("message %s carries %.40q (cap %d), want the one payload %.40q", m.ID, m.Value, cap(m.Value), want)
			}
			n++
		}
	}
	if n < 3 {
		t.Fatalf("%d messages", n)
	}
}

// recordingSink reads every byte of each value, so that under -race a write
// into a shared payload anywhere in the engine is reported.
type recordingSink struct {
	want    []byte
	written atomic.Int64
	wrong   atomic.Int64
}

func (s *recordingSink) Write(_ context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	out := make([]runner.WriteResult, len(msgs))
	for i, m := range msgs {
		if !bytes.Equal(m.Value, s.want) {
			s.wrong.Add(1)
		}
		s.written.Add(1)
		out[i] = runner.WriteResult{Status: runner.WriteOK}
	}
	return out, nil
}

func (s *recordingSink) Close(context.Context) error { return nil }

func TestTheEngineNeverWritesIntoASharedPayload(t *testing.T) {
	const total = 2000
	src := New(Config{RPU: 10_000_000, Duration: time.Second, MsgSize: 4096, Fixed: true, Total: total}, 0)
	want := bytes.Clone(src.fixed)
	sink := &recordingSink{want: src.fixed}
	e, err := runner.New(runner.Options{BatchSize: 16, InflightBatches: 4, ShutdownTimeout: 10 * time.Second}, src, nil, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	for sink.written.Load() < total && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := sink.written.Load(); n != total {
		t.Fatalf("written %d of %d", n, total)
	}
	if sink.wrong.Load() != 0 || !bytes.Equal(src.fixed, want) {
		t.Fatal("the shared payload was changed on its way to the sink")
	}
}

// TestValueBlobIsEveryPayload: Numaflow's valueBlob is sent as it is, one
// shared slice, whatever MsgSize, Value and Fixed say; an empty blob is
// no blob.
func TestValueBlobIsEveryPayload(t *testing.T) {
	seven := int64(7)
	want := []byte("hello world\n")
	// A size past the bound does not matter with a blob (nor is it allocated).
	wantOneSharedPayload(t, New(Config{RPU: 1000, Duration: time.Second, MsgSize: 1 << 40, Value: &seven, ValueBlob: "aGVsbG8gd29ybGQK"}, 0), want)
	msgs, err := New(Config{RPU: 10, Duration: time.Second, MsgSize: 64, ValueBlob: ""}, 0).Read(context.Background(), 1, time.Second)
	if err != nil || len(msgs) != 1 || !bytes.HasPrefix(msgs[0].Value, []byte(`{"value":0,`)) || len(msgs[0].Value) != 64 {
		t.Fatalf("with an empty blob: %v %v, want a generated payload", msgs, err)
	}
}

func TestValueBlobMustBeNumaflowsBase64(t *testing.T) {
	base := Config{RPU: 1, Duration: time.Second}
	for _, c := range []struct {
		blob string
		ok   bool
	}{
		{"", true},
		{"aGk=", true},
		{"aGk= ", false},
		{"aGVsbG8gd29ybGQK", true},
		{"aGk", false},   // padding missing (the standard engine wants it)
		{"aGl=", false},  // non-zero trailing bits
		{"aG k=", false}, // a space
		{"aGk=\n", false},
		{"aG\r\nk=", false},
		{"a-_b", false}, // the URL alphabet
		{"abcdef", false},
		{strings.Repeat("A", (64<<20)/3*4+8), false}, // decodes past 64 MiB
	} {
		cfg := base
		cfg.ValueBlob = c.blob
		cfg.MsgSize = 1 << 40 // moot with a blob, refused without one
		err := cfg.Validate(runner.RoleSource)
		var ce *runner.ConfigError
		switch {
		case c.ok && c.blob == "":
			if err == nil || !errors.As(err, &ce) || ce.Var != "MV_GENERATOR_MSG_SIZE" {
				t.Errorf("no blob and a 1 TiB size: %v, want MV_GENERATOR_MSG_SIZE refused", err)
			}
		case c.ok && err != nil:
			t.Errorf("blob %.20q refused: %v", c.blob, err)
		case !c.ok && (err == nil || !errors.As(err, &ce) || ce.Var != "MV_GENERATOR_VALUE_BLOB" || strings.Contains(err.Error(), "\n")):
			t.Errorf("blob %.20q: error %v, want one line naming MV_GENERATOR_VALUE_BLOB", c.blob, err)
		}
	}
}

// TestJitterIsNumaflows: event times lag the read by whole seconds drawn
// from [0, jitter), as numaflow-core draws them; under 2s there is none.
func TestJitterIsNumaflows(t *testing.T) {
	for _, c := range []struct {
		jitter   time.Duration
		distinct int // at least this many different lags in 2,000 messages
		max      time.Duration
	}{{0, 1, 0}, {time.Second, 1, 0}, {1900 * time.Millisecond, 1, 0}, {10 * time.Second, 10, 9 * time.Second}, {2500 * time.Millisecond, 2, time.Second}} {
		s := New(Config{RPU: 1_000_000, Duration: time.Second, MsgSize: 8, Jitter: c.jitter}, 0)
		lags := map[time.Duration]int{}
		for n := 0; n < 2000; {
			before := time.Now()
			msgs, err := s.Read(context.Background(), 500, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			for _, m := range msgs {
				lag := before.Sub(m.EventTime).Round(time.Second)
				if m.EventTime.After(after) || lag < 0 || lag > c.max || after.Sub(m.EventTime)-lag > after.Sub(before)+time.Millisecond {
					t.Fatalf("jitter %v: event time %v read between %v and %v", c.jitter, m.EventTime, before, after)
				}
				lags[lag]++
			}
			n += len(msgs)
		}
		if len(lags) < c.distinct {
			t.Errorf("jitter %v: lags %v, want at least %d different whole seconds", c.jitter, lags, c.distinct)
		}
	}
	cfg := Config{RPU: 1, Duration: time.Second, Jitter: -time.Second}
	if err := cfg.Validate(runner.RoleSource); err == nil || !strings.Contains(err.Error(), "MV_GENERATOR_JITTER") {
		t.Fatalf("negative jitter: %v", err)
	}
}
