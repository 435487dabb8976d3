// Package generator is a source that makes messages at a fixed rate, like
// Numaflow's generator source: MV_GENERATOR_RPU messages every
// MV_GENERATOR_DURATION, each a JSON object padded up to MV_GENERATOR_MSG_SIZE
// bytes.
package generator

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// Config holds the generator's settings.
type Config struct {
	RPU      int           `envconfig:"MV_GENERATOR_RPU" default:"5" desc:"messages generated every MV_GENERATOR_DURATION"`
	Duration time.Duration `envconfig:"MV_GENERATOR_DURATION" default:"1s" desc:"the period of MV_GENERATOR_RPU"`
	MsgSize  int           `envconfig:"MV_GENERATOR_MSG_SIZE" default:"8" desc:"payload size in bytes (the JSON is padded up to it)"`
	KeyCount int           `envconfig:"MV_GENERATOR_KEY_COUNT" default:"0" desc:"number of distinct keys, 0 for unkeyed messages"`
	Value    *int64        `envconfig:"MV_GENERATOR_VALUE" desc:"fixed \"value\" field of every payload; unset: the sequence number"`
	Total    int64         `envconfig:"MV_GENERATOR_TOTAL" default:"0" desc:"stop after this many messages (for tests and benchmarks); 0 never stops"`
	Fixed    bool          `envconfig:"MV_GENERATOR_FIXED_PAYLOAD" default:"false" desc:"send one payload, made at start, in every message (value MV_GENERATOR_VALUE or 0, createdts the start time): no allocation per message, for load tests of the rest of the pipeline"`
	Jitter   time.Duration `envconfig:"MV_GENERATOR_JITTER" default:"0s" desc:"event times lag the read by a random whole number of seconds below this, as Numaflow's jitter (out-of-order event times for tests)"`
	// ValueBlob is Numaflow's generator valueBlob.
	ValueBlob string `envconfig:"MV_GENERATOR_VALUE_BLOB" desc:"the payload of every message, base64 (standard, padded), as Numaflow's valueBlob; MV_GENERATOR_MSG_SIZE and MV_GENERATOR_VALUE then do not apply"`
	// MessageIDs is how the runner forms message IDs (set from
	// runner.Env, not from the environment).
	MessageIDs runner.MessageIDs `ignored:"true"`
}

// Upper bounds of the generator's settings: past them a typo would take
// the memory of the pod (an 8 GB payload) rather than make a load test.
const (
	maxMsgSize  = 64 << 20
	maxRPU      = 10_000_000
	maxKeyCount = 1_000_000
)

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	switch {
	case c.RPU <= 0 || c.RPU > maxRPU:
		return &runner.ConfigError{Var: "MV_GENERATOR_RPU", Value: strconv.Itoa(c.RPU), Reason: "must be a positive integer, at most " + strconv.Itoa(maxRPU)}
	case c.Duration <= 0:
		return &runner.ConfigError{Var: "MV_GENERATOR_DURATION", Value: c.Duration.String(), Reason: "must be a positive duration such as 1s"}
	case c.ValueBlob == "" && (c.MsgSize < 0 || c.MsgSize > maxMsgSize): // a blob makes the size moot
		return &runner.ConfigError{Var: "MV_GENERATOR_MSG_SIZE", Value: strconv.Itoa(c.MsgSize), Reason: "must be 0 to 67108864 bytes (64 MiB)"}
	case c.KeyCount < 0 || c.KeyCount > maxKeyCount:
		return &runner.ConfigError{Var: "MV_GENERATOR_KEY_COUNT", Value: strconv.Itoa(c.KeyCount), Reason: "must be 0 to " + strconv.Itoa(maxKeyCount)}
	case c.Total < 0:
		return &runner.ConfigError{Var: "MV_GENERATOR_TOTAL", Value: strconv.FormatInt(c.Total, 10), Reason: "must be 0 (unlimited) or more"}
	case c.Jitter < 0:
		return &runner.ConfigError{Var: "MV_GENERATOR_JITTER", Value: c.Jitter.String(), Reason: "must be 0 or a positive duration such as 10s"}
	case base64.StdEncoding.DecodedLen(len(c.ValueBlob)) > maxMsgSize:
		return &runner.ConfigError{Var: "MV_GENERATOR_VALUE_BLOB", Value: clip(c.ValueBlob), Reason: "decodes to more than 67108864 bytes (64 MiB)"}
	}
	if _, err := DecodeValueBlob(c.ValueBlob); err != nil {
		return &runner.ConfigError{Var: "MV_GENERATOR_VALUE_BLOB", Value: clip(c.ValueBlob), Reason: err.Error()}
	}
	return nil
}

