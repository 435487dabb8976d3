package cewire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/monovertex/monovertex/runner"
)

func newMapper(t testing.TB) *Mapper {
	t.Helper()
	m, err := New(Config{Type: DefaultType}, "orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wire sends ev through a real HTTP/1.1 serialisation and back, the way a
// request crosses the network.
func wire(t testing.TB, ev *event.Event, mode Mode) (http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteRequest(context.Background(), req, ev, mode); err != nil {
		t.Fatalf("write request: %v", err)
	}
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatalf("serialise request: %v", err)
	}
	back, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		t.Fatalf("parse request: %v\n%s", err, buf.String())
	}
	body, err := io.ReadAll(back.Body)
	if err != nil {
		t.Fatal(err)
	}
	return back.Header, body
}

func roundTrip(t testing.TB, m *Mapper, msg *runner.Message, mode Mode) *runner.Message {
	t.Helper()
	ev, err := m.ToEvent(msg)
	if err != nil {
		t.Fatalf("to event: %v", err)
	}
	h, body := wire(t, &ev, mode)
	evs, err := ReadEvents(h, body)
	if err != nil {
		t.Fatalf("read events: %v\nheaders %v\nbody %q", err, h, body)
	}
	if len(evs) != 1 {
		t.Fatalf("read %d events, want 1", len(evs))
	}
	out, err := ToMessage(&evs[0])
	if err != nil {
		t.Fatalf("to message: %v", err)
	}
	return out
}

