package http

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
	"github.com/monovertex/monovertex/runner/runnertest"
)

func testConfig() Config {
	return Config{MaxBody: 1 << 20, MaxInflight: 64 << 20, BufferSize: 100, BodyTimeout: 5 * time.Second, CloudEvents: true, MaxHeader: 1 << 20, MaxConns: 1024}
}

// start mounts a source on a fresh mux served on 127.0.0.1.
func start(t *testing.T, cfg Config) (*Source, string) {
	t.Helper()
	mux := http.NewServeMux()
	src, err := New(cfg, runner.Env{Name: "in", Mux: mux})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = src.GuardPort(srv.Config, srv.Listener)
	srv.Start()
	t.Cleanup(func() {
		_ = src.Close(context.Background())
		srv.Close()
	})
	return src, srv.URL
}

// result is one finished POST.
type result struct {
	status int
	body   reply
	err    error
}

// post sends a request in the background; the answer arrives on the channel.
func post(url string, header http.Header, body string) <-chan result {
	return do(http.DefaultClient, url, header, strings.NewReader(body), int64(len(body)))
}

// postChunked is post without a Content-Length: the body is sent chunked.
func postChunked(url, body string) <-chan result {
	return do(http.DefaultClient, url, nil, strings.NewReader(body), -1)
}

// do posts a body of length bytes (-1: unknown, sent chunked) with client.
func do(client *http.Client, url string, header http.Header, body io.Reader, length int64) <-chan result {
	ch := make(chan result, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, url, body)
		if err != nil {
			ch <- result{err: err}
			return
		}
		if length < 0 {
			req.Body, req.GetBody, req.ContentLength = io.NopCloser(body), nil, -1
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var r reply
		_ = json.NewDecoder(resp.Body).Decode(&r)
		ch <- result{status: resp.StatusCode, body: r}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	return testutil.Receive(t, ch, 20*time.Second, func(r result) error { return r.err })
}

// ackOK acks msgs and checks that the request waiting on ch is answered 200.
func ackOK(t *testing.T, src *Source, msgs []*runner.Message, ch <-chan result, what string) result {
	t.Helper()
	_ = src.Ack(context.Background(), msgs)
	r := await(t, ch)
	if r.status != http.StatusOK {
		t.Fatalf("%s: %d %+v", what, r.status, r.body)
	}
	return r
}

func pending(t *testing.T, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("answered %d (%+v) before its message was final", r.status, r.body)
	case <-time.After(100 * time.Millisecond):
	}
}

func readN(t *testing.T, src *Source, n int) []*runner.Message {
	t.Helper()
	var got []*runner.Message
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("read %d of %d messages", len(got), n)
		}
		msgs, err := src.Read(context.Background(), n-len(got), 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	return got
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// producers play callers that retry until they get 200, the way the HTTP
// source expects: 500 and 429 mean "try again", and redelivery comes from
// the caller. They follow the newest source, as callers follow a Service.
type producers struct {
	url    atomic.Pointer[string]
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	seq    atomic.Int64
	once   sync.Once
}

func (p *producers) stop() {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
	})
}

func (p *producers) produce(n int) [][]byte {
	values := make([][]byte, n)
	batch := p.seq.Add(1)
	for i := range values {
		id := fmt.Sprintf("p%d-%d", batch, i)
		values[i] = []byte("value-" + id)
		body := values[i]
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for p.ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(p.ctx, http.MethodPost, *p.url.Load(), bytes.NewReader(body))
				req.Header.Set(HeaderID, id)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						return
					}
				}
				select {
				case <-p.ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	return values
}

func TestConformance(t *testing.T) {
	var all sync.Map // *testing.T -> *producers
	get := func(t *testing.T) *producers {
		v, _ := all.LoadOrStore(t, &producers{})
		p := v.(*producers)
		if p.ctx == nil {
			p.ctx, p.cancel = context.WithCancel(context.Background())
		}
		return p
	}
	conformance.RunSource(t, conformance.SourceCase{
		New: func(t *testing.T) runner.Source {
			p := get(t)
			mux := http.NewServeMux()
			src, err := New(testConfig(), runner.Env{Name: "in", Mux: mux})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mux)
			url := srv.URL + "/vertices/in"
			p.url.Store(&url)
			t.Cleanup(srv.Close)
			// Callers stop before the servers close (cleanups run last-in first).
			t.Cleanup(p.stop)
			return src
		},
		Produce: func(t *testing.T, n int) [][]byte { return get(t).produce(n) },
		Features: conformance.SourceFeatures{
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true},
			// A nacked or unfinished request is answered 500 and its caller
			// posts it again: the redelivery the suite checks comes from there.
			Nack:                true,
			RedeliverAfterClose: true,
			Pending:             true,
			KeepsValues:         true,
			RedeliveryWait:      10 * time.Second,
		},
	})
}

