package faults_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	stpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"github.com/numaproj/numaflow-go/pkg/info"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/internal/testutil"
)

// serveUDS serves a gRPC service on dir/socket with a valid server-info
// file, as a Numaflow SDK container of type ct would.
func serveUDS(t *testing.T, dir, socket, infoFile string, ct info.ContainerType, register func(*grpc.Server)) {
	t.Helper()
	si := info.GetDefaultServerInfo()
	si.MinimumNumaflowVersion = info.MinimumNumaflowVersion[ct]
	if si.Version == "" {
		si.Version = "v0.12.0" // test binaries may lack module versions
	}
	if err := info.Write(si, info.WithServerInfoFilePath(filepath.Join(dir, infoFile))); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, socket))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
}

// badSink is a Numaflow sink container that breaks the protocol on its
// first bad batches, then behaves. It records what it really wrote: the
// ids it answered SUCCESS for (at whatever moment it answered).
type badSink struct {
	sinkpb.UnimplementedSinkServer
	mode string
	bad  int // batches to break

	mu      sync.Mutex
	batches int
	written map[string]int
}

func (s *badSink) IsReady(context.Context, *emptypb.Empty) (*sinkpb.ReadyResponse, error) {
	return &sinkpb.ReadyResponse{Ready: true}, nil
}

func (s *badSink) write(id string) {
	s.mu.Lock()
	s.written[id]++
	s.mu.Unlock()
}

func (s *badSink) SinkFn(stream sinkpb.Sink_SinkFnServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&sinkpb.SinkResponse{Handshake: &sinkpb.Handshake{Sot: true}}); err != nil {
		return err
	}
	ok := func(id string) *sinkpb.SinkResponse_Result {
		return &sinkpb.SinkResponse_Result{Id: id, Status: sinkpb.Status_SUCCESS}
	}
	for {
		var ids []string
		for {
			req, err := stream.Recv()
			if err != nil {
				return nil
			}
			if req.GetStatus().GetEot() {
				break
			}
			ids = append(ids, req.GetRequest().GetId())
		}
		s.mu.Lock()
		s.batches++
		bad := s.batches <= s.bad && len(ids) > 0
		s.mu.Unlock()
		var results, late []*sinkpb.SinkResponse_Result
		for i, id := range ids {
			if !bad || i > 0 {
				s.write(id)
				results = append(results, ok(id))
				continue
			}
			switch s.mode {
			case "missing": // no result for the first message, which is not written
			case "unknown": // a result for an id nobody sent instead
				results = append(results, ok("nobody-"+id))
			case "duplicate": // two results for the first, which is written
				s.write(id)
				results = append(results, ok(id), ok(id))
			case "after EOT": // the first one's result comes after the end of the batch
				s.write(id)
				late = append(late, ok(id))
			}
		}
		if err := stream.Send(&sinkpb.SinkResponse{Results: results}); err != nil {
			return err
		}
		if err := stream.Send(&sinkpb.SinkResponse{Status: &sinkpb.TransmissionStatus{Eot: true}}); err != nil {
			return err
		}
		if len(late) > 0 {
			if err := stream.Send(&sinkpb.SinkResponse{Results: late}); err != nil {
				return err
			}
		}
	}
}

// TestSinkThatBreaksTheProtocolIsAnErrorNotAnAck runs the runner against a
// sink container that answers its first batches with a missing result, a
// result for an unknown id, two results for one id, or a result after the
// end-of-transmission: the runner reports a protocol error, acks nothing
// the container did not write, and once the container behaves everything
// is written and acked. (udsink's own tests cover the same answers at the
// adapter level; this goes through the binary and a real source.)
func TestSinkThatBreaksTheProtocolIsAnErrorNotAnAck(t *testing.T) {
	const total = 2000
	for _, mode := range []string{"missing", "unknown", "duplicate", "after EOT"} {
		t.Run(mode, func(t *testing.T) {
			p := newUDPipeline(t, total)
			sink := &badSink{mode: mode, bad: 5, written: map[string]int{}}
			serveUDS(t, p.Dir, "sink.sock", "sinker-server-info", info.Sinker, func(s *grpc.Server) { sinkpb.RegisterSinkServer(s, sink) })
			p.startSource()
			p.startRunner()
			p.waitAcked(total, 60*time.Second)
			acked := p.acked()
			sink.mu.Lock()
			lost, notWritten := 0, 0
			for n := 0; n < total; n++ {
				id := testutil.ExampleSourceID(n)
				switch {
				case sink.written[id] == 0 && acked[n]:
					notWritten++
				case sink.written[id] == 0:
					lost++
				}
			}
			dups := 0
			for _, c := range sink.written {
				dups += c - 1
			}
			batches := sink.batches
			sink.mu.Unlock()
			if notWritten > 0 || lost > 0 {
				t.Fatalf("%d ids acked but never written, %d never written", notWritten, lost)
			}
			st, err := p.runner.Status()
			if err != nil {
				t.Fatal(err)
			}
			stderr := p.runner.Stderr.String()
			if !strings.Contains(stderr, "protocol error") {
				t.Fatalf("the runner never said the container broke the protocol:\n%s", testutil.Tail(stderr, 3000))
			}
			t.Logf("%d batches, the first 5 broken; runner: read %d acked %d written %d sink errors %d; %d ids written more than once",
				batches, st.Totals.Read, st.Totals.Acked, st.Totals.Written, st.Totals.SinkErrors, dups)
			for _, l := range strings.Split(stderr, "\n") {
				if strings.Contains(l, "protocol error") {
					t.Logf("first report: %.400s", l)
					break
				}
			}
			if code, took := sigterm(t, p.runner, 30*time.Second); code != 0 {
				t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
			}
			report(t, result{
				Scenario: "sink container breaks the protocol (" + mode + "), 5 batches", Messages: total, Lost: lost,
				Duplicated: fmt.Sprintf("%d written twice", dups), Recovery: "-",
				Notes: "protocol error reported, batch retried, nothing acked unwritten",
			})
		})
	}
}