func TestToEventAttributes(t *testing.T) {
	m := newMapper(t)
	at := time.UnixMilli(1_700_000_000_123)
	ev, err := m.ToEvent(&runner.Message{
		ID: "m-1", Keys: []string{"user-42"}, Value: []byte(`{"a":1}`), EventTime: at,
		Headers: map[string]string{
			"content-type": "application/json", "origin": "test", "Bad-Name": "x",
			"waytoolongextensionname": "x", "id": "spoof", "partitionkey": "spoof",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID() != "m-1" || ev.Source() != "/monovertex/orders" || ev.Type() != DefaultType {
		t.Fatalf("attributes: id %q source %q type %q", ev.ID(), ev.Source(), ev.Type())
	}
	if !ev.Time().Equal(at) {
		t.Fatalf("time %v, want %v", ev.Time(), at)
	}
	if ev.DataContentType() != "application/json" {
		t.Fatalf("datacontenttype %q", ev.DataContentType())
	}
	want := map[string]any{"partitionkey": "user-42", "origin": "test"}
	if !reflect.DeepEqual(ev.Extensions(), want) {
		t.Fatalf("extensions %v, want %v", ev.Extensions(), want)
	}
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestToEventKeepsContextHeaders(t *testing.T) {
	m := newMapper(t)
	ev, err := m.ToEvent(&runner.Message{ID: "x", Headers: map[string]string{
		HeaderSource: "https://shop.example/orders", HeaderType: "com.example.order.created",
		HeaderSubject: "order-7", HeaderDataSchema: "https://schemas.example/order.json",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Source() != "https://shop.example/orders" || ev.Type() != "com.example.order.created" ||
		ev.Subject() != "order-7" || ev.DataSchema() != "https://schemas.example/order.json" {
		t.Fatalf("context headers not applied: %s", ev.String())
	}
	if len(ev.Extensions()) != 0 {
		t.Fatalf("context headers leaked into extensions: %v", ev.Extensions())
	}
}

func TestToEventRejectsEmptyID(t *testing.T) {
	m := newMapper(t)
	for _, id := range []string{"", "  ", "a\x00b"} {
		if _, err := m.ToEvent(&runner.Message{ID: id}); !errors.Is(err, ErrInvalidID) {
			t.Errorf("id %q: err %v, want ErrInvalidID", id, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{Source: "https://example.com/x", Type: "a.b"}, true},
		{Config{Source: "%zz"}, false},
		{Config{Type: "bad\ntype"}, false},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%+v: err %v, want ok=%v", c.cfg, err, c.ok)
		}
		var ce *runner.ConfigError
		if err != nil && !errors.As(err, &ce) {
			t.Errorf("%+v: error %T is not a *runner.ConfigError", c.cfg, err)
		}
	}
}

func TestKeysEncoding(t *testing.T) {
	cases := []struct {
		keys []string
		enc  string
	}{
		{[]string{"user-42"}, "user-42"},
		{[]string{"a", "b"}, "a,b"},
		{[]string{"a,b", "50%"}, "a%2Cb,50%25"},
		{[]string{""}, ""},
		{[]string{"", ""}, ","},
		{[]string{"café"}, "café"},
		{[]string{"tab\there"}, "tab%09here"},
		{[]string{"\xff"}, "%FF"},
	}
	for _, c := range cases {
		if got := EncodeKeys(c.keys); got != c.enc {
			t.Errorf("EncodeKeys(%q) = %q, want %q", c.keys, got, c.enc)
		}
		if got := DecodeKeys(c.enc); !reflect.DeepEqual(got, c.keys) {
			t.Errorf("DecodeKeys(%q) = %q, want %q", c.enc, got, c.keys)
		}
	}
	// Other producers' partitionkeys with a stray '%' survive.
	if got := DecodeKeys("100%"); !reflect.DeepEqual(got, []string{"100%"}) {
		t.Errorf("DecodeKeys(100%%) = %q", got)
	}
}

func TestRoundTripBothModes(t *testing.T) {
	m := newMapper(t)
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	msg := &runner.Message{
		ID: "rt-1", Keys: []string{"k1", "k,2"}, Value: []byte("hello\x00world"), EventTime: at,
		Headers: map[string]string{"content-type": "application/octet-stream", "origin": "unit", "traceparent": "00-abc-def-01"},
	}
	for _, mode := range []Mode{ModeBinary, ModeStructured} {
		t.Run(string(mode), func(t *testing.T) {
			out := roundTrip(t, m, msg, mode)
			if out.ID != msg.ID || !bytes.Equal(out.Value, msg.Value) || !out.EventTime.Equal(at) ||
				!reflect.DeepEqual(out.Keys, msg.Keys) {
				t.Fatalf("round trip changed the message: %+v", out)
			}
			for k, v := range msg.Headers {
				if out.Headers[k] != v {
					t.Fatalf("header %s = %q, want %q (all %v)", k, out.Headers[k], v, out.Headers)
				}
			}
			if out.Headers[HeaderSource] != "/monovertex/orders" || out.Headers[HeaderType] != DefaultType {
				t.Fatalf("context headers %v", out.Headers)
			}
		})
	}
}

func TestBinaryFallsBackToStructuredForUnsafeValues(t *testing.T) {
	m := newMapper(t)
	ev, err := m.ToEvent(&runner.Message{ID: "u", Keys: []string{" padded "}, Headers: map[string]string{"note": "naïve"}})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := wire(t, &ev, ModeBinary)
	if !strings.HasPrefix(h.Get("Content-Type"), "application/cloudevents+json") {
		t.Fatalf("content type %q, want structured mode", h.Get("Content-Type"))
	}
	out := roundTrip(t, m, &runner.Message{ID: "u", Keys: []string{" padded "}, Headers: map[string]string{"note": "naïve"}}, ModeBinary)
	if out.Keys[0] != " padded " || out.Headers["note"] != "naïve" {
		t.Fatalf("values changed: %q %v", out.Keys, out.Headers)
	}
}

func TestJSONDataInlinedInStructuredMode(t *testing.T) {
	m := newMapper(t)
	ev, err := m.ToEvent(&runner.Message{ID: "j", Value: []byte(`{"n":1}`), Headers: map[string]string{"content-type": "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	_, body := wire(t, &ev, ModeStructured)
	if !bytes.Contains(body, []byte(`"data":{"n":1}`)) {
		t.Fatalf("JSON data not inlined: %s", body)
	}
}

func TestReadEventsRejectsMalformed(t *testing.T) {
	cases := []struct {
		name string
		h    http.Header
		body string
	}{
		{"binary without id", http.Header{"Ce-Specversion": {"1.0"}, "Ce-Source": {"/x"}, "Ce-Type": {"t"}}, "x"},
		{"unknown specversion", http.Header{"Ce-Specversion": {"9.9"}, "Ce-Id": {"1"}, "Ce-Source": {"/x"}, "Ce-Type": {"t"}}, ""},
		{"bare ce- header", http.Header{"Ce-Specversion": {"1.0"}, "Ce-": {"x"}}, ""},
		{"dash in extension", http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"/x"}, "Ce-Type": {"t"}, "Ce-A-B": {"x"}}, ""},
		{"structured garbage", http.Header{"Content-Type": {"application/cloudevents+json"}}, "{not json"},
		{"structured missing type", http.Header{"Content-Type": {"application/cloudevents+json"}}, `{"specversion":"1.0","id":"1","source":"/x"}`},
		{"batch garbage", http.Header{"Content-Type": {BatchContentType}}, `[{"specversion":"1.0"`},
		{"batch with invalid event", http.Header{"Content-Type": {BatchContentType}}, `[{"specversion":"1.0","id":"1","source":"/x"}]`},
		{"unknown cloudevents format", http.Header{"Content-Type": {"application/cloudevents+xml"}}, `<x/>`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ReadEvents(c.h, []byte(c.body)); err == nil || errors.Is(err, ErrNotCloudEvent) {
				t.Fatalf("err = %v, want a malformed-event error", err)
			}
		})
	}
	if _, err := ReadEvents(http.Header{"Content-Type": {"text/plain"}}, []byte("hi")); !errors.Is(err, ErrNotCloudEvent) {
		t.Fatalf("plain body: err %v, want ErrNotCloudEvent", err)
	}
}

func TestReadEventsBatch(t *testing.T) {
	body := `[{"specversion":"1.0","id":"1","source":"/x","type":"t","data":"a"},
	          {"specversion":"1.0","id":"2","source":"/x","type":"t","partitionkey":"k","data_base64":"AAE="}]`
	evs, err := ReadEvents(http.Header{"Content-Type": {BatchContentType}}, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events", len(evs))
	}
	m, _ := ToMessage(&evs[1])
	if !bytes.Equal(m.Value, []byte{0, 1}) || !reflect.DeepEqual(m.Keys, []string{"k"}) {
		t.Fatalf("second event: %+v", m)
	}
	if evs, err := ReadEvents(http.Header{"Content-Type": {BatchContentType}}, []byte(`[]`)); err != nil || len(evs) != 0 {
		t.Fatalf("empty batch: %d events, %v", len(evs), err)
	}
}

func TestToMessageFormatsTypedExtensions(t *testing.T) {
	body := `{"specversion":"1.0","id":"1","source":"/x","type":"t","count":3,"flag":true}`
	evs, err := ReadEvents(http.Header{"Content-Type": {"application/cloudevents+json"}}, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ToMessage(&evs[0])
	if err != nil {
		t.Fatal(err)
	}
	if m.Headers["count"] != "3" || m.Headers["flag"] != "true" {
		t.Fatalf("headers %v", m.Headers)
	}
}

// FuzzRoundTrip checks that any message maps to a valid event that crosses
// HTTP in either mode and maps back to the same message, up to the
// documented losses (trimmed id, dropped invalid headers, times outside
// years 0-9999).
func FuzzRoundTrip(f *testing.F) {
	f.Add("id-1", "k1", "k2", uint8(2), "origin", "test", []byte("hello"), int64(1_700_000_000_000), "text/plain", false)
	f.Add(" spaced ", "a,b", "%", uint8(1), "Bad-Name", "v", []byte{0, 1, 2}, int64(0), "", true)
	f.Add("x", "", "", uint8(0), "note", "naïve\x01", []byte(`{"a":1}`), int64(-62135596800001), "application/json", true)
	m := newMapper(f)
	f.Fuzz(func(t *testing.T, id, k1, k2 string, nkeys uint8, hname, hval string, value []byte, ms int64, ctype string, structured bool) {
		msg := &runner.Message{ID: id, Value: value, Headers: map[string]string{}}
		switch nkeys % 3 {
		case 1:
			msg.Keys = []string{k1}
		case 2:
			msg.Keys = []string{k1, k2}
		}
		if ms != 0 {
			msg.EventTime = time.UnixMilli(ms)
		}
		msg.Headers[hname] = hval
		if ctype != "" && hname != HeaderContentType {
			msg.Headers[HeaderContentType] = ctype
		}
		ev, err := m.ToEvent(msg)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("unexpected error: %v", err)
			}
			trimmed := strings.TrimSpace(id)
			if trimmed != "" && utf8.ValidString(trimmed) && validString(trimmed) {
				t.Fatalf("valid id %q rejected", id)
			}
			return
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("invalid event: %v\n%s", err, ev.String())
		}
		mode := ModeBinary
		if structured {
			mode = ModeStructured
		}
		out := roundTrip(t, m, msg, mode)
		if out.ID != strings.TrimSpace(id) {
			t.Fatalf("id %q, want %q", out.ID, strings.TrimSpace(id))
		}
		if !bytes.Equal(out.Value, value) {
			t.Fatalf("value %q, want %q", out.Value, value)
		}
		if len(msg.Keys) > 0 && !reflect.DeepEqual(out.Keys, msg.Keys) {
			t.Fatalf("keys %q, want %q", out.Keys, msg.Keys)
		}
		if len(msg.Keys) == 0 && out.Keys != nil {
			t.Fatalf("keys %q from a message without keys", out.Keys)
		}
		if y := msg.EventTime.UTC().Year(); !msg.EventTime.IsZero() && y >= 0 && y <= 9999 && !out.EventTime.Equal(msg.EventTime) {
			t.Fatalf("time %v, want %v", out.EventTime, msg.EventTime)
		}
		if ValidExtensionName(hname) && validString(hval) && out.Headers[hname] != hval {
			t.Fatalf("header %q = %q, want %q", hname, out.Headers[hname], hval)
		}
		for k := range out.Headers {
			if _, sent := msg.Headers[k]; !sent && k != HeaderSource && k != HeaderType {
				t.Fatalf("header %q appeared from nowhere: %v", k, out.Headers)
			}
		}
	})
}

// FuzzReadEvents checks that no request header or body makes the decoder
// panic, and that whatever it accepts is a valid event.
func FuzzReadEvents(f *testing.F) {
	f.Add("Ce-Specversion", "1.0", "application/json", []byte(`{"a":1}`))
	f.Add("Ce-", "x", "", []byte(""))
	f.Add("X-Other", "1", "application/cloudevents+json", []byte(`{"specversion":"1.0","id":"1","source":"/x","type":"t"}`))
	f.Add("X-Other", "1", BatchContentType, []byte(`[{"specversion":"1.0","id":"1","source":"/x","type":"t","data_base64":"AA=="}]`))
	f.Fuzz(func(t *testing.T, hname, hval, ctype string, body []byte) {
		h := http.Header{}
		h.Set("Ce-Id", "1")
		h.Set("Ce-Source", "/s")
		h.Set("Ce-Type", "t")
		if hname != "" {
			h[http.CanonicalHeaderKey(hname)] = []string{hval}
		}
		if ctype != "" {
			h.Set("Content-Type", ctype)
		}
		evs, err := ReadEvents(h, body)
		if err != nil {
			return
		}
		for i := range evs {
			if err := evs[i].Validate(); err != nil {
				t.Fatalf("accepted an invalid event: %v", err)
			}
			if _, err := ToMessage(&evs[i]); err != nil {
				t.Fatalf("accepted an event that does not map: %v", err)
			}
		}
	})
}

func ExampleEncodeKeys() {
	fmt.Println(EncodeKeys([]string{"user-42", "eu,west", "100%"}))
	// Output: user-42,eu%2Cwest,100%25
}
