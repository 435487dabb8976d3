package cewire

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/monovertex/monovertex/runner"
)

// sdkEvents decodes what ReadEvents decodes with the SDK's own
// binding.ToEvent, the standard the body-sharing decoding must match.
func sdkEvents(t testing.TB, h http.Header, body []byte) (any, error) {
	msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body)))
	ev, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		return nil, err
	}
	return ev, nil
}

func TestBinaryEventDataIsTheBodyItself(t *testing.T) {
	h := http.Header{}
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "a1", "Ce-Source": "/s", "Ce-Type": "t",
		"Ce-Subject": "sub", "Ce-Myext": "v", "Content-Type": "application/octet-stream"} {
		h.Set(k, v)
	}
	for _, n := range []int{0, 1, 4 << 10, 1 << 20} {
		body := bytes.Repeat([]byte{0xab}, n)
		events, err := ReadEvents(h, body)
		if err != nil || len(events) != 1 {
			t.Fatalf("%d bytes: %d events, %v", n, len(events), err)
		}
		want, err := sdkEvents(t, h, body)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&events[0], want) {
			t.Fatalf("%d bytes: got %v, the SDK decodes %v", n, &events[0], want)
		}
		if n > 0 && &events[0].Data()[0] != &body[0] {
			t.Fatalf("%d bytes: the data is a copy of the body", n)
		}
	}
}

// TestBinaryEventTakesA10Event checks that a 1.0 event's attributes are
// read by binaryEvent, not handed to the SDK, and read as the SDK reads
// them; a 0.3 event is the SDK's.
func TestBinaryEventTakesA10Event(t *testing.T) {
	h := http.Header{}
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "a1", "Ce-Source": "/s", "Ce-Type": "t",
		"Ce-Subject": "sub", "Ce-Time": "2020-01-01T00:00:00Z", "Ce-Dataschema": "http://x/y",
		"Ce-Partitionkey": "k", "Ce-Myext": "v", "Content-Type": "application/octet-stream"} {
		h.Set(k, v)
	}
	got, ok, err := binaryEvent(h)
	if !ok || err != nil {
		t.Fatalf("binaryEvent: ok %v, %v; want the event", ok, err)
	}
	want, err := sdkEvents(t, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, the SDK decodes %v", got, want)
	}
	h.Set("Ce-Specversion", "0.3")
	if _, ok, _ := binaryEvent(h); ok {
		t.Fatal("binaryEvent took a 0.3 event")
	}
}

// FuzzBinaryEventMatchesTheSDK checks that whatever headers and body arrive,
// one event read without the SDK's body copy equals the SDK's own decoding.
func FuzzBinaryEventMatchesTheSDK(f *testing.F) {
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Partitionkey: k\nCe-Myext: v\nContent-Type: application/json\n", []byte(`{"a":1}`))
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Time: 2020-01-01T00:00:00Z\n", []byte{0, 1, 2})
	f.Add("Content-Type: application/cloudevents+json\n", []byte(`{"specversion":"1.0","id":"x","source":"/s","type":"t","data_base64":"aGk="}`))
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\n", []byte(""))
	// Each attribute's setter: trimming, an empty value as missing, parsing.
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Subject:\nCe-Dataschema: http://x/y\nContent-Type:\n", []byte("x"))
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: http://[::1]:80/a?b#c\nCe-Type: t\nCe-Subject: s\nCe-Time: 2020-01-01T00:00:00.5+01:00\nCe-Dataschema:\nContent-Type: text/plain\n", []byte("x"))
	f.Add("Ce-Specversion: 1.0\nCe-Id:\nCe-Source: /s\nCe-Type: t\n", []byte("x"))
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Time: yesterday\n", []byte("x"))
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Datacontenttype: x\n", []byte("x"))
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: %zz\nCe-Type: t\nCe-Dataschema: %zz\n", []byte("x"))
	f.Add("Ce-Specversion: 0.3\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Schemaurl: http://x\n", []byte("x"))
	f.Fuzz(func(t *testing.T, rawHeaders string, body []byte) {
		mh, err := textproto.NewReader(bufio.NewReader(strings.NewReader(rawHeaders + "\n\n"))).ReadMIMEHeader()
		if err != nil && len(mh) == 0 {
			return
		}
		h := http.Header(mh)
		if !IsCloudEvent(h) || checkCEHeaders(h) != nil {
			return
		}
		msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body)))
		if enc := msg.ReadEncoding(); enc != binding.EncodingBinary && enc != binding.EncodingStructured {
			return
		}
		got, gotErr := toEvent(msg, bytes.Clone(body))
		want, wantErr := sdkEvents(t, h, body)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("errors differ: got %v, the SDK %v", gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, the SDK decodes %v", got, want)
		}
	})
}