// DecodeValueBlob decodes a generator valueBlob as Numaflow does: standard
// base64 with its padding, on one line (Go's decoder skips line breaks,
// Rust's base64, Numaflow's, refuses them).
func DecodeValueBlob(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("must be base64 on one line, as Numaflow's valueBlob (it has a line break)")
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("must be base64 in the standard alphabet with its padding, as Numaflow's valueBlob (%v)", err)
	}
	return b, nil
}

// clip shortens a value quoted in an error to one readable line.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func init() {
	runner.RegisterSource("generator", func(_ context.Context, env runner.Env, cfg *Config) (runner.Source, error) {
		cfg.MessageIDs = env.MessageIDs
		return New(*cfg, env.Replica), nil
	})
}

// Source generates messages. It keeps nothing to redeliver: like Numaflow's
// generator, its acks and nacks have nothing to do.
type Source struct {
	cfg Config
	// prefix and suffix surround a message's number plus idBase in its
	// ID (see idParts).
	prefix, suffix string
	idBase         int64
	// tail is the padding followed by the closing `"}`, so a payload is
	// one short header and one append of tail's end (see payload).
	tail []byte
	// fixed is the one payload of every message with
	// MV_GENERATOR_FIXED_PAYLOAD. It is shared, so nothing may write
	// into a message's Value (the engine and sinks only read it).
	fixed []byte

	mu     sync.Mutex
	seq    int64
	tokens float64
	last   time.Time
}

// New returns a generator source for the given replica.
func New(cfg Config, replica int) *Source {
	prefix, suffix, base := idParts(cfg.MessageIDs, replica)
	// Numaflow sends a valueBlob as it is, and an empty one as no blob.
	if blob, err := DecodeValueBlob(cfg.ValueBlob); err == nil && len(blob) > 0 {
		return &Source{cfg: cfg, prefix: prefix, suffix: suffix, idBase: base, fixed: blob[:len(blob):len(blob)], last: time.Now()}
	}
	tail := make([]byte, cfg.MsgSize+len(closing))
	for i := range cfg.MsgSize {
		tail[i] = 'x'
	}
	copy(tail[cfg.MsgSize:], closing)
	s := &Source{cfg: cfg, prefix: prefix, suffix: suffix, idBase: base, tail: tail, last: time.Now()}
	if cfg.Fixed {
		var v int64
		if cfg.Value != nil {
			v = *cfg.Value
		}
		s.fixed = s.build(v, s.last)
	}
	return s
}

// idParts gives what goes before and after a message's number in its ID,
// and what is added to the number: "<replica>-<n>", counting from 0 again
// after a restart, or under MV_MESSAGE_IDS=numaflow numaflow-core's offset
// string, IntOffset(id, replica) printed "<id>-<replica>"
// (source/generator.rs, message.rs), where id is the nanosecond clock at
// the message's making. Here it is the clock at the source's start plus
// the message's number: a restart does not give an ID again (a sink that
// de-duplicates on IDs would drop new messages), and the number grows far
// slower than the clock (a billion messages a second would be needed to
// catch up with it), while one call to the clock serves every message.
func idParts(mode runner.MessageIDs, replica int) (prefix, suffix string, base int64) {
	r := strconv.Itoa(replica)
	if mode == runner.NumaflowIDs {
		return "", "-" + r, time.Now().UnixNano()
	}
	return r + "-", "", 0
}

// closing ends every payload's padding string and the JSON object.
const closing = `"}`