func TestAnswersOnlyAfterAck(t *testing.T) {
	src, url := start(t, testConfig())
	ch := post(url, hdr(HeaderID, "a-1"), "hello")
	msgs := readN(t, src, 1)
	pending(t, ch)
	if err := src.Ack(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	r := await(t, ch)
	if r.status != http.StatusOK || r.body.ID != "a-1" {
		t.Fatalf("answer %d %+v, want 200 with the id", r.status, r.body)
	}
}

func TestNackAnswers500(t *testing.T) {
	src, url := start(t, testConfig())
	ch := post(url, nil, "hello")
	msgs := readN(t, src, 1)
	if err := src.Nack(context.Background(), msgs, runner.Nack{}); err != nil {
		t.Fatal(err)
	}
	if r := await(t, ch); r.status != http.StatusInternalServerError || r.body.ID != msgs[0].ID {
		t.Fatalf("answer %d %+v, want 500 with the id", r.status, r.body)
	}
}

func TestCloseAnswersWaitingRequests500(t *testing.T) {
	src, url := start(t, testConfig())
	queued := post(url, hdr(HeaderID, "q"), "queued")
	waitPending(t, src, 1)
	readCh := post(url, hdr(HeaderID, "r"), "read")
	waitPending(t, src, 2)
	readN(t, src, 1) // "q" is now with the engine, "r" still queued
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan result{queued, readCh} {
		if r := await(t, ch); r.status != http.StatusInternalServerError || !strings.Contains(r.body.Error, "shutting down") {
			t.Fatalf("answer %d %+v, want 500 shutting down", r.status, r.body)
		}
	}
	if r := await(t, post(url, nil, "late")); r.status != http.StatusInternalServerError {
		t.Fatalf("request after close: %d, want 500", r.status)
	}
	if msgs, _ := src.Read(context.Background(), 10, 50*time.Millisecond); len(msgs) != 0 {
		t.Fatalf("read %d messages after close", len(msgs))
	}
}

func waitPending(t *testing.T, src *Source, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, _ := src.Pending(context.Background())
		if p == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending %d, want %d", p, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDuplicateIDInFlightIs409(t *testing.T) {
	src, url := start(t, testConfig())
	first := post(url, hdr(HeaderID, "dup"), "one")
	waitPending(t, src, 1)
	if r := await(t, post(url, hdr(HeaderID, "dup"), "two")); r.status != http.StatusConflict {
		t.Fatalf("second request: %d, want 409", r.status)
	}
	msgs := readN(t, src, 1)
	pending(t, first)
	ackOK(t, src, msgs, first, "first request")
	// Once final, the id may be used again.
	again := post(url, hdr(HeaderID, "dup"), "three")
	msgs = readN(t, src, 1)
	_ = src.Ack(context.Background(), msgs)
	if r := await(t, again); r.status != http.StatusOK || string(msgs[0].Value) != "three" {
		t.Fatalf("reuse: %d %q", r.status, msgs[0].Value)
	}
}

func TestFullBufferIs429(t *testing.T) {
	cfg := testConfig()
	cfg.BufferSize = 3
	src, url := start(t, cfg)
	var waiting []<-chan result
	for i := 0; i < 3; i++ {
		waiting = append(waiting, post(url, nil, "x"))
	}
	waitPending(t, src, 3)
	if r := await(t, post(url, nil, "y")); r.status != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d, want 429", r.status)
	}
	msgs := readN(t, src, 3)
	_ = src.Ack(context.Background(), msgs)
	for _, ch := range waiting {
		if r := await(t, ch); r.status != http.StatusOK {
			t.Fatalf("queued request: %d", r.status)
		}
	}
}

