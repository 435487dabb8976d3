package http

import (
	"bufio"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
)

// FuzzRequest feeds arbitrary headers and bodies through the HTTP source's
// request parsing (messages): CloudEvents in binary, structured and batch
// mode, and plain bodies with the Numaflow headers. Whatever arrives, the
// parse either fails (the caller gets 400) or yields messages the engine
// can carry: non-empty ids, unique within the request, an event time, the
// body as the value of a plain message, and never the caller's credentials
// among the headers.
func FuzzRequest(f *testing.F) {
	for _, seed := range []struct{ headers, body string }{
		{"Content-Type: text/plain\nX-Numaflow-Id: abc\nX-Numaflow-Keys: a, b\nX-Numaflow-Event-Time: 1700000000000\nAuthorization: Bearer secret\n", "hello"},
		{"Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Partitionkey: k\nCe-Myext: v\nContent-Type: application/json\n", `{"a":1}`},
		{"Content-Type: application/cloudevents+json\n", `{"specversion":"1.0","id":"x","source":"/s","type":"t","data_base64":"aGk="}`},
		{"Content-Type: application/cloudevents-batch+json\n", `[{"specversion":"1.0","id":"a","source":"/s","type":"t"},{"specversion":"1.0","id":"b","source":"/s","type":"t","data":{"x":1}}]`},
		{"Content-Type: application/cloudevents-batch+json\n", `[{"specversion":"1.0","id":"a","source":"/s","type":"t"},{"specversion":"1.0","id":"a","source":"/s","type":"t"}]`},
		{"Ce-Specversion: 0.3\nCe-Id: 1\n", ""},
		{"X-Numaflow-Event-Time: soon\n", "x"},
		{"", ""},
	} {
		f.Add(seed.headers, []byte(seed.body))
	}
	s := &Source{name: "fuzz", inflight: map[string]*entry{}}
	f.Fuzz(func(t *testing.T, rawHeaders string, body []byte) {
		h, err := textproto.NewReader(bufio.NewReader(strings.NewReader(rawHeaders + "\n\n"))).ReadMIMEHeader()
		if err != nil && len(h) == 0 {
			return // not a header block a server would hand over
		}
		r := &http.Request{Method: http.MethodPost, Header: http.Header(h)}
		msgs, err := s.messages(r, body)
		if err != nil {
			if msgs != nil {
				t.Fatalf("messages and an error: %d, %v", len(msgs), err)
			}
			return
		}
		ce := cewire.IsCloudEvent(r.Header)
		if !ce && len(msgs) != 1 {
			t.Fatalf("a plain request made %d messages", len(msgs))
		}
		seen := map[string]bool{}
		for _, m := range msgs {
			if strings.TrimSpace(m.ID) == "" || !utf8.ValidString(m.ID) {
				t.Fatalf("message id %q is empty or not UTF-8", m.ID)
			}
			if !ce && !cewire.ValidID(m.ID) {
				t.Fatalf("plain message id %q is not printable text", m.ID)
			}
			if seen[m.ID] {
				t.Fatalf("two messages with id %q in one request", m.ID)
			}
			seen[m.ID] = true
			if m.EventTime.IsZero() {
				t.Fatalf("message %q has no event time", m.ID)
			}
			for name := range m.Headers {
				switch strings.ToLower(name) {
				case "authorization", "proxy-authorization", "cookie":
					t.Fatalf("the caller's %s header was copied onto the message", name)
				}
			}
			if !ce && string(m.Value) != string(body) {
				t.Fatalf("plain message value differs from the body")
			}
		}
	})
}

// FuzzGuardFraming feeds arbitrary bytes to the guard's reading of a
// request head and checks it against net/http's, which reads what the
// guard hands on: wherever the guard finds a head and accepts its framing,
// net/http must end that head at the same byte and frame the body the same
// way (the same Content-Length, or chunked). A difference is what request
// smuggling lives on.
func FuzzGuardFraming(f *testing.F) {
	for _, seed := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\nHost: x\nContent-Length: 1\n\nx",
		"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 007\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked \r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		end := headEnd(in, 0)
		if end == 0 {
			return
		}
		body, refusal := framing(in[:end])
		if refusal != "" {
			return
		}
		const sentinel = "\x00after"
		br := bufio.NewReader(strings.NewReader(string(in[:end]) + sentinel))
		req, err := http.ReadRequest(br)
		if err != nil {
			return // net/http refuses it: the connection closes
		}
		if br.Buffered() != len(sentinel) {
			t.Fatalf("the guard ends the head at byte %d, net/http %d bytes later", end, len(sentinel)-br.Buffered())
		}
		switch {
		case body == rawBody:
			if len(req.TransferEncoding) != 1 || req.TransferEncoding[0] != "chunked" || req.ContentLength != -1 {
				t.Fatalf("guard: chunked; net/http: Transfer-Encoding %q, Content-Length %d", req.TransferEncoding, req.ContentLength)
			}
		case req.ContentLength != body || len(req.TransferEncoding) != 0:
			t.Fatalf("guard: %d body bytes; net/http: Content-Length %d, Transfer-Encoding %q", body, req.ContentLength, req.TransferEncoding)
		}
	})
}