// Read returns up to max messages as the rate allows, waiting at most
// timeout for the first one.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	deadline := time.Now().Add(timeout)
	perSecond := float64(s.cfg.RPU) / s.cfg.Duration.Seconds()
	for {
		s.mu.Lock()
		if s.cfg.Total > 0 && s.seq >= s.cfg.Total {
			s.mu.Unlock()
			return nil, io.EOF
		}
		now := time.Now()
		// Tokens refill continuously but never beyond one period's worth,
		// so a paused reader does not burst afterwards.
		s.tokens = min(s.tokens+now.Sub(s.last).Seconds()*perSecond, float64(s.cfg.RPU))
		s.last = now
		n := min(int(s.tokens), max)
		if s.cfg.Total > 0 {
			n = int(min(int64(n), s.cfg.Total-s.seq))
		}
		if n > 0 {
			s.tokens -= float64(n)
			first := s.seq
			s.seq += int64(n)
			s.mu.Unlock()
			return s.make(first, n, now), nil
		}
		wait := time.Duration((1 - s.tokens) / perSecond * float64(time.Second))
		s.mu.Unlock()
		if left := time.Until(deadline); wait > left {
			wait = left
		}
		if wait <= 0 {
			return nil, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
	}
}

func (s *Source) make(first int64, n int, now time.Time) []*runner.Message {
	msgs := make([]*runner.Message, n)
	backing := make([]runner.Message, n)
	var prev []byte
	for i := range msgs {
		seq := first + int64(i)
		m := &backing[i]
		m.ID = s.prefix + strconv.FormatInt(s.idBase+seq, 10) + s.suffix
		m.EventTime = now.Add(-s.lag())
		m.Offset = seq
		m.Value = s.payload(seq, now, prev)
		prev = m.Value
		if s.cfg.KeyCount > 0 {
			// Numaflow's names: key-0 .. key-(N-1), the same on every replica.
			m.Keys = []string{"key-" + strconv.FormatInt(seq%int64(s.cfg.KeyCount), 10)}
		}
		msgs[i] = m
	}
	return msgs
}

// lag is how far a message's event time lies behind its read, as
// numaflow-core's generator draws it: a whole number of seconds in
// [0, jitter), jitter counted in whole seconds and at least 1 (so below
// 2s there is none).
func (s *Source) lag() time.Duration {
	secs := max(int64(s.cfg.Jitter/time.Second), 1)
	if secs == 1 {
		return 0
	}
	return time.Duration(rand.Int64N(secs)) * time.Second
}

// payload is the value of message seq made at now. Without a per-message
// part it is shared: the fixed payload, or, with MV_GENERATOR_VALUE, the
// previous message's payload of the same read (same value, same createdts).
func (s *Source) payload(seq int64, now time.Time, prev []byte) []byte {
	switch {
	case s.fixed != nil:
		return s.fixed
	case s.cfg.Value != nil:
		if prev != nil {
			return prev
		}
		return s.build(*s.cfg.Value, now)
	}
	return s.build(seq, now)
}

// build makes {"value":V,"createdts":NS,"padding":"xxx"} padded to MsgSize,
// or just the JSON when that is already longer. The short header is made
// first and the padding appended to it in one step: growing a slice by
// append zeroes nothing it copies over, where make would clear all of a
// large payload before the padding is written over it.
func (s *Source) build(v int64, now time.Time) []byte {
	var head [80]byte
	b := append(head[:0], `{"value":`...)
	b = strconv.AppendInt(b, v, 10)
	b = append(b, `,"createdts":`...)
	b = strconv.AppendInt(b, now.UnixNano(), 10)
	b = append(b, `,"padding":"`...)
	pad := max(s.cfg.MsgSize-len(b)-len(closing), 0)
	out := append(b[:len(b):len(b)], s.tail[len(s.tail)-pad-len(closing):]...)
	// Capacity ends at the length: an append to a shared payload anywhere
	// downstream then copies instead of writing past it into its spare room.
	return out[:len(out):len(out)]
}

// Ack has nothing to do: generated messages are not kept.
func (s *Source) Ack(context.Context, []*runner.Message) error { return nil }

// Close has nothing to release.
func (s *Source) Close(context.Context) error { return nil }