// badTransformer is a Numaflow source transformer that echoes each message
// but breaks the protocol for its first bad requests.
type badTransformer struct {
	stpb.UnimplementedSourceTransformServer
	mode string
	bad  int

	mu       sync.Mutex
	requests int
}

func (b *badTransformer) IsReady(context.Context, *emptypb.Empty) (*stpb.ReadyResponse, error) {
	return &stpb.ReadyResponse{Ready: true}, nil
}

func (b *badTransformer) SourceTransformFn(stream stpb.SourceTransform_SourceTransformFnServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&stpb.SourceTransformResponse{Handshake: &stpb.Handshake{Sot: true}}); err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		r := req.GetRequest()
		b.mu.Lock()
		b.requests++
		bad := b.requests <= b.bad
		b.mu.Unlock()
		resp := &stpb.SourceTransformResponse{Id: r.GetId(), Results: []*stpb.SourceTransformResponse_Result{{Keys: r.GetKeys(), Value: r.GetValue(), EventTime: r.GetEventTime()}}}
		switch {
		case !bad:
		case b.mode == "missing":
			continue
		case b.mode == "unknown":
			resp.Id = "nobody-" + r.GetId()
		case b.mode == "duplicate":
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// TestTransformerThatBreaksTheProtocolIsAnErrorNotAnAck runs the runner
// with a transformer container that leaves out a response, answers for an
// id nobody sent, or answers twice, for its first few requests. A missing
// answer (an unknown id is one too) is cut off by MV_UDF_CALL_TIMEOUT with
// an error naming it, and the batch is retried on a new stream; a second
// answer is ignored. Nothing is acked that was not written.
func TestTransformerThatBreaksTheProtocolIsAnErrorNotAnAck(t *testing.T) {
	const total = 2000
	for _, mode := range []string{"duplicate", "missing", "unknown"} {
		t.Run(mode, func(t *testing.T) {
			p := newUDPipeline(t, total)
			p.env["MV_TRANSFORMER"] = "udtransformer"
			p.env["MV_UDF_CALL_TIMEOUT"] = "2s"
			tr := &badTransformer{mode: mode, bad: 3}
			serveUDS(t, p.Dir, "sourcetransform.sock", "sourcetransformer-server-info", info.Sourcetransformer, func(s *grpc.Server) { stpb.RegisterSourceTransformServer(s, tr) })
			p.startSource()
			p.startSink(0)
			p.startRunner()
			deadline := time.Now().Add(60 * time.Second)
			for len(p.acked()) < total && time.Now().Before(deadline) {
				p.checkAckedWereWritten("sink.out")
				time.Sleep(200 * time.Millisecond)
			}
			p.checkAckedWereWritten("sink.out")
			st, _ := p.runner.Status()
			if n := len(p.acked()); n < total {
				le := ""
				if st.LastError != nil {
					le = st.LastError.Error
				}
				t.Fatalf("%d of %d ids acked after 60s; runner read %d acked %d nacked %d transformer errors %d, last error %q: a response the container never sent stalls its batch",
					n, total, st.Totals.Read, st.Totals.Acked, st.Totals.Nacked, st.Totals.TransformerErrors, le)
			}
			c := p.count(func(int) string { return "sink.out" }, "sink.out")
			if c.lost > 0 {
				t.Fatalf("%d ids lost", c.lost)
			}
			t.Logf("runner: read %d acked %d written %d transformer errors %d; %d duplicate lines", st.Totals.Read, st.Totals.Acked, st.Totals.Written, st.Totals.TransformerErrors, c.dupLines)
			if mode != "duplicate" {
				stderr := p.runner.Stderr.String()
				i := strings.Index(stderr, "MV_UDF_CALL_TIMEOUT")
				if i < 0 {
					t.Fatalf("the runner never said which answers were missing:\n%s", testutil.Tail(stderr, 3000))
				}
				t.Logf("reported as: ...%.300s", stderr[max(0, i-200):])
			}
			if code, took := sigterm(t, p.runner, 30*time.Second); code != 0 {
				t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
			}
			report(t, result{
				Scenario: "transformer container breaks the protocol (" + mode + ")", Messages: total, Lost: c.lost,
				Duplicated: fmt.Sprintf("%d lines", c.dupLines), Recovery: "-",
				Notes: "MV_UDF_CALL_TIMEOUT=2s for missing answers",
			})
		})
	}
}
