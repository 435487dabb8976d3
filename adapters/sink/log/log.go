// Package log is a sink that prints one line per message to standard
// output: the runner's readable line, or (MV_LOG_FORMAT=numaflow) the JSON
// log record numaflow-core's log sink prints, so tools that read a Numaflow
// log sink's output read the runner's.
//
// Its output can fail like any peer: a reader that went away (`runner |
// head -1`) and a full disk. A write that fails is retried by the engine,
// the sink reports not ready until a write succeeds again, and a line cut
// short by a full disk is finished before anything else is written, so the
// output stays one line per message. A reader that went away never comes
// back: that write error is fatal, and the runner stops with what it has
// not written unacked.
package log

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/monovertex/monovertex/runner"
)

// Config holds the log sink's settings.
type Config struct {
	MaxValue int    `envconfig:"MV_LOG_MAX_VALUE" default:"256" desc:"payload bytes printed per message in the runner format; the rest is elided (the numaflow format prints every byte, as Numaflow does)"`
	Format   string `envconfig:"MV_LOG_FORMAT" default:"runner" desc:"line format: runner (role id= keys= event_time= bytes= value=) or numaflow (the JSON record numaflow-core's log sink prints: Payload - ... Keys - ... EventTime - <unix ms> Headers - k: v, ... ID - ..., with the whole payload; MV_LOG_MAX_VALUE does not apply)"`
}

// The values of MV_LOG_FORMAT.
const (
	formatRunner   = "runner"
	formatNumaflow = "numaflow"
)

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if c.MaxValue < 0 {
		return &runner.ConfigError{Var: "MV_LOG_MAX_VALUE", Value: strconv.Itoa(c.MaxValue), Reason: "must be 0 or more"}
	}
	if c.Format != formatRunner && c.Format != formatNumaflow {
		return &runner.ConfigError{Var: "MV_LOG_FORMAT", Value: c.Format, Reason: "must be runner or numaflow"}
	}
	return nil
}

func init() {
	runner.RegisterSink("log", func(_ context.Context, env runner.Env, cfg *Config) (runner.Sink, error) {
		catchSIGPIPE()
		if cfg.Format == formatNumaflow {
			return NewNumaflow(os.Stdout, time.Now), nil
		}
		return New(os.Stdout, cfg.MaxValue, string(env.Role)), nil
	})
}

var sigpipeOnce sync.Once

