package http

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

// dropped are request headers never copied onto a message: credentials and
// what belongs to the connection, not to the message.
var dropped = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true,
	"Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Expect": true,
	HeaderEventTime: true,
}

// messages turns a request into messages: its CloudEvents, or its body.
func (s *Source) messages(r *http.Request, body []byte) ([]*runner.Message, error) {
	now := time.Now()
	if s.cfg.CloudEvents && cewire.IsCloudEvent(r.Header) {
		// BufferSize bounds the batch before the events past it are
		// decoded: more could never be queued anyway.
		msgs, err := cewire.ReadMessagesLimited(r.Context(), r.Header, body, s.cfg.BufferSize, nil)
		if err != nil {
			return nil, err
		}
		seen := make(map[string]bool, len(msgs))
		for _, m := range msgs {
			if !cewire.ValidID(m.ID) {
				// Refused here, where the caller can fix it, rather than
				// by a CloudEvents sink later as a permanent failure.
				return nil, fmt.Errorf("event id %q must be printable UTF-8 text", m.ID)
			}
			if strings.TrimSpace(m.ID) != m.ID {
				// " sp" and "sp" are one id to a sink that trims.
				return nil, fmt.Errorf("event id %q must not start or end with white space", m.ID)
			}
			if seen[m.ID] {
				return nil, fmt.Errorf("the batch has two events with id %q", m.ID)
			}
			seen[m.ID] = true
			if m.EventTime.IsZero() {
				m.EventTime = now
			}
			requestTrace(m, r.Header)
		}
		return msgs, nil
	}
	if h := binaryAttribute(r.Header); h != "" && s.cfg.CloudEvents {
		return nil, fmt.Errorf("the request has a %s header but no Ce-Specversion: send Ce-Specversion: 1.0 with a binary CloudEvent", h)
	}
	m := &runner.Message{Value: body, EventTime: now, Headers: map[string]string{}}
	m.ID = strings.TrimSpace(r.Header.Get(HeaderID))
	if m.ID == "" {
		// numaflow-http's Uuid::now_v7(): time-ordered, so IDs sort by
		// arrival, lower-case hyphenated as the uuid crate prints it.
		m.ID = uuid.Must(uuid.NewV7()).String()
	} else if !cewire.ValidID(m.ID) {
		return nil, fmt.Errorf("%s must be printable UTF-8 text", HeaderID)
	}
	if v := r.Header.Get(HeaderEventTime); v != "" {
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s must be milliseconds since the epoch, got %q", HeaderEventTime, v)
		}
		m.EventTime = time.UnixMilli(ms)
	}
	if v, ok := r.Header[HeaderKeys]; ok && len(v) > 0 {
		// Trimmed, empty ones left out, as Numaflow parses them.
		for _, k := range strings.Split(v[0], ",") {
			if k = strings.TrimSpace(k); k != "" {
				m.Keys = append(m.Keys, k)
			}
		}
	}
	for name, values := range r.Header {
		if dropped[name] || len(values) == 0 {
			continue
		}
		m.Headers[strings.ToLower(name)] = values[0]
	}
	// Numaflow puts the ID, given or made, in this header, spelt so,
	// beside the request's own headers (lower case).
	m.Headers[HeaderID] = m.ID
	return []*runner.Message{m}, nil
}

// requestTrace gives an event without a distributed-tracing extension the
// request's W3C traceparent and tracestate headers: the event's own
// extension says where the event came from and wins, the headers say which
// call delivered it. (A plain body keeps all its headers, these among them.)
func requestTrace(m *runner.Message, h http.Header) {
	if _, ok := m.Headers[runner.TraceParentHeader]; ok {
		return
	}
	tp := h.Get("Traceparent")
	if tp == "" {
		return
	}
	m.Headers[runner.TraceParentHeader] = tp
	if ts := h.Get("Tracestate"); ts != "" {
		m.Headers[runner.TraceStateHeader] = ts
	}
}

// binaryAttribute names a required CloudEvents attribute header of the
// request, or is empty when it has none. Such a request without
// Ce-Specversion is a broken binary event, not a plain body.
func binaryAttribute(h http.Header) string {
	for _, name := range []string{"Ce-Id", "Ce-Source", "Ce-Type"} {
		if _, ok := h[name]; ok {
			return name
		}
	}
	return ""
}
