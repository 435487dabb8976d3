package http

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/runnertest"
)

// renameAsEngine does to messages just read what runner.Engine does under
// MV_MESSAGE_IDS=numaflow (runner/ids.go, nameNumaflow).
func renameAsEngine(msgs []*runner.Message) {
	for _, m := range msgs {
		m.ID = "mv-" + m.ID + "-0"
	}
}

// inflight is how many IDs the source holds as in flight.
func inflight(src *Source) int {
	src.mu.Lock()
	defer src.mu.Unlock()
	return len(src.inflight)
}

// batch is a CloudEvents batch of events with these ids.
func batch(ids ...string) (http.Header, string) {
	events := make([]string, len(ids))
	for i, id := range ids {
		events[i] = `{"specversion":"1.0","id":"` + id + `","source":"/s","type":"t","data":"` + id + `"}`
	}
	return hdr("Content-Type", "application/cloudevents-batch+json"), "[" + strings.Join(events, ",") + "]"
}

// Under MV_MESSAGE_IDS=numaflow the engine renames every message it read;
// the source keeps each request's own IDs, so the answer names them, and
// its in-flight IDs are freed when the messages are final, whatever the
// engine did to them.
func TestRequestsKeepTheirIDsWhenTheEngineRenamesTheMessages(t *testing.T) {
	ctx := context.Background()
	t.Run("ack", func(t *testing.T) {
		src, url := start(t, testConfig())
		for range 2 { // the second time, the ID must be free again
			ch := post(url, hdr(HeaderID, "r-1"), "hello")
			msgs := readN(t, src, 1)
			renameAsEngine(msgs)
			r := ackOK(t, src, msgs, ch, "renamed message")
			if r.body.ID != "r-1" {
				t.Fatalf("answer %+v, want the request's id r-1", r.body)
			}
			if n := inflight(src); n != 0 {
				t.Fatalf("%d ids in flight after the answer", n)
			}
		}
	})
	t.Run("nack of a batch", func(t *testing.T) {
		src, url := start(t, testConfig())
		for range 2 {
			h, body := batch("b-1", "b-2")
			ch := post(url, h, body)
			msgs := readN(t, src, 2)
			renameAsEngine(msgs)
			if err := src.Nack(ctx, msgs, runner.Nack{}); err != nil {
				t.Fatal(err)
			}
			if r := await(t, ch); r.status != http.StatusInternalServerError || !slices.Equal(r.body.IDs, []string{"b-1", "b-2"}) {
				t.Fatalf("answer %d %+v, want 500 with ids b-1, b-2", r.status, r.body)
			}
			if n := inflight(src); n != 0 {
				t.Fatalf("%d ids in flight after the answer", n)
			}
		}
	})
	t.Run("caller hangs up with part of its batch read", func(t *testing.T) {
		src, url := start(t, testConfig())
		h, body := batch("h-1", "h-2")
		rctx, hangUp := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(rctx, http.MethodPost, url, strings.NewReader(body))
			req.Header = h
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		read := readN(t, src, 1) // h-1 is with the engine, h-2 still queued
		renameAsEngine(read)
		hangUp()
		<-done
		waitPending(t, src, 0)
		if err := src.Ack(ctx, read); err != nil {
			t.Fatal(err)
		}
		if n := inflight(src); n != 0 {
			t.Fatalf("%d ids in flight once the read message was acked and the rest taken back", n)
		}
		ch := post(url, h, body)
		msgs := readN(t, src, 2)
		renameAsEngine(msgs)
		if r := ackOK(t, src, msgs, ch, "the batch again"); !slices.Equal(r.body.IDs, []string{"h-1", "h-2"}) {
			t.Fatalf("answer %+v, want ids h-1, h-2", r.body)
		}
	})
}

// A real engine under MV_MESSAGE_IDS=numaflow gives the sink
// "<MV_NAME>-<request id>-0", numaflow-core's MessageID of an HTTP source
// message (source/http.rs: the ID's offset is the request's id, without a
// replica), while the caller's answer names the request's own id. A
// transformer's output k is named from the message's offset, which has the
// replica: "<MV_NAME>-<request id>-<replica>-k" (transformer/user_defined.rs).
func TestTheEngineGivesTheSinkNumaflowIDs(t *testing.T) {
	for _, withTransformer := range []bool{false, true} {
		t.Run(fmt.Sprintf("transformer=%v", withTransformer), func(t *testing.T) {
			mux := http.NewServeMux()
			src, err := New(testConfig(), runner.Env{Name: "mv", Replica: 3, Mux: mux, MessageIDs: runner.NumaflowIDs})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			sink := runnertest.NewSink(nil)
			p := runner.Pipeline{Source: src, Sink: sink}
			want := []string{"mv-x-1-0", "mv-y-1-0", "mv-y-2-0"}
			if withTransformer {
				tr := runnertest.NewTransformer(func(m *runner.Message, _ int) runner.TransformResult {
					return runner.TransformResult{Outputs: []*runner.Message{runnertest.Copy(m, "t")}}
				})
				p.Stages = []runner.Stage{{Kind: "test", Role: runner.RoleTransformer, Transformer: tr}}
				want = []string{"mv-x-1-3-0", "mv-y-1-3-0", "mv-y-2-3-0"}
			}
			e, err := runner.NewPipeline(runner.Options{Name: "mv", MessageIDs: runner.NumaflowIDs, ReadTimeout: 50 * time.Millisecond}, p)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- e.Run(ctx) }()
			for range 2 { // the second time, the ID must be free again
				if r := await(t, post(srv.URL, hdr(HeaderID, "x-1"), "hello")); r.status != http.StatusOK || r.body.ID != "x-1" {
					t.Fatalf("answer %d %+v, want 200 with id x-1", r.status, r.body)
				}
			}
			h, body := batch("y-1", "y-2")
			if r := await(t, post(srv.URL+"/vertices/mv", h, body)); r.status != http.StatusOK || !slices.Equal(r.body.IDs, []string{"y-1", "y-2"}) {
				t.Fatalf("answer %d %+v, want 200 with ids y-1, y-2", r.status, r.body)
			}
			cancel()
			if err := <-ran; err != nil {
				t.Fatalf("run: %v", err)
			}
			if got := sink.WrittenIDs(); !slices.Equal(got, want) {
				t.Fatalf("the sink saw %v, want %v", got, want)
			}
			if n := inflight(src); n != 0 {
				t.Fatalf("%d ids in flight after the engine stopped", n)
			}
		})
	}
}
