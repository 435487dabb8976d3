// Package log is a sink that prints one readable line per message to
// standard output, like Numaflow's log sink.
package log

import (
	"bufio"
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/monovertex/monovertex/runner"
)

// Config holds the log sink's settings.
type Config struct {
	MaxValue int `envconfig:"MV_LOG_MAX_VALUE" default:"256" desc:"payload bytes printed per message; the rest is elided"`
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if c.MaxValue < 0 {
		return &runner.ConfigError{Var: "MV_LOG_MAX_VALUE", Value: strconv.Itoa(c.MaxValue), Reason: "must be 0 or more"}
	}
	return nil
}

func init() {
	runner.RegisterSink(runner.Plugin[runner.Sink]{
		Name:   "log",
		Config: func() any { return &Config{} },
		New: func(_ context.Context, env runner.Env, cfg any) (runner.Sink, error) {
			return New(os.Stdout, cfg.(*Config).MaxValue, string(env.Role)), nil
		},
	})
}

// Sink writes one line per message.
type Sink struct {
	mu       sync.Mutex
	w        *bufio.Writer
	maxValue int
	role     string
}

// New returns a log sink writing to w, printing at most maxValue payload bytes.
func New(w io.Writer, maxValue int, role string) *Sink {
	return &Sink{w: bufio.NewWriterSize(w, 64<<10), maxValue: maxValue, role: role}
}

// Write prints each message and flushes once per batch.
func (s *Sink) Write(_ context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var line []byte
	for _, m := range msgs {
		line = s.format(line[:0], m)
		if _, err := s.w.Write(line); err != nil {
			return nil, err
		}
	}
	if err := s.w.Flush(); err != nil {
		return nil, err
	}
	return runner.OKResults(len(msgs)), nil
}

func (s *Sink) format(b []byte, m *runner.Message) []byte {
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

// Close flushes what is buffered.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Flush()
}