// TestAuth: only Bearer and the token pass. The token is set with the line
// break a Secret made from a file ends in, which Numaflow trims and so the
// runner does.
func TestAuth(t *testing.T) {
	cfg := testConfig()
	cfg.AuthToken = "s3cret\n"
	src, url := start(t, cfg)
	for _, h := range []http.Header{nil, hdr("Authorization", "Bearer wrong"), hdr("Authorization", "s3cret"), hdr("Authorization", "Basic s3cret")} {
		r := await(t, post(url, h, "x"))
		if r.status != http.StatusUnauthorized {
			t.Fatalf("authorization %q: %d, want 401", h.Get("Authorization"), r.status)
		}
		if strings.Contains(r.body.Error, "s3cret") {
			t.Fatalf("the answer leaks the token: %q", r.body.Error)
		}
	}
	ch := post(url, hdr("Authorization", "Bearer s3cret", "X-Custom", "kept"), "x")
	msgs := readN(t, src, 1)
	for k, v := range msgs[0].Headers {
		if k == "authorization" || strings.Contains(v, "s3cret") {
			t.Fatalf("the token was forwarded in header %q", k)
		}
	}
	if msgs[0].Headers["x-custom"] != "kept" {
		t.Fatalf("headers %v", msgs[0].Headers)
	}
	ackOK(t, src, msgs, ch, "authorized request")
}

// TestPlainBodyMapping: a body becomes a message as Numaflow's HTTP source
// makes it: keys trimmed with empty ones left out, the ID also in an
// X-Numaflow-Id header (spelt so), X-Numaflow-Keys kept, the event time
// header and credentials dropped; the answer says what Numaflow's says.
func TestPlainBodyMapping(t *testing.T) {
	src, url := start(t, testConfig())
	ch := post(url+"/vertices/in", hdr(HeaderID, "n-1", HeaderEventTime, "1663006726000", HeaderKeys, "key1, key2,,key3, ",
		"Content-Type", "application/json", "Cookie", "c=1"), `{"a":1}`)
	m := readN(t, src, 1)[0]
	if m.ID != "n-1" || !m.EventTime.Equal(time.UnixMilli(1663006726000)) || !reflect.DeepEqual(m.Keys, []string{"key1", "key2", "key3"}) || string(m.Value) != `{"a":1}` {
		t.Fatalf("message %+v", m)
	}
	if m.Headers["content-type"] != "application/json" || m.Headers["x-numaflow-id"] != "n-1" || m.Headers["X-Numaflow-Id"] != "n-1" || m.Headers["x-numaflow-keys"] != "key1, key2,,key3," {
		t.Fatalf("headers %v", m.Headers)
	}
	for _, h := range []string{"cookie", "x-numaflow-event-time", "content-length", "authorization"} {
		if _, ok := m.Headers[h]; ok {
			t.Fatalf("header %q forwarded: %v", h, m.Headers)
		}
	}
	_ = src.Ack(context.Background(), []*runner.Message{m})
	if r := await(t, ch); r.status != http.StatusOK || r.body.Message != "Data received successfully" || r.body.ID != "n-1" {
		t.Fatalf("answer %d %+v, want Numaflow's 200 body", r.status, r.body)
	}
}

// TestHealthAsNumaflow: GET /health answers 200, behind the token when one
// is set, as Numaflow's HTTP source's auth layer covers it.
func TestHealthAsNumaflow(t *testing.T) {
	for _, token := range []string{"", "t0k"} {
		cfg := testConfig()
		cfg.AuthToken = token
		_, url := start(t, cfg)
		for _, auth := range []string{"", "Bearer t0k"} {
			req, _ := http.NewRequest(http.MethodGet, url+"/health", nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := http.StatusOK
			if token != "" && auth == "" {
				want = http.StatusUnauthorized
			}
			if resp.StatusCode != want {
				t.Fatalf("token %q, Authorization %q: GET /health %d, want %d", token, auth, resp.StatusCode, want)
			}
		}
	}
}

// TestCloudEventsOff: with MV_HTTP_CLOUDEVENTS=false (mvctl's choice) a
// CloudEvent is a body like any other, as Numaflow's HTTP source takes it.
func TestCloudEventsOff(t *testing.T) {
	cfg := testConfig()
	cfg.CloudEvents = false
	src, url := start(t, cfg)
	const event = `{"specversion":"1.0","id":"e1","source":"/s","type":"t","data":{"a":1}}`
	ch := post(url+"/", hdr("Content-Type", "application/cloudevents+json", "Ce-Id", "x"), event)
	m := readN(t, src, 1)[0]
	if string(m.Value) != event || m.ID == "e1" || m.Headers["ce-id"] != "x" {
		t.Fatalf("message %q id %q headers %v: want the whole body, a made ID, the ce- headers kept", m.Value, m.ID, m.Headers)
	}
	_ = src.Ack(context.Background(), []*runner.Message{m})
	await(t, ch)
}

func TestGeneratedIDsAndNowAsEventTime(t *testing.T) {
	src, url := start(t, testConfig())
	before := time.Now()
	a, b := post(url, nil, "a"), post(url, nil, "b")
	msgs := readN(t, src, 2)
	if msgs[0].ID == "" || msgs[0].ID == msgs[1].ID {
		t.Fatalf("ids %q %q", msgs[0].ID, msgs[1].ID)
	}
	if msgs[0].EventTime.Before(before.Add(-time.Second)) {
		t.Fatalf("event time %v", msgs[0].EventTime)
	}
	// numaflow-http's Uuid::now_v7(): version 7, its first 48 bits the
	// milliseconds of now, printed lower-case and hyphenated.
	for _, m := range msgs {
		u, err := uuid.Parse(m.ID)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || u.String() != m.ID {
			t.Fatalf("id %q is not a UUID version 7 as the uuid crate prints it (%v)", m.ID, err)
		}
		ms := int64(binary.BigEndian.Uint64(append([]byte{0, 0}, u[:6]...)))
		if at := time.UnixMilli(ms); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
			t.Fatalf("id %q says %v, want about now", m.ID, at)
		}
	}
	_ = src.Ack(context.Background(), msgs)
	ids := map[string]bool{await(t, a).body.ID: true, await(t, b).body.ID: true}
	if !ids[msgs[0].ID] || !ids[msgs[1].ID] {
		t.Fatalf("answers carry ids %v, messages %q %q", ids, msgs[0].ID, msgs[1].ID)
	}
}

