package log_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	logsink "github.com/monovertex/monovertex/adapters/sink/log"
	"github.com/monovertex/monovertex/runner"
)

// loggedAt is the clock of the numaflow-format tests: a zone other than
// UTC, and nanoseconds that must be cut, not rounded, to microseconds.
var loggedAt = time.Date(2026, 12, 5, 11, 0, 0, 123456789, time.FixedZone("CET", 3600))

const loggedAtJSON = "2026-12-05T10:00:00.123456Z"

// numaflowLine is the whole line for a JSON-escaped message, keys in
// tracing-subscriber's order.
func numaflowLine(escaped string) string {
	return `{"timestamp":"` + loggedAtJSON + `","level":"INFO","message":"` + escaped + `","target":"numaflow_core::sinker::sink::log"}` + "\n"
}

// writeNumaflow writes msgs through a numaflow-format sink and returns its
// lines, each checked to be one JSON object.
func writeNumaflow(t *testing.T, msgs ...*runner.Message) []string {
	t.Helper()
	var out bytes.Buffer
	s := logsink.NewNumaflow(&out, func() time.Time { return loggedAt })
	if res, err := s.Write(context.Background(), msgs); err != nil || len(res) != len(msgs) {
		t.Fatalf("write: %v, %d results for %d messages", err, len(res), len(msgs))
	}
	lines := strings.SplitAfter(out.String(), "\n")
	if lines[len(lines)-1] != "" {
		t.Fatalf("output does not end in a newline: %q", out.String())
	}
	lines = lines[:len(lines)-1]
	if len(lines) != len(msgs) {
		t.Fatalf("%d lines for %d messages: %q", len(lines), len(msgs), out.String())
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("not JSON: %q", l)
		}
	}
	return lines
}

// messageOf is the "message" field of a line.
func messageOf(t *testing.T, line string) string {
	t.Helper()
	var rec struct{ Message string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return rec.Message
}

func TestNumaflowFormatPrintsNumaflowCoresLogRecord(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		name string
		msg  runner.Message
		// message is what numaflow-core's format! gives, escaped is how
		// serde_json writes it in the line.
		message, escaped string
	}{
		{
			name:    "keys and headers, headers sorted by name",
			msg:     runner.Message{ID: "mv-7-0", Keys: []string{"k1", "k2"}, Value: []byte("hello"), EventTime: at, Headers: map[string]string{"e": "5", "b": "2", "d": "4", "a": "1", "c": "3"}},
			message: "Payload - hello Keys - k1,k2 EventTime - 1700000000123 Headers - a: 1, b: 2, c: 3, d: 4, e: 5,  ID - mv-7-0",
		},
		{
			name:    "no keys, no headers",
			msg:     runner.Message{ID: "m", Value: []byte("x"), EventTime: at},
			message: "Payload - x Keys -  EventTime - 1700000000123 Headers -  ID - m",
		},
		{
			name:    "one empty key",
			msg:     runner.Message{ID: "m", Keys: []string{""}, Value: []byte("x"), EventTime: at},
			message: "Payload - x Keys -  EventTime - 1700000000123 Headers -  ID - m",
		},
		{
			name:    "empty payload",
			msg:     runner.Message{ID: "m", Value: []byte{}, EventTime: at},
			message: "Payload -  Keys -  EventTime - 1700000000123 Headers -  ID - m",
		},
		{
			name:    "nil payload",
			msg:     runner.Message{ID: "m", EventTime: at},
			message: "Payload -  Keys -  EventTime - 1700000000123 Headers -  ID - m",
		},
		{
			name:    "binary payload, decoded lossily",
			msg:     runner.Message{ID: "m", Value: []byte{0xff, 0xfe, 0x00, 0x80}, EventTime: at},
			message: "Payload - \uFFFD\uFFFD\x00\uFFFD Keys -  EventTime - 1700000000123 Headers -  ID - m",
			escaped: `Payload - ` + "\uFFFD\uFFFD" + `\u0000` + "\uFFFD" + ` Keys -  EventTime - 1700000000123 Headers -  ID - m`,
		},
		{
			name:    "quotes, backslashes and control bytes escaped as serde_json does",
			msg:     runner.Message{ID: "m", Value: []byte("say \"hi\"\n\tto\\me\r\b\f\x01\x1f\x7f"), EventTime: at},
			message: "Payload - say \"hi\"\n\tto\\me\r\b\f\x01\x1f\x7f Keys -  EventTime - 1700000000123 Headers -  ID - m",
			escaped: `Payload - say \"hi\"\n\tto\\me\r\b\f\u0001\u001f` + "\x7f" + ` Keys -  EventTime - 1700000000123 Headers -  ID - m`,
		},
		{
			name:    "HTML and line separators left alone (encoding/json would escape them)",
			msg:     runner.Message{ID: "m", Value: []byte("<a href='x'>&</a>\u2028\u2029"), EventTime: at},
			message: "Payload - <a href='x'>&</a>\u2028\u2029 Keys -  EventTime - 1700000000123 Headers -  ID - m",
		},
		{
			name:    "multibyte text in every field",
			msg:     runner.Message{ID: "ü-1", Keys: []string{"clé", "😀"}, Value: []byte("héllo ✓"), EventTime: at, Headers: map[string]string{"ünï": "çødé"}},
			message: "Payload - héllo ✓ Keys - clé,😀 EventTime - 1700000000123 Headers - ünï: çødé,  ID - ü-1",
		},
		{
			name:    "keys and headers escaped too",
			msg:     runner.Message{ID: "a\"b", Keys: []string{"k\n"}, Value: []byte("v"), EventTime: at, Headers: map[string]string{"x-\n": "new\tline"}},
			message: "Payload - v Keys - k\n EventTime - 1700000000123 Headers - x-\n: new\tline,  ID - a\"b",
			escaped: `Payload - v Keys - k\n EventTime - 1700000000123 Headers - x-\n: new\tline,  ID - a\"b`,
		},
		{
			name:    "event time before 1970 floors to the millisecond, as chrono's timestamp_millis",
			msg:     runner.Message{ID: "m", Value: []byte("old"), EventTime: time.Unix(-2, 999_999_999)},
			message: "Payload - old Keys -  EventTime - -1001 Headers -  ID - m",
		},
		{
			name:    "a nanosecond before 1970",
			msg:     runner.Message{ID: "m", Value: []byte("old"), EventTime: time.Unix(0, -1)},
			message: "Payload - old Keys -  EventTime - -1 Headers -  ID - m",
		},
		{
			name:    "sub-millisecond event time truncated",
			msg:     runner.Message{ID: "m", Value: []byte("v"), EventTime: time.Unix(1, 999_999)},
			message: "Payload - v Keys -  EventTime - 1000 Headers -  ID - m",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			escaped := tc.escaped
			if escaped == "" {
				escaped = tc.message
			}
			line := writeNumaflow(t, &tc.msg)[0]
			if want := numaflowLine(escaped); line != want {
				t.Fatalf("got\n%s\nwant\n%s", line, want)
			}
			if got := messageOf(t, line); got != tc.message {
				t.Fatalf("message %q, want %q", got, tc.message)
			}
		})
	}
}

