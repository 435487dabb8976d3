package cewire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/monovertex/monovertex/runner"
)

func TestDeadLetterExtensions(t *testing.T) {
	long := []byte(strings.Repeat("x", 2000))
	refusal := func(body []byte) error {
		return runner.Permanent(fmt.Errorf("cloudevents sink: message %q: %w", "m", &StatusError{URL: "https://broker.example/ns/default", Status: 400, Raw: body}))
	}
	cases := []struct {
		name  string
		cause error
		want  map[string]any // extension -> value; absent: not set
	}{
		{"no cause: the sink asked for the fallback", nil, map[string]any{}},
		{"refusal with a short body", refusal([]byte("bad")), map[string]any{
			ErrorDestExtension: "https://broker.example/ns/default", ErrorCodeExtension: int32(400), ErrorDataExtension: "YmFk"}},
		{"refusal with an empty body", refusal(nil), map[string]any{
			ErrorDestExtension: "https://broker.example/ns/default", ErrorCodeExtension: int32(400), ErrorDataExtension: ""}},
		{"refusal with a body Knative cuts", refusal(long), map[string]any{
			ErrorDestExtension: "https://broker.example/ns/default", ErrorCodeExtension: int32(400),
			ErrorDataExtension: base64.StdEncoding.EncodeToString(long)[:1024]}},
		{"no answer", &TransportError{URL: "http://sink.example/", Err: errors.New("connection reset by peer")}, map[string]any{
			ErrorDestExtension: "http://sink.example/", ErrorCodeExtension: int32(500),
			ErrorDataExtension: base64.StdEncoding.EncodeToString([]byte("dispatch error: connection reset by peer"))}},
		{"a sink that is not CloudEvents", errors.New("kafka: topic missing"), map[string]any{
			ErrorCodeExtension: int32(500), ErrorDataExtension: base64.StdEncoding.EncodeToString([]byte("dispatch error: kafka: topic missing"))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := event.New()
			ev.SetID("m")
			ev.SetSource("/s")
			ev.SetType("t")
			if err := SetDeadLetterExtensions(&ev, c.cause); err != nil {
				t.Fatal(err)
			}
			ext := ev.Extensions()
			if len(ext) != len(c.want) {
				t.Fatalf("extensions %v, want %v", ext, c.want)
			}
			for k, v := range c.want {
				got := ext[k]
				if k == ErrorDestExtension {
					got, _ = types.Format(got)
				}
				if got != v {
					t.Errorf("%s = %#v, want %#v", k, got, v)
				}
			}
			// Structured mode carries the code as a JSON number, as
			// Knative's integer extension.
			if c.cause != nil {
				b, err := json.Marshal(ev)
				if err != nil {
					t.Fatal(err)
				}
				var m map[string]any
				_ = json.Unmarshal(b, &m)
				if _, ok := m[ErrorCodeExtension].(float64); !ok {
					t.Errorf("knativeerrorcode in JSON is %#v, want a number", m[ErrorCodeExtension])
				}
			}
		})
	}
	if got := len(ErrorData(long)); got != 1024 {
		t.Errorf("ErrorData of 2000 bytes is %d characters, want 1024", got)
	}
}

// TestDefaultSourceNamesTheRunner: where Knative sets NAMESPACE, the
// default source names the runner as Knative's sources name themselves;
// MV_CE_SOURCE still wins.
func TestDefaultSourceNamesTheRunner(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "/monovertex/orders"},
		{Config{Namespace: "shop"}, "/apis/v1/namespaces/shop/monovertices/orders"},
		{Config{Namespace: "shop", Source: "https://example.com/orders"}, "https://example.com/orders"},
	} {
		m, err := New(c.cfg, "orders", nil)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := m.ToEvent(&runner.Message{ID: "m", Value: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Source() != c.want {
			t.Errorf("%+v: source %q, want %q", c.cfg, ev.Source(), c.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-5", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"soon", 0},
	} {
		if got := parseRetryAfter(c.v, now); got != c.want {
			t.Errorf("Retry-After %q: %v, want %v", c.v, got, c.want)
		}
	}
}

// TestCheckStatusAsksForTheRetryAfter: a 429 or 503 asks the engine to
// wait what Retry-After says, bounded by RetryAfterMax (0: ignored); other
// retried statuses ask nothing.
func TestCheckStatusAsksForTheRetryAfter(t *testing.T) {
	for _, c := range []struct {
		status   int
		header   string
		max      time.Duration
		wantWait time.Duration
	}{
		{429, "5", time.Minute, 5 * time.Second},
		{503, "3600", time.Minute, time.Minute},
		{503, "5", 0, 0},
		{500, "5", time.Minute, 0},
		{429, "", time.Minute, 0},
	} {
		cl := NewClient(ClientOptions{URL: "http://127.0.0.1:1/", RetryAfterMax: c.max})
		err := cl.CheckStatus(&Response{Status: c.status, Header: http.Header{"Retry-After": {c.header}}})
		var se *StatusError
		if !errors.As(err, &se) || runner.IsPermanent(err) {
			t.Fatalf("%d: %v, want a retried StatusError", c.status, err)
		}
		got := runner.RetryAfterOf(err)
		if got != c.wantWait {
			t.Errorf("%d Retry-After %q max %v: asked %v, want %v", c.status, c.header, c.max, got, c.wantWait)
		}
	}
}