func TestCloudEventModes(t *testing.T) {
	src, url := start(t, testConfig())
	binary := post(url, hdr("Ce-Specversion", "1.0", "Ce-Id", "b-1", "Ce-Source", "/shop", "Ce-Type", "order.created",
		"Ce-Partitionkey", "u%2C1,u2", "Ce-Traceid", "t1", "Ce-Time", "2024-01-02T03:04:05Z", "Content-Type", "text/plain"), "binary data")
	m := readN(t, src, 1)[0]
	if m.ID != "b-1" || string(m.Value) != "binary data" || !reflect.DeepEqual(m.Keys, []string{"u,1", "u2"}) ||
		m.Headers["traceid"] != "t1" || m.Headers[cewire.HeaderType] != "order.created" || m.Headers[cewire.HeaderSource] != "/shop" ||
		m.Headers[cewire.HeaderContentType] != "text/plain" || !m.EventTime.Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("binary event: %+v", m)
	}
	_ = src.Ack(context.Background(), []*runner.Message{m})
	if r := await(t, binary); r.status != http.StatusOK || r.body.ID != "b-1" {
		t.Fatalf("binary: %d %+v", r.status, r.body)
	}

	structured := post(url, hdr("Content-Type", "application/cloudevents+json"),
		`{"specversion":"1.0","id":"s-1","source":"/shop","type":"t","datacontenttype":"application/json","data":{"n":1}}`)
	m = readN(t, src, 1)[0]
	if m.ID != "s-1" || string(m.Value) != `{"n":1}` || m.EventTime.IsZero() {
		t.Fatalf("structured event: %+v", m)
	}
	_ = src.Ack(context.Background(), []*runner.Message{m})
	await(t, structured)

	batch := post(url, hdr("Content-Type", cewire.BatchContentType),
		`[{"specversion":"1.0","id":"x-1","source":"/s","type":"t","data":"a"},{"specversion":"1.0","id":"x-2","source":"/s","type":"t","data":"b"}]`)
	msgs := readN(t, src, 2)
	_ = src.Ack(context.Background(), msgs[:1])
	pending(t, batch) // answered only when every event of the batch is final
	_ = src.Ack(context.Background(), msgs[1:])
	if r := await(t, batch); r.status != http.StatusOK || !reflect.DeepEqual(r.body.IDs, []string{"x-1", "x-2"}) {
		t.Fatalf("batch: %d %+v", r.status, r.body)
	}
}

func TestBatchWithOneNackIs500(t *testing.T) {
	src, url := start(t, testConfig())
	batch := post(url, hdr("Content-Type", cewire.BatchContentType),
		`[{"specversion":"1.0","id":"y-1","source":"/s","type":"t"},{"specversion":"1.0","id":"y-2","source":"/s","type":"t"}]`)
	msgs := readN(t, src, 2)
	_ = src.Ack(context.Background(), msgs[:1])
	_ = src.Nack(context.Background(), msgs[1:], runner.Nack{})
	if r := await(t, batch); r.status != http.StatusInternalServerError {
		t.Fatalf("batch: %d, want 500", r.status)
	}
}

