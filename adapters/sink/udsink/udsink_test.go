package udsink_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	"github.com/numaproj/numaflow-go/pkg/sinker"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/adapters/internal/serverinfo"
	"github.com/monovertex/monovertex/adapters/internal/serverinfo/udftest"
	"github.com/monovertex/monovertex/adapters/sink/udsink"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

// recorder is a Numaflow SDK sink handler that keeps what it receives and
// answers by the value's prefix: "fail" FAILURE, "fb" FALLBACK, "nack"
// NACK, "serve" SERVE; SUCCESS otherwise.
type recorder struct {
	mu   sync.Mutex
	msgs []*runner.Message
}

func (r *recorder) Sink(ctx context.Context, ch <-chan sinker.Datum) sinker.Responses {
	res := sinker.ResponsesBuilder()
	for d := range ch {
		v := string(d.Value())
		switch {
		case strings.HasPrefix(v, "fail"):
			res = res.Append(sinker.ResponseFailure(d.ID(), "disk full"))
			continue
		case strings.HasPrefix(v, "fb"):
			res = res.Append(sinker.ResponseFallback(d.ID()))
			continue
		case strings.HasPrefix(v, "nack"):
			reason := "busy"
			res = res.Append(sinker.ResponseNack(d.ID(), &sinker.NackOptions{Reason: &reason}))
			continue
		case v == "hang":
			time.Sleep(3 * time.Second)
		case strings.HasPrefix(v, "serve"):
			res = res.Append(sinker.ResponseServe(d.ID(), []byte("x")))
		default:
			res = res.Append(sinker.ResponseOK(d.ID()))
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, &runner.Message{ID: d.ID(), Keys: d.Keys(), Value: d.Value(), EventTime: d.EventTime(), Headers: d.Headers()})
		r.mu.Unlock()
	}
	return res
}

func (r *recorder) received() []*runner.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*runner.Message(nil), r.msgs...)
}

func serveSink(t *testing.T, ep serverinfo.Endpoint, h sinker.Sinker) *udftest.Server {
	return udftest.Start(t, ep, func(s *grpc.Server) { sinkpb.RegisterSinkServer(s, &sinker.Service{Sinker: h}) })
}

func newSink(t *testing.T, set serverinfo.Settings, fallback bool) *udsink.Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := udsink.New(ctx, set, fallback, nil)
	if err != nil {
		t.Fatalf("udsink.New: %v", err)
	}
	return s
}

func closeSink(t *testing.T, s *udsink.Sink) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

func TestConformanceWithSDKServer(t *testing.T) {
	dir := udftest.Dir(t)
	rec := &recorder{}
	// The SDK's own server, as a user's container runs it.
	ctx, cancel := context.WithCancel(context.Background())
	ep := serverinfo.SinkEndpoint(dir, false)
	done := make(chan error, 1)
	go func() {
		done <- sinker.NewServer(rec, sinker.WithSockAddr(ep.Socket), sinker.WithServerInfoFilePath(ep.InfoFile)).Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("SDK server: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("SDK server did not stop")
		}
	})
	conformance.RunSink(t, conformance.SinkCase{
		New:      func(t *testing.T) runner.Sink { return newSink(t, udftest.Settings(dir), false) },
		Received: func(t *testing.T) []*runner.Message { return rec.received() },
		Features: conformance.SinkFeatures{KeepsKeys: true, KeepsEventTime: true, KeepsHeaders: true},
	})
}

func msgs(values ...string) []*runner.Message {
	out := make([]*runner.Message, len(values))
	for i, v := range values {
		out[i] = &runner.Message{ID: fmt.Sprintf("m%d", i), Value: []byte(v), EventTime: time.UnixMilli(1_700_000_000_000)}
	}
	return out
}

func TestStatusesMapToWriteResults(t *testing.T) {
	dir := udftest.Dir(t)
	rec := &recorder{}
	serveSink(t, serverinfo.SinkEndpoint(dir, false), rec)
	s := newSink(t, udftest.Settings(dir), false)
	defer closeSink(t, s)
	in := msgs("ok", "fail-1", "fb-1", "nack-1", "serve-1", "ok2")
	res, err := s.Write(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status    runner.WriteStatus
		errSubstr string
		permanent bool
	}{
		{runner.WriteOK, "", false},
		{runner.WriteFailed, "disk full", false},
		{runner.WriteFallback, "", false},
		{runner.WriteFailed, "nacked message m3 (busy)", false},
		{runner.WriteOK, "", false},
		{runner.WriteOK, "", false},
	}
	for i, w := range want {
		r := res[i]
		if r.Status != w.status {
			t.Errorf("message %d (%s): status %s, want %s", i, in[i].Value, r.Status, w.status)
		}
		if w.errSubstr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), w.errSubstr)) {
			t.Errorf("message %d: error %v, want it to mention %q", i, r.Err, w.errSubstr)
		}
		if r.Err != nil && runner.IsPermanent(r.Err) != w.permanent {
			t.Errorf("message %d: permanent %v", i, runner.IsPermanent(r.Err))
		}
	}
	if got := len(rec.received()); got != 3 {
		t.Errorf("sink received %d written messages, want 3", got)
	}
}