func TestNumaflowFormatDecodesPayloadLikeFromUTF8Lossy(t *testing.T) {
	// Expected values follow Rust's String::from_utf8_lossy: one U+FFFD per
	// maximal invalid subpart, not per byte (utf8.DecodeRune) nor per run
	// (strings.ToValidUTF8).
	for _, tc := range []struct {
		name      string
		in, want  string
		toValidGo string // what strings.ToValidUTF8 gives, where it differs
	}{
		{"std docs example (from_utf8_lossy)", "Hello \xF0\x90\x80World", "Hello \uFFFDWorld", ""},
		{"std docs example (Utf8Chunk)", "foo\xF1\x80bar", "foo\uFFFDbar", ""},
		{"Unicode table 3-8", "a\xF1\x80\x80\xE1\x80\xC2b\x80c\x80\xBFd", "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd", "a\uFFFDb\uFFFDc\uFFFDd"},
		{"truncated 4-byte at the end", "x\xF0\x90\x80", "x\uFFFD", ""},
		{"two truncated 4-byte sequences", "\xF0\x90\x80\xF0\x90\x80", "\uFFFD\uFFFD", "\uFFFD"},
		{"0x80 cannot follow 0xE0 (overlong)", "\xE0\x80", "\uFFFD\uFFFD", "\uFFFD"},
		{"surrogate", "\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD", "\uFFFD"},
		{"overlong slash", "\xC0\xAF", "\uFFFD\uFFFD", "\uFFFD"},
		{"past U+10FFFF", "\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD", "\uFFFD"},
		{"never a lead byte", "\xF5z\xFF", "\uFFFDz\uFFFD", ""},
		{"lead byte then ASCII", "\xC3(", "\uFFFD(", ""},
		{"truncated 3-byte then a valid one", "\xE2\x82\xE2\x82\xAC", "\uFFFD€", ""},
		{"valid U+FFFD kept", "\uFFFD", "\uFFFD", ""},
		{"largest code point", "\U0010FFFF", "\U0010FFFF", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := writeNumaflow(t, &runner.Message{ID: "m", Value: []byte(tc.in)})[0]
			got := strings.TrimPrefix(strings.TrimSuffix(messageOf(t, line), " Keys -  EventTime - -62135596800000 Headers -  ID - m"), "Payload - ")
			if got != tc.want {
				t.Fatalf("%q decoded to %q, want %q", tc.in, got, tc.want)
			}
			if tc.toValidGo != "" && strings.ToValidUTF8(tc.in, "\uFFFD") != tc.toValidGo {
				t.Fatalf("strings.ToValidUTF8(%q) = %q; the case no longer shows the difference", tc.in, strings.ToValidUTF8(tc.in, "\uFFFD"))
			}
		})
	}
}