func TestMalformedRequestsAre400(t *testing.T) {
	expect400(t, []badRequest{
		{"event time not a number", hdr(HeaderEventTime, "yesterday"), "x", ""},
		{"event time as RFC 3339", hdr(HeaderEventTime, "2024-01-01T00:00:00Z"), "x", ""},
		{"binary event without id", hdr("Ce-Specversion", "1.0", "Ce-Source", "/s", "Ce-Type", "t"), "x", ""},
		{"binary event with unknown specversion", hdr("Ce-Specversion", "2.0", "Ce-Id", "1", "Ce-Source", "/s", "Ce-Type", "t"), "x", ""},
		{"structured event not JSON", hdr("Content-Type", "application/cloudevents+json"), "{nope", ""},
		{"structured event without source", hdr("Content-Type", "application/cloudevents+json"), `{"specversion":"1.0","id":"1","type":"t"}`, ""},
		{"batch not an array", hdr("Content-Type", cewire.BatchContentType), `{"specversion":"1.0"}`, ""},
		{"batch with duplicate ids", hdr("Content-Type", cewire.BatchContentType),
			`[{"specversion":"1.0","id":"d","source":"/s","type":"t"},{"specversion":"1.0","id":"d","source":"/s","type":"t"}]`, ""},
		{"extension with a dash", hdr("Ce-Specversion", "1.0", "Ce-Id", "1", "Ce-Source", "/s", "Ce-Type", "t", "Ce-Bad-Name", "x"), "", ""},
		{"id not UTF-8", http.Header{HeaderID: {"a\xffb"}}, "x", ""},
	})
}

// badRequest is a request the source must answer 400, with a reason that
// contains want.
type badRequest struct {
	name string
	h    http.Header
	body string
	want string
}

// expect400 posts each request to a fresh source, checks the 400 and its
// reason, and that none of them was queued; it returns the source.
func expect400(t *testing.T, cases []badRequest) (*Source, string) {
	t.Helper()
	src, url := start(t, testConfig())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := await(t, post(url, c.h, c.body))
			if r.status != http.StatusBadRequest || r.body.Error == "" || !strings.Contains(r.body.Error, c.want) {
				t.Fatalf("answer %d %+v, want 400 with a reason naming %q", r.status, r.body, c.want)
			}
		})
	}
	if p, _ := src.Pending(context.Background()); p != 0 {
		t.Fatalf("%d refused requests were queued", p)
	}
	return src, url
}

func TestOversizeBodiesAre413(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBody = 1024
	src, url := start(t, cfg)
	big := strings.Repeat("x", 1025)
	if r := await(t, post(url, nil, big)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("with Content-Length: %d, want 413", r.status)
	}
	// Chunked: no Content-Length, the limit applies while reading.
	if r := await(t, postChunked(url, big)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: %d, want 413", r.status)
	}
	// Exactly the limit is fine.
	ch := post(url, nil, big[:1024])
	ackOK(t, src, readN(t, src, 1), ch, "at the limit")
	// A batch larger than the whole buffer could never be taken.
	cfg = testConfig()
	cfg.BufferSize = 1
	_, url2 := start(t, cfg)
	r := await(t, post(url2, hdr("Content-Type", cewire.BatchContentType),
		`[{"specversion":"1.0","id":"1","source":"/s","type":"t"},{"specversion":"1.0","id":"2","source":"/s","type":"t"}]`))
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("batch above the buffer: %d, want 413", r.status)
	}
}

func TestRoutes(t *testing.T) {
	_, url := start(t, testConfig())
	if r := await(t, post(url+"/vertices/other", nil, "x")); r.status != http.StatusNotFound {
		t.Fatalf("other vertex: %d, want 404", r.status)
	}
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), "POST") {
		t.Fatalf("GET /: %d (Allow %q), want 405 allowing POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestStalledBodyIs408AndDisconnected(t *testing.T) {
	cfg := testConfig()
	cfg.BodyTimeout = 300 * time.Millisecond
	src, url := start(t, cfg)
	// Promise 100 bytes, send 5, then stall.
	conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100", "hello")
	resp := readResponse(t, conn, 10*time.Second)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body: %d, want 408", resp.StatusCode)
	}
	// The server hangs up on it.
	buf := make([]byte, 1)
	if _, err := conn.Read(buf); !errors.Is(err, io.EOF) {
		var ne net.Error
		if !errors.As(err, &ne) || ne.Timeout() {
			t.Fatalf("connection still open after 408: %v", err)
		}
	}
	if p, _ := src.Pending(context.Background()); p != 0 {
		t.Fatalf("stalled request was queued")
	}
}