// sdkRequest is req written by the SDK's own binary-mode writer, the
// standard writeBinary must match.
func sdkRequest(t testing.TB, ev *event.Event, preset http.Header) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = preset.Clone()
	if err := cehttp.WriteRequest(binding.WithForceBinary(context.Background()), binding.ToMessage(ev), req); err != nil {
		t.Fatal(err)
	}
	return req
}

// readBody reads what a request sends, and what its GetBody would resend.
func readBody(t testing.TB, req *http.Request) (body, again []byte) {
	t.Helper()
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	if req.GetBody != nil {
		r, err := req.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		again, _ = io.ReadAll(r)
	}
	return body, again
}

// FuzzBinaryRequestMatchesTheSDK checks that a request written without
// the SDK's binding carries exactly the headers and body the SDK writes,
// for any message the mapper accepts and any header already configured.
func FuzzBinaryRequestMatchesTheSDK(f *testing.F) {
	f.Add("id-1", "k1", "note", "v", "subject", "s", []byte("hello"), int64(1_700_000_000_123), "text/plain", "Content-Type", "x/y")
	f.Add("x", "", "dataschema", "https://example.com/s", "source", "/elsewhere", []byte{}, int64(0), "", "Ce-Id", "configured")
	f.Add("x", "a,b", "type", "t2", "e1", "", []byte(`{"a":1}`), int64(-1), "application/json", "", "")
	m := newMapper(f)
	f.Fuzz(func(t *testing.T, id, key, h1, v1, h2, v2 string, value []byte, ms int64, ctype, presetName, presetValue string) {
		msg := &runner.Message{ID: id, Value: value, Headers: map[string]string{h1: v1, h2: v2}}
		if key != "" {
			msg.Keys = []string{key}
		}
		if ms != 0 {
			msg.EventTime = time.UnixMilli(ms)
		}
		if ctype != "" {
			msg.Headers[HeaderContentType] = ctype
		}
		ev, err := m.ToEvent(msg)
		if err != nil || ev.Validate() != nil || !headerSafe(&ev) {
			return
		}
		preset := http.Header{}
		if presetName != "" && presetValue != "" {
			preset[http.CanonicalHeaderKey(presetName)] = []string{presetValue}
		}
		want := sdkRequest(t, &ev, preset)
		got, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
		if err != nil {
			t.Fatal(err)
		}
		got.Header = preset.Clone()
		if !writeBinary(got, &ev) {
			t.Fatalf("a mapped event was left to the SDK: %v", ev)
		}
		if !reflect.DeepEqual(got.Header, want.Header) || got.ContentLength != want.ContentLength || (got.GetBody == nil) != (want.GetBody == nil) {
			t.Fatalf("headers %v, length %d, GetBody %t; the SDK writes %v, %d, %t",
				got.Header, got.ContentLength, got.GetBody != nil, want.Header, want.ContentLength, want.GetBody != nil)
		}
		gotBody, gotAgain := readBody(t, got)
		wantBody, wantAgain := readBody(t, want)
		if !bytes.Equal(gotBody, wantBody) || !bytes.Equal(gotAgain, wantAgain) {
			t.Fatalf("body %q (again %q); the SDK sends %q (again %q)", gotBody, gotAgain, wantBody, wantAgain)
		}
	})
}