func TestFallbackRoleUsesFallbackSocket(t *testing.T) {
	dir := udftest.Dir(t)
	rec := &recorder{}
	serveSink(t, serverinfo.SinkEndpoint(dir, true), rec)
	s := newSink(t, udftest.Settings(dir), true)
	defer closeSink(t, s)
	res, err := s.Write(context.Background(), msgs("a", "b"))
	if err != nil || res[0].Status != runner.WriteOK || res[1].Status != runner.WriteOK {
		t.Fatalf("write to fallback sink: %v %v", res, err)
	}
	if len(rec.received()) != 2 {
		t.Fatalf("fallback container received %d messages, want 2", len(rec.received()))
	}
}

func TestRepeatedIDsInOneBatchEachGetAResult(t *testing.T) {
	dir := udftest.Dir(t)
	rec := &recorder{}
	serveSink(t, serverinfo.SinkEndpoint(dir, false), rec)
	s := newSink(t, udftest.Settings(dir), false)
	defer closeSink(t, s)
	in := msgs("a", "fail-b", "c")
	in[2].ID = in[0].ID
	res, err := s.Write(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != runner.WriteOK || res[1].Status != runner.WriteFailed || res[2].Status != runner.WriteOK {
		t.Fatalf("results %v", res)
	}
	if len(rec.received()) != 2 {
		t.Fatalf("received %d, want 2", len(rec.received()))
	}
}

func TestOversizedMessageFailsAloneForGood(t *testing.T) {
	dir := udftest.Dir(t)
	rec := &recorder{}
	serveSink(t, serverinfo.SinkEndpoint(dir, false), rec)
	set := udftest.Settings(dir)
	set.MaxMessageSize = 64 << 10
	s := newSink(t, set, false)
	defer closeSink(t, s)
	in := msgs("small", strings.Repeat("x", 100<<10), "small2")
	res, err := s.Write(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != runner.WriteOK || res[2].Status != runner.WriteOK {
		t.Fatalf("small messages: %v", res)
	}
	if res[1].Status != runner.WriteFailed || !runner.IsPermanent(res[1].Err) || !strings.Contains(res[1].Err.Error(), "MV_UDF_MAX_MESSAGE_SIZE") {
		t.Fatalf("oversized message: %v", res[1])
	}
}

// liar is a raw sink server that answers a batch wrongly in a chosen way.
type liar struct {
	sinkpb.UnimplementedSinkServer
	mode string
}

func (l *liar) IsReady(context.Context, *emptypb.Empty) (*sinkpb.ReadyResponse, error) {
	return &sinkpb.ReadyResponse{Ready: true}, nil
}

func (l *liar) SinkFn(s sinkpb.Sink_SinkFnServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	if err := s.Send(&sinkpb.SinkResponse{Handshake: &sinkpb.Handshake{Sot: true}}); err != nil {
		return err
	}
	for {
		var ids []string
		for {
			req, err := s.Recv()
			if err != nil {
				return nil
			}
			if req.GetStatus().GetEot() {
				break
			}
			ids = append(ids, req.GetRequest().GetId())
		}
		var results []*sinkpb.SinkResponse_Result
		for i, id := range ids {
			switch {
			case l.mode == "missing" && i == 0:
				continue
			case l.mode == "unknown" && i == 0:
				id = "nobody"
			}
			results = append(results, &sinkpb.SinkResponse_Result{Id: id, Status: sinkpb.Status_SUCCESS})
			if l.mode == "duplicate" && i == 0 {
				results = append(results, &sinkpb.SinkResponse_Result{Id: id, Status: sinkpb.Status_SUCCESS})
			}
			if l.mode == "weird" && i == 0 {
				results[len(results)-1].Status = sinkpb.Status(42)
			}
		}
		// Split the results over two responses: the client must collect until EOT.
		half := len(results) / 2
		if err := s.Send(&sinkpb.SinkResponse{Results: results[:half]}); err != nil {
			return err
		}
		if err := s.Send(&sinkpb.SinkResponse{Results: results[half:]}); err != nil {
			return err
		}
		if err := s.Send(&sinkpb.SinkResponse{Status: &sinkpb.TransmissionStatus{Eot: true}}); err != nil {
			return err
		}
	}
}

func TestWrongResultIDsAreAnErrorNotAnAck(t *testing.T) {
	for _, mode := range []string{"missing", "duplicate", "unknown"} {
		t.Run(mode, func(t *testing.T) {
			dir := udftest.Dir(t)
			udftest.Start(t, serverinfo.SinkEndpoint(dir, false), func(s *grpc.Server) { sinkpb.RegisterSinkServer(s, &liar{mode: mode}) })
			s := newSink(t, udftest.Settings(dir), false)
			defer closeSink(t, s)
			res, err := s.Write(context.Background(), msgs("a", "b", "c", "d"))
			if err == nil {
				t.Fatalf("write returned %v and no error", res)
			}
			if len(res) != 0 {
				t.Fatalf("write returned results with its error: %v", res)
			}
			if !strings.Contains(err.Error(), "protocol error") {
				t.Fatalf("error %q does not say it is a protocol error", err)
			}
			// The stream stays in step: a later batch on it is answered again.
			if _, err := s.Write(context.Background(), msgs("e", "f")); err == nil {
				t.Fatalf("second write with the same fault returned no error")
			}
		})
	}
	t.Run("an unknown status fails that message for good", func(t *testing.T) {
		dir := udftest.Dir(t)
		udftest.Start(t, serverinfo.SinkEndpoint(dir, false), func(s *grpc.Server) { sinkpb.RegisterSinkServer(s, &liar{mode: "weird"}) })
		s := newSink(t, udftest.Settings(dir), false)
		defer closeSink(t, s)
		res, err := s.Write(context.Background(), msgs("a", "b"))
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Status != runner.WriteFailed || !runner.IsPermanent(res[0].Err) || !strings.Contains(res[0].Err.Error(), "status 42") {
			t.Fatalf("result %v", res[0])
		}
		if res[1].Status != runner.WriteOK {
			t.Fatalf("result %v", res[1])
		}
	})
}

func TestSurvivesContainerRestart(t *testing.T) {
	dir := udftest.Dir(t)
	rec := &recorder{}
	srv := serveSink(t, serverinfo.SinkEndpoint(dir, false), rec)
	s := newSink(t, udftest.Settings(dir), false)
	defer closeSink(t, s)
	ctx := context.Background()
	if _, err := s.Write(ctx, msgs("before")); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	// Readiness follows the container (the connection watcher notices the
	// drop without a call).
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready(ctx) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("still ready 10s after the container died")
		}
		time.Sleep(20 * time.Millisecond)
	}
	restarted := make(chan struct{})
	go func() {
		time.Sleep(500 * time.Millisecond)
		srv.Restart()
		close(restarted)
	}()
	// Write until it succeeds, as the engine does: every message must end
	// up written exactly when it was reported written.
	var res []runner.WriteResult
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		res, err = s.Write(ctx, msgs("after-0", "after-1", "after-2"))
		if err == nil {
			break
		}
		if runner.IsFatal(err) {
			t.Fatalf("fatal error during a short restart: %v", err)
		}
	}
	if err != nil {
		t.Fatalf("no successful write after restart: %v", err)
	}
	<-restarted
	for i, r := range res {
		if r.Status != runner.WriteOK {
			t.Fatalf("message %d: %v", i, r)
		}
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("not ready after reconnecting: %v", err)
	}
	got := map[string]bool{}
	for _, m := range rec.received() {
		got[string(m.Value)] = true
	}
	for _, v := range []string{"before", "after-0", "after-1", "after-2"} {
		if !got[v] {
			t.Fatalf("%s reported written but the container never got it (got %v)", v, got)
		}
	}
}