func TestCallerHangingUpFreesItsQueuedMessage(t *testing.T) {
	src, url := start(t, testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("x"))
		req.Header.Set(HeaderID, "gone")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitPending(t, src, 1)
	cancel()
	<-done
	waitPending(t, src, 0)
	// The id is free again and nothing stale is read.
	ch := post(url, hdr(HeaderID, "gone"), "again")
	msgs := readN(t, src, 1)
	if string(msgs[0].Value) != "again" {
		t.Fatalf("read %q", msgs[0].Value)
	}
	ackOK(t, src, msgs, ch, "retry")
}

func TestReadReturnsWhatIsWaitingAtOnce(t *testing.T) {
	src, url := start(t, testConfig())
	ch := post(url, nil, "x")
	waitPending(t, src, 1)
	start := time.Now()
	msgs, err := src.Read(context.Background(), 500, time.Hour)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("read %d, %v", len(msgs), err)
	}
	// Not a speed check: an hour-long timeout must not be waited out.
	if time.Since(start) > 30*time.Second {
		t.Fatalf("read waited for a full batch")
	}
	_ = src.Ack(context.Background(), msgs)
	await(t, ch)
}

func TestConfigValidation(t *testing.T) {
	runnertest.ConfigErrors(t, testConfig(), runner.RoleSource, []runnertest.ConfigCase[Config]{
		{Name: "no body", Edit: func(c *Config) { c.MaxBody = 0 }, Var: "MV_HTTP_MAX_BODY"},
		{Name: "no buffer", Edit: func(c *Config) { c.BufferSize = 0 }, Var: "MV_HTTP_BUFFER_SIZE"},
		{Name: "no body timeout", Edit: func(c *Config) { c.BodyTimeout = 0 }, Var: "MV_HTTP_BODY_TIMEOUT"},
		{Name: "token with a space", Edit: func(c *Config) { c.AuthToken = "two words" }, Var: "MV_HTTP_AUTH_TOKEN"},
		{Name: "token only white space", Edit: func(c *Config) { c.AuthToken = " \n" }, Var: "MV_HTTP_AUTH_TOKEN"},
	}, tokenHidden)
	if _, err := New(testConfig(), runner.Env{Name: "x"}); err == nil {
		t.Fatalf("New without a mux succeeded")
	}
}

// tokenHidden checks that a configuration error never shows the token.
func tokenHidden(t *testing.T, cfg *Config, err error) {
	if cfg.AuthToken != "" && strings.Contains(err.Error(), cfg.AuthToken) {
		t.Fatalf("the error shows the token: %v", err)
	}
}

func TestStopReadingAnswersUnreadRequestsAtOnceAndKeepsReadOnes(t *testing.T) {
	src, url := start(t, testConfig())
	readCh := post(url, hdr(HeaderID, "r"), "read")
	waitPending(t, src, 1)
	msgs := readN(t, src, 1) // "r" is with the engine
	queued := post(url, hdr(HeaderID, "q"), "queued")
	waitPending(t, src, 1)
	src.StopReading()
	if r := await(t, queued); r.status != http.StatusInternalServerError || !strings.Contains(r.body.Error, "shutting down") {
		t.Fatalf("unread request answered %d %+v, want 500 shutting down", r.status, r.body)
	}
	if r := await(t, post(url, hdr(HeaderID, "late"), "late")); r.status != http.StatusInternalServerError {
		t.Fatalf("request after StopReading: %d, want 500", r.status)
	}
	// The request the engine already read still finishes with its ack.
	if err := src.Ack(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	if r := await(t, readCh); r.status != http.StatusOK || r.body.ID != "r" {
		t.Fatalf("read request answered %d %+v, want 200 for r", r.status, r.body)
	}
}

func TestCloudEventWithAControlCharacterInItsIDIs400(t *testing.T) {
	expect400(t, []badRequest{{"structured id with U+0001", hdr("Content-Type", "application/cloudevents+json"),
		`{"specversion":"1.0","id":"a\u0001b","source":"/test","type":"t","data":"x"}`, "printable"}})
}
