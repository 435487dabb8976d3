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

	"github.com/cloudevents/sdk-go/v2/binding"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
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

// FuzzBinaryEventMatchesTheSDK checks that whatever headers and body arrive,
// one event read without the SDK's body copy equals the SDK's own decoding.
func FuzzBinaryEventMatchesTheSDK(f *testing.F) {
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Partitionkey: k\nCe-Myext: v\nContent-Type: application/json\n", []byte(`{"a":1}`))
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\nCe-Source: /s\nCe-Type: t\nCe-Time: 2020-01-01T00:00:00Z\n", []byte{0, 1, 2})
	f.Add("Content-Type: application/cloudevents+json\n", []byte(`{"specversion":"1.0","id":"x","source":"/s","type":"t","data_base64":"aGk="}`))
	f.Add("Ce-Specversion: 1.0\nCe-Id: 1\n", []byte(""))
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