func TestNumaflowFormatPrintsTheWholePayload(t *testing.T) {
	v := bytes.Repeat([]byte("0123456789"), 100_000) // 1 MB, many 64 KiB chunks
	line := writeNumaflow(t, &runner.Message{ID: "big", Value: v})[0]
	if want := "Payload - " + string(v) + " Keys - "; !strings.HasPrefix(messageOf(t, line), want) {
		t.Fatalf("the payload was not printed whole (%d bytes of line)", len(line))
	}
}

func TestNumaflowFormatStampsEachLineWithTheTimeOfLogging(t *testing.T) {
	var out bytes.Buffer
	ticks := []time.Time{time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.UTC)}
	s := logsink.NewNumaflow(&out, func() time.Time { t := ticks[0]; ticks = ticks[1:]; return t })
	if _, err := s.Write(context.Background(), messages(0, 2)); err != nil {
		t.Fatal(err)
	}
	var stamps []string
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var rec struct{ Timestamp string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		stamps = append(stamps, rec.Timestamp)
	}
	if want := []string{"2026-01-02T03:04:05.000006Z", "2026-01-02T03:04:05.999999Z"}; strings.Join(stamps, " ") != strings.Join(want, " ") {
		t.Fatalf("timestamps %v, want %v", stamps, want)
	}
}

// buildFromEnv builds the registered log sink from the environment, as
// the runner does, with its standard output caught, and returns what one
// message written through it prints.
func buildFromEnv(t *testing.T, env map[string]string, m *runner.Message) string {
	t.Helper()
	for _, name := range []string{"MV_LOG_FORMAT", "MV_LOG_MAX_VALUE"} {
		t.Setenv(name, "") // restored after the test
		os.Unsetenv(name)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	kind, ok := runner.LookupKind(runner.RoleSink, "log")
	if !ok {
		t.Fatal("log sink not registered")
	}
	cfg := kind.Config()
	if err := envconfig.Process("", cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.(*logsink.Config).Validate(runner.RoleSink); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stdout := os.Stdout
	os.Stdout = w
	built, err := kind.New(context.Background(), runner.Env{Role: runner.RoleSink}, cfg)
	os.Stdout = stdout
	if err != nil {
		t.Fatal(err)
	}
	if _, err := built.(runner.Sink).Write(context.Background(), []*runner.Message{m}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestFormatSetting(t *testing.T) {
	m := &runner.Message{ID: "a", Keys: []string{"k"}, Value: []byte("hello"), EventTime: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}
	t.Run("runner line by default", func(t *testing.T) {
		if got, want := buildFromEnv(t, nil, m), `sink id="a" keys="k" event_time=2024-01-02T03:04:05Z bytes=5 value="hello"`+"\n"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
	t.Run("numaflow", func(t *testing.T) {
		got := buildFromEnv(t, map[string]string{"MV_LOG_FORMAT": "numaflow", "MV_LOG_MAX_VALUE": "2"}, m)
		var rec map[string]string
		if err := json.Unmarshal([]byte(got), &rec); err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		if want := "Payload - hello Keys - k EventTime - 1704164645000 Headers -  ID - a"; rec["message"] != want {
			t.Fatalf("message %q, want %q (MV_LOG_MAX_VALUE must not apply)", rec["message"], want)
		}
		if ts, err := time.Parse(time.RFC3339Nano, rec["timestamp"]); err != nil || time.Since(ts) > time.Minute || time.Since(ts) < 0 {
			t.Fatalf("timestamp %q is not the time of logging: %v", rec["timestamp"], err)
		}
	})
}

func TestValidateFormat(t *testing.T) {
	for _, tc := range []struct {
		format string
		ok     bool
	}{{"runner", true}, {"numaflow", true}, {"json", false}, {"Numaflow", false}, {"", false}} {
		err := (&logsink.Config{MaxValue: 256, Format: tc.format}).Validate(runner.RoleSink)
		var ce *runner.ConfigError
		switch {
		case tc.ok && err != nil:
			t.Errorf("MV_LOG_FORMAT=%q refused: %v", tc.format, err)
		case !tc.ok && (!errors.As(err, &ce) || ce.Var != "MV_LOG_FORMAT" || ce.Value != tc.format):
			t.Errorf("MV_LOG_FORMAT=%q: %v, want a ConfigError naming MV_LOG_FORMAT", tc.format, err)
		}
	}
}