// catchSIGPIPE makes a write to a standard output whose reader is gone fail
// with EPIPE instead of killing the process: Go dies of SIGPIPE on fd 1 and
// 2 only while no one asked to be notified of it. Notify, unlike Ignore,
// leaves the signal's disposition for programs the process might start.
func catchSIGPIPE() {
	sigpipeOnce.Do(func() {
		// Nothing reads the channel; the runtime drops what does not fit.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	})
}

// chunkSize is how many bytes of lines are gathered before one write, so a
// batch of large messages does not build one huge buffer.
const chunkSize = 64 << 10

// maxRemembered bounds the messages remembered as written by failed calls;
// forgetting them costs only duplicate lines.
const maxRemembered = 1 << 16

// Sink writes one line per message.
type Sink struct {
	mu       sync.Mutex
	out      io.Writer
	maxValue int
	role     string
	// numaflow selects numaflow-core's line, stamped by now; hkeys is
	// scratch for sorting a message's header names.
	numaflow bool
	now      func() time.Time
	hkeys    []string

	// buf holds the formatted lines of chunk, ends the offset in buf just
	// past each one; sent are the messages of this call whose lines are
	// out, now or in an earlier call that failed.
	buf   []byte
	ends  []int
	chunk []*runner.Message
	sent  []*runner.Message

	// tail is the rest of a line a failed write cut short, for tailMsg; it
	// is written before anything else.
	tail    []byte
	tailMsg *runner.Message
	// written are messages whose lines went out in a call that failed as a
	// whole: the engine offers the same messages again, and their lines are
	// not printed twice.
	written map[*runner.Message]struct{}
	// failing is the error of the last write, nil once one succeeded.
	failing error
}

var (
	_ runner.Sink    = (*Sink)(nil)
	_ runner.Readier = (*Sink)(nil)
)

// New returns a log sink writing to w, printing at most maxValue payload bytes.
func New(w io.Writer, maxValue int, role string) *Sink {
	return &Sink{out: w, maxValue: maxValue, role: role, written: map[*runner.Message]struct{}{}}
}

// NewNumaflow returns a log sink writing to w the JSON record numaflow-core's
// log sink prints for each message, timestamped by now (time.Now if nil).
func NewNumaflow(w io.Writer, now func() time.Time) *Sink {
	if now == nil {
		now = time.Now
	}
	return &Sink{out: w, numaflow: true, now: now, written: map[*runner.Message]struct{}{}}
}

// Write prints each message, in writes of up to 64 KiB. When a write
// fails the whole call fails and the engine retries it; the lines already
// out are not printed again on that retry.
func (s *Sink) Write(_ context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = s.sent[:0]
	if err := s.finishTail(); err != nil {
		return nil, s.fail(err)
	}
	for _, m := range msgs {
		if _, ok := s.written[m]; ok {
			s.sent = append(s.sent, m)
			continue
		}
		s.buf = s.format(s.buf, m)
		s.ends = append(s.ends, len(s.buf))
		s.chunk = append(s.chunk, m)
		if len(s.buf) >= chunkSize {
			if err := s.writeChunk(); err != nil {
				return nil, s.fail(err)
			}
		}
	}
	if err := s.writeChunk(); err != nil {
		return nil, s.fail(err)
	}
	if len(s.written) > 0 {
		for _, m := range msgs {
			delete(s.written, m)
		}
	}
	clear(s.sent)
	s.failing = nil
	return runner.OKResults(len(msgs)), nil
}

// writeChunk writes the gathered lines. On failure it keeps the rest of a
// line cut short and remembers the messages whose lines are out.
func (s *Sink) writeChunk() error {
	if len(s.buf) == 0 {
		return nil
	}
	n, err := s.out.Write(s.buf)
	if err == nil && n < len(s.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		start := 0
		for i, end := range s.ends {
			if end <= n {
				s.sent = append(s.sent, s.chunk[i])
			} else if n > start {
				s.tail = append(s.tail[:0], s.buf[n:end]...)
				s.tailMsg = s.chunk[i]
				break
			}
			start = end
		}
		if len(s.written) > maxRemembered {
			clear(s.written) // calls never retried (a shutdown): forget them
		}
		for _, m := range s.sent {
			s.written[m] = struct{}{}
		}
		s.sent = s.sent[:0]
	} else {
		s.sent = append(s.sent, s.chunk...)
	}
	s.buf, s.ends = s.buf[:0], s.ends[:0]
	clear(s.chunk)
	s.chunk = s.chunk[:0]
	return err
}

// finishTail writes the rest of a line an earlier write cut short, after
// which that message's line is out in full.
func (s *Sink) finishTail() error {
	for len(s.tail) > 0 {
		n, err := s.out.Write(s.tail)
		s.tail = s.tail[n:]
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
	}
	if s.tailMsg != nil {
		s.written[s.tailMsg] = struct{}{}
		s.tailMsg, s.tail = nil, nil
	}
	return nil
}

// fail records err for Ready and words it for the engine: a reader that is
// gone is fatal, anything else (a full disk) is retried.
func (s *Sink) fail(err error) error {
	if errors.Is(err, syscall.EPIPE) {
		err = runner.Fatal(fmt.Errorf("log sink: the reader of standard output is gone (%w); what is not written stays unacked and is redelivered", err))
	} else {
		err = fmt.Errorf("log sink: write to standard output: %w (retrying)", err)
	}
	s.failing = err
	return err
}

// Ready reports the error of the last write until a write succeeds again.
func (s *Sink) Ready(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

func (s *Sink) format(b []byte, m *runner.Message) []byte {
	if s.numaflow {
		return s.formatNumaflow(b, m)
	}
	b = append(b, s.role...)
	b = append(b, " id="...)
	b = strconv.AppendQuote(b, m.ID)
	if len(m.Keys) > 0 {
		b = append(b, " keys="...)
		b = strconv.AppendQuote(b, strings.Join(m.Keys, ","))
	}
	b = append(b, " event_time="...)
	b = m.EventTime.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, " bytes="...)
	b = strconv.AppendInt(b, int64(len(m.Value)), 10)
	v := m.Value
	elided := false
	if len(v) > s.maxValue {
		v, elided = v[:s.maxValue], true
	}
	b = append(b, " value="...)
	if utf8.Valid(v) {
		b = strconv.AppendQuote(b, string(v))
	} else {
		b = append(b, "(binary)"...)
	}
	if elided {
		b = append(b, "..."...)
	}
	return append(b, '\n')
}

// Close finishes a line a failed write cut short; messages not written
// were never acked, so there is nothing else to flush.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.finishTail(); err != nil {
		return fmt.Errorf("log sink: finish the last line: %w", err)
	}
	return nil
}