func TestContainerThatStaysAwayIsFatal(t *testing.T) {
	dir := udftest.Dir(t)
	srv := serveSink(t, serverinfo.SinkEndpoint(dir, false), &recorder{})
	set := udftest.Settings(dir)
	set.ReconnectTimeout = 800 * time.Millisecond
	s := newSink(t, set, false)
	defer closeSink(t, s)
	srv.Kill()
	start := time.Now()
	var err error
	for time.Since(start) < 15*time.Second {
		_, err = s.Write(context.Background(), msgs("x"))
		if runner.IsFatal(err) {
			break
		}
		if err == nil {
			t.Fatalf("write succeeded with the container gone")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !runner.IsFatal(err) {
		t.Fatalf("no fatal error after the reconnect timeout: %v", err)
	}
	if !strings.Contains(err.Error(), "MV_UDF_RECONNECT_TIMEOUT") {
		t.Fatalf("fatal error does not name MV_UDF_RECONNECT_TIMEOUT: %v", err)
	}
	if s.Ready(context.Background()) == nil {
		t.Fatalf("ready after giving up")
	}
}

func TestNoResultsWithinTheCallTimeoutResetsTheStream(t *testing.T) {
	dir := udftest.Dir(t)
	rec := &recorder{}
	serveSink(t, serverinfo.SinkEndpoint(dir, false), rec)
	set := udftest.Settings(dir)
	set.CallTimeout = 300 * time.Millisecond
	s := newSink(t, set, false)
	defer closeSink(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Write(ctx, msgs("hang")); err == nil || !strings.Contains(err.Error(), "MV_UDF_CALL_TIMEOUT") {
		t.Fatalf("write the container does not answer in time: %v, want a call-timeout error", err)
	}
	// The engine retries on a new stream, which works.
	res, err := s.Write(ctx, msgs("after"))
	if err != nil || len(res) != 1 || res[0].Status != runner.WriteOK {
		t.Fatalf("write after the reset: %+v, %v", res, err)
	}
}
