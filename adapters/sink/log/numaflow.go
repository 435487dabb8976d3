package log

import (
	"slices"
	"strconv"

	"github.com/monovertex/monovertex/runner"
)

// The numaflow format is byte for byte what a Numaflow log sink prints
// (numaproj/numaflow 63ba4e8, 2026-08), so tools that read its output read
// the runner's:
//
//   - rust/numaflow-core/src/sinker/sink/log.rs builds, per message,
//     format!("Payload - {} Keys - {} EventTime - {} Headers - {} ID - {}",
//     String::from_utf8_lossy(&msg.value), msg.keys.join(","),
//     msg.event_time.timestamp_millis(), headers, msg.id), headers being
//     "{k}: {v}, " per entry of a HashMap, and logs it with
//     tracing::info!("{}", log_line).
//   - rust/numaflow/src/setup_tracing.rs, unless NUMAFLOW_DEBUG=true, sets
//     fmt::layer().with_ansi(false).json().flatten_event(true), writing to
//     stdout (fmt_layer.rs: Layer::default's make_writer is io::stdout).
//   - tracing-subscriber 0.3.23 (Numaflow's Cargo.lock),
//     fmt/format/json.rs Format<Json>::format_event writes one compact
//     serde_json map and a newline: "timestamp", "level", the event's
//     fields flattened (here only "message"), "target", then "span" and
//     "spans" only when the event has a current span; filename, line
//     number and thread name/id are off by default (Format::default).
//     Its ANSI sanitization (format/escape.rs) is applied by the text
//     formatters only, not by the JSON one.
//   - The timestamp is the default timer, SystemTime: fmt/time/datetime.rs
//     prints "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z" in UTC, the
//     microseconds truncated (nanos / 1_000) — the time of logging, not
//     the event time.
//   - The level is tracing-serde 0.2.0's SerializeLevel: "INFO".
//   - The message is recorded by tracing-serde's SerdeMapVisitor as
//     format_args!("{:?}", value) of the format_args!("{}", log_line), i.e.
//     log_line itself, which serde_json 1.0.145 escapes (ser.rs ESCAPE,
//     format_escaped_str_contents): '"', '\\', \b \t \n \f \r by name, the
//     other bytes below 0x20 as \u00xx with lowercase hex, nothing else (not
//     '<', '>', '&', DEL or U+2028/2029, which Go's encoding/json escapes).
//   - The target is the event's module path: numaflow_core::sinker::sink::log.
//   - No span is current when the sink logs: numaflow-core enters no
//     tracing span (no .enter, in_scope, .instrument or #[instrument]); its
//     per-message numaflow.vertex.process span, created only when an OTLP
//     endpoint is set, is held by the ack handle, never entered, and the
//     sink stage spans are OpenTelemetry API spans, which the fmt layer
//     does not see. So a line has no "span" or "spans" key.
//
// Where the runner's message can hold what Numaflow's cannot, the line
// stays valid JSON and deterministic: headers are printed sorted by name
// (Numaflow's HashMap order is unspecified), and keys, header names and
// values and the ID, which are Rust Strings there and so valid UTF-8, are
// decoded as lossily as the payload when they are not.
const (
	numaflowTimestamp = "2006-01-02T15:04:05.000000Z"
	numaflowTarget    = "numaflow_core::sinker::sink::log"
)

func (s *Sink) formatNumaflow(b []byte, m *runner.Message) []byte {
	b = append(b, `{"timestamp":"`...)
	b = s.now().UTC().AppendFormat(b, numaflowTimestamp)
	b = append(b, `","level":"INFO","message":"Payload - `...)
	b = appendLossyJSON(b, m.Value)
	b = append(b, " Keys - "...)
	for i, k := range m.Keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLossyJSON(b, k)
	}
	b = append(b, " EventTime - "...)
	// UnixMilli floors, as chrono's timestamp_millis does before 1970.
	b = strconv.AppendInt(b, m.EventTime.UnixMilli(), 10)
	b = append(b, " Headers - "...)
	s.hkeys = s.hkeys[:0]
	for k := range m.Headers {
		s.hkeys = append(s.hkeys, k)
	}
	slices.Sort(s.hkeys)
	for _, k := range s.hkeys {
		b = appendLossyJSON(b, k)
		b = append(b, ": "...)
		b = appendLossyJSON(b, m.Headers[k])
		b = append(b, ", "...)
	}
	clear(s.hkeys)
	b = append(b, " ID - "...)
	b = appendLossyJSON(b, m.ID)
	return append(b, `","target":"`+numaflowTarget+`"}`+"\n"...)
}

// appendLossyJSON appends the inside of the JSON string serde_json writes
// for String::from_utf8_lossy(p): each invalid part of p becomes one
// U+FFFD, and only '"', '\\' and control bytes are escaped.
func appendLossyJSON[T string | []byte](b []byte, p T) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(p); {
		c := p[i]
		if c >= 0x80 {
			n, ok := utf8Seq(p, i)
			if !ok {
				b = append(b, p[start:i]...)
				b = append(b, "\uFFFD"...)
				start = i + n
			}
			i += n
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, p[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, `\b`...)
		case '\t':
			b = append(b, `\t`...)
		case '\n':
			b = append(b, `\n`...)
		case '\f':
			b = append(b, `\f`...)
		case '\r':
			b = append(b, `\r`...)
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	return append(b, p[start:]...)
}

// utf8Seq measures the sequence at p[i], a byte of 0x80 or more: its length
// when it is valid UTF-8, else the length of the invalid part that
// String::from_utf8_lossy replaces with one U+FFFD. That is Rust's
// Utf8Chunks (core/src/str/lossy.rs), the Unicode "maximal subpart": the
// lead byte and the continuation bytes that could still complete it, so
// "\xF0\x90\x80" is one U+FFFD and "\xE0\x80" two (0x80 cannot follow
// 0xE0). Go's strings.ToValidUTF8 replaces a whole run of invalid bytes
// with one and utf8.DecodeRune reports every byte on its own; neither
// matches. The ranges are those of Go's utf8 decoder, so a sequence is
// valid here exactly when utf8.DecodeRune accepts it.
func utf8Seq[T string | []byte](p T, i int) (n int, valid bool) {
	c := p[i]
	var width int
	lo, hi := byte(0x80), byte(0xBF) // second byte's range
	switch {
	case c >= 0xC2 && c <= 0xDF:
		width = 2
	case c == 0xE0:
		width, lo = 3, 0xA0 // no overlong forms
	case c == 0xED:
		width, hi = 3, 0x9F // no surrogates
	case c >= 0xE1 && c <= 0xEF:
		width = 3
	case c == 0xF0:
		width, lo = 4, 0x90 // no overlong forms
	case c == 0xF4:
		width, hi = 4, 0x8F // nothing past U+10FFFF
	case c >= 0xF1 && c <= 0xF3:
		width = 4
	default: // a continuation byte, 0xC0, 0xC1 or 0xF5 and up: never a lead
		return 1, false
	}
	for k := 1; k < width; k++ {
		if i+k >= len(p) || p[i+k] < lo || p[i+k] > hi {
			return k, false
		}
		lo, hi = 0x80, 0xBF
	}
	return width, true
}
