package udsink_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	commonpb "github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	"github.com/numaproj/numaflow-go/pkg/sinker"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/adapters/sink/udsink"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

// New waits for nothing: the container is waited for in Connect, which
// stops the start-up (runner.Fatal) once MV_UDF_STARTUP_TIMEOUT passed.
// Before it, the sidecar's name is known and Close works.
func TestNewWaitsForNothingConnectForTheContainer(t *testing.T) {
	set := udftest.Settings(udftest.Dir(t))
	set.StartupTimeout = 300 * time.Millisecond
	s, err := udsink.New(context.Background(), udsink.Config{Settings: set}, runner.RoleFallbackSink, nil)
	if err != nil {
		t.Fatalf("new without a container: %v, want no error before Connect", err)
	}
	if got := s.SidecarContainer(); got != "fb-udsink" {
		t.Fatalf("SidecarContainer() = %q before Connect, want fb-udsink", got)
	}
	err = s.Connect(context.Background())
	if !runner.IsFatal(err) || !strings.Contains(err.Error(), "MV_UDF_STARTUP_TIMEOUT") {
		t.Fatalf("connect without a container: %v, want a Fatal error naming MV_UDF_STARTUP_TIMEOUT", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("close before connecting: %v", err)
	}
}

// recorder is a Numaflow SDK sink handler that keeps what it receives and
// answers by the value's prefix: "fail" FAILURE, "fb" FALLBACK, "nack"
// NACK (reason busy, delay 1500ms), "serve" SERVE, "onsplain" ON_SUCCESS
// with a replacement message without user metadata, "ons" ON_SUCCESS with
// a replacement message and user metadata; SUCCESS otherwise. "hang"
// sleeps 3s first, "slow" 500ms.
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
			reason, delay := "busy", uint64(1500)
			res = res.Append(sinker.ResponseNack(d.ID(), &sinker.NackOptions{Reason: &reason, Delay: &delay}))
			continue
		case strings.HasPrefix(v, "serve"):
			res = res.Append(sinker.ResponseServe(d.ID(), []byte("x")))
			continue
		case strings.HasPrefix(v, "onsplain"):
			res = res.Append(sinker.ResponseOnSuccess(d.ID(), sinker.NewMessage([]byte("plain:"+v)).WithKeys([]string{"k-plain"})))
		case strings.HasPrefix(v, "ons"):
			md := sinker.NewUserMetadata()
			md.AddKV("result", "status", []byte("stored"))
			res = res.Append(sinker.ResponseOnSuccess(d.ID(), sinker.NewMessage([]byte("ons:"+v)).WithKeys([]string{"k-ons"}).WithUserMetadata(md)))
		case v == "hang":
			time.Sleep(3 * time.Second)
			res = res.Append(sinker.ResponseOK(d.ID()))
		case v == "slow":
			time.Sleep(500 * time.Millisecond)
			res = res.Append(sinker.ResponseOK(d.ID()))
		default:
			res = res.Append(sinker.ResponseOK(d.ID()))
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, &runner.Message{ID: d.ID(), Keys: d.Keys(), Value: d.Value(), EventTime: d.EventTime(), Headers: d.Headers(),
			Metadata: &runner.Metadata{User: groups(d.UserMetadata()), System: groups(d.SystemMetadata())}})
		r.mu.Unlock()
	}
	return res
}

// groups is the content of the user or system metadata a datum carries.
func groups(md interface {
	Groups() []string
	Keys(group string) []string
	Value(group, key string) []byte
}) map[string]map[string][]byte {
	out := map[string]map[string][]byte{}
	for _, g := range md.Groups() {
		out[g] = map[string][]byte{}
		for _, k := range md.Keys(g) {
			out[g][k] = md.Value(g, k)
		}
	}
	return out
}

func (r *recorder) received() []*runner.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*runner.Message(nil), r.msgs...)
}

func serveSink(t *testing.T, ep udconn.Endpoint, h sinker.Sinker) *udftest.Server {
	return udftest.Start(t, ep, func(s *grpc.Server) { sinkpb.RegisterSinkServer(s, &sinker.Service{Sinker: h}) })
}

// newSink connects a sink with one stream, as configured by default.
func newSink(t *testing.T, set udconn.Settings, role runner.Role) *udsink.Sink {
	t.Helper()
	return newSinkConfig(t, udsink.Config{Settings: set, Streams: 1}, role)
}

func newSinkConfig(t *testing.T, cfg udsink.Config, role runner.Role) *udsink.Sink {
	t.Helper()
	return udftest.Connect(t, "udsink.New", func(ctx context.Context) (*udsink.Sink, error) { return udsink.New(ctx, cfg, role, nil) })
}

// recorderSink serves a recorder on the socket of role's container and
// connects a sink in role to it, closed when the test ends; adjust, if not
// nil, changes the settings first.
func recorderSink(t *testing.T, role runner.Role, adjust func(*udconn.Settings)) (*recorder, *udftest.Server, *udsink.Sink) {
	t.Helper()
	dir := udftest.Dir(t)
	ep := udconn.SinkEndpoint(dir, false)
	switch role {
	case runner.RoleFallbackSink:
		ep = udconn.SinkEndpoint(dir, true)
	case runner.RoleOnSuccessSink:
		ep = udconn.OnSuccessSinkEndpoint(dir)
	}
	rec := &recorder{}
	srv := serveSink(t, ep, rec)
	set := udftest.Settings(dir)
	if adjust != nil {
		adjust(&set)
	}
	s := newSink(t, set, role)
	t.Cleanup(func() { closeSink(t, s) })
	return rec, srv, s
}

func closeSink(t *testing.T, s *udsink.Sink) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

func TestConformanceWithSDKServer(t *testing.T) {
	for _, tr := range udftest.Transports {
		t.Run(tr, func(t *testing.T) {
			dir := udftest.Dir(t)
			rec := &recorder{}
			// The SDK's own server, as a user's container runs it.
			ep := udconn.SinkEndpoint(dir, false)
			udftest.StartSDK(t, func() udftest.SDKServer {
				return sinker.NewServer(rec, sinker.WithSockAddr(ep.Socket), sinker.WithServerInfoFilePath(ep.InfoFile))
			})
			conformance.RunSink(t, conformance.SinkCase{
				New:      func(t *testing.T) runner.Sink { return newSink(t, udftest.SettingsFor(dir, tr), runner.RoleSink) },
				Received: func(t *testing.T) []*runner.Message { return rec.received() },
				Features: conformance.SinkFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}, AnswersFailure: true, KeepsKeys: true, KeepsEventTime: true, KeepsHeaders: true},
			})
		})
	}
}

func msgs(values ...string) []*runner.Message {
	out := make([]*runner.Message, len(values))
	for i, v := range values {
		out[i] = &runner.Message{ID: fmt.Sprintf("m%d", i), Value: []byte(v), EventTime: time.UnixMilli(1_700_000_000_000)}
	}
	return out
}

// numaflowMetadata is metadata as an upstream stage and the engine leave it.
func numaflowMetadata() *runner.Metadata {
	return &runner.Metadata{
		PreviousVertex: "in",
		User:           map[string]map[string][]byte{"g": {"k": []byte("v")}},
		System:         map[string]map[string][]byte{"sink": {"retry_count": []byte("0")}},
	}
}

func TestStatusesMapToWriteResults(t *testing.T) {
	rec, _, s := recorderSink(t, runner.RoleSink, nil)
	in := msgs("ok", "fail-1", "fb-1", "nack-1", "ons-1", "onsplain-1", "ok2")
	for _, m := range in {
		m.Metadata = numaflowMetadata()
		m.Tags = []string{"t1"}
		m.Headers = map[string]string{"h": "1"}
	}
	res, err := s.Write(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status    runner.WriteStatus
		errSubstr string
		nackDelay time.Duration
	}{
		{runner.WriteOK, "", 0},
		{runner.WriteFailed, "disk full", 0},
		{runner.WriteFallback, "", 0},
		{runner.WriteNack, "nacked message m3 (busy)", 1500 * time.Millisecond},
		{runner.WriteOnSuccess, "", 0},
		{runner.WriteOnSuccess, "", 0},
		{runner.WriteOK, "", 0},
	}
	for i, w := range want {
		r := res[i]
		if r.Status != w.status {
			t.Errorf("message %d (%s): status %s, want %s", i, in[i].Value, r.Status, w.status)
		}
		if w.errSubstr != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), w.errSubstr)) {
			t.Errorf("message %d: error %v, want it to mention %q", i, r.Err, w.errSubstr)
		}
		if r.Err != nil && runner.IsPermanent(r.Err) {
			t.Errorf("message %d: error %v is permanent; the container's answers are all retryable", i, r.Err)
		}
		if r.NackOptions.Delay != w.nackDelay {
			t.Errorf("message %d: nack delay %v, want %v (NackOptions.delay is in milliseconds)", i, r.NackOptions.Delay, w.nackDelay)
		}
		if (r.OnSuccess != nil) != (w.status == runner.WriteOnSuccess) {
			t.Errorf("message %d: onSuccess message %+v", i, r.OnSuccess)
		}
	}

	// Replacement value, keys and user metadata; system metadata, previous
	// vertex, ID, event time, headers and tags are the original's.
	checkOnSuccess(t, res[4].OnSuccess, in[4], "ons:ons-1", []string{"k-ons"}, map[string]map[string][]byte{"result": {"status": []byte("stored")}})
	// A replacement without user metadata keeps the original's.
	checkOnSuccess(t, res[5].OnSuccess, in[5], "plain:onsplain-1", []string{"k-plain"}, in[5].Metadata.User)
	if got := len(rec.received()); got != 4 {
		t.Errorf("sink received %d written messages, want 4", got)
	}
}

func checkOnSuccess(t *testing.T, got, orig *runner.Message, value string, keys []string, user map[string]map[string][]byte) {
	t.Helper()
	if got == nil {
		t.Fatalf("no onSuccess message for %s", orig.ID)
	}
	if got == orig {
		t.Fatalf("the onSuccess message for %s is the original itself, so changing one changes the other", orig.ID)
	}
	if string(got.Value) != value || !reflect.DeepEqual(got.Keys, keys) {
		t.Errorf("onSuccess message for %s: value %q keys %q, want %q %q", orig.ID, got.Value, got.Keys, value, keys)
	}
	if got.ID != orig.ID || !got.EventTime.Equal(orig.EventTime) || !reflect.DeepEqual(got.Headers, orig.Headers) || !reflect.DeepEqual(got.Tags, orig.Tags) {
		t.Errorf("onSuccess message for %s does not keep the original's id, event time, headers and tags: %+v", orig.ID, got)
	}
	if got.Metadata == nil {
		t.Fatalf("onSuccess message for %s has no metadata", orig.ID)
	}
	if got.Metadata.PreviousVertex != orig.Metadata.PreviousVertex || !reflect.DeepEqual(got.Metadata.System, orig.Metadata.System) {
		t.Errorf("onSuccess message for %s: previous vertex %q system %v, want the original's %q %v", orig.ID,
			got.Metadata.PreviousVertex, got.Metadata.System, orig.Metadata.PreviousVertex, orig.Metadata.System)
	}
	if !reflect.DeepEqual(got.Metadata.User, user) {
		t.Errorf("onSuccess message for %s: user metadata %v, want %v", orig.ID, got.Metadata.User, user)
	}
}

func TestMetadataReachesTheContainer(t *testing.T) {
	rec, _, s := recorderSink(t, runner.RoleSink, nil)
	in := msgs("with", "without")
	in[0].Metadata = numaflowMetadata()
	if _, err := s.Write(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	got := map[string]*runner.Metadata{}
	for _, m := range rec.received() {
		got[string(m.Value)] = m.Metadata
	}
	// What numaflow-go's Datum.UserMetadata and SystemMetadata return.
	if md := got["with"]; md == nil || !reflect.DeepEqual(md.User, in[0].Metadata.User) || !reflect.DeepEqual(md.System, in[0].Metadata.System) {
		t.Errorf("the container saw metadata %+v, want user %v system %v", md, in[0].Metadata.User, in[0].Metadata.System)
	}
	if md := got["without"]; md == nil || len(md.User) != 0 || len(md.System) != 0 {
		t.Errorf("a message without metadata reached the container with %+v", md)
	}
}

// rawSink is a hand-made sink server, for what numaflow-go cannot answer:
// it is ready, opens each SinkFn stream with the handshake, and answers
// each batch (the requests up to an EOT) with the responses batch returns,
// then an EOT.
type rawSink struct {
	sinkpb.UnimplementedSinkServer
	batch func(reqs []*sinkpb.SinkRequest_Request) []*sinkpb.SinkResponse
}

func (r *rawSink) IsReady(context.Context, *emptypb.Empty) (*sinkpb.ReadyResponse, error) {
	return &sinkpb.ReadyResponse{Ready: true}, nil
}

func (r *rawSink) SinkFn(s sinkpb.Sink_SinkFnServer) error {
	var reqs []*sinkpb.SinkRequest_Request
	return udftest.ServeStream(s, &sinkpb.SinkResponse{Handshake: &sinkpb.Handshake{Sot: true}}, func(req *sinkpb.SinkRequest) error {
		if !req.GetStatus().GetEot() {
			reqs = append(reqs, req.GetRequest())
			return nil
		}
		batch := reqs
		reqs = nil
		for _, resp := range append(r.batch(batch), &sinkpb.SinkResponse{Status: &sinkpb.TransmissionStatus{Eot: true}}) {
			if err := s.Send(resp); err != nil {
				return err
			}
		}
		return nil
	})
}

// scripted is a raw sink server that records each request and answers it
// with whatever answer returns, all of a batch's results in one response.
type scripted struct {
	answer func(req *sinkpb.SinkRequest_Request) *sinkpb.SinkResponse_Result

	mu   sync.Mutex
	reqs []*sinkpb.SinkRequest_Request
}

func (sc *scripted) server() *rawSink {
	return &rawSink{batch: func(reqs []*sinkpb.SinkRequest_Request) []*sinkpb.SinkResponse {
		var results []*sinkpb.SinkResponse_Result
		for _, req := range reqs {
			sc.mu.Lock()
			sc.reqs = append(sc.reqs, req)
			sc.mu.Unlock()
			results = append(results, sc.answer(req))
		}
		return []*sinkpb.SinkResponse{{Results: results}}
	}}
}

func (sc *scripted) requests() []*sinkpb.SinkRequest_Request {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return append([]*sinkpb.SinkRequest_Request(nil), sc.reqs...)
}

func TestOnSuccessAndNackAsTheProtocolAllows(t *testing.T) {
	dir := udftest.Dir(t)
	sc := &scripted{answer: func(req *sinkpb.SinkRequest_Request) *sinkpb.SinkResponse_Result {
		r := &sinkpb.SinkResponse_Result{Id: req.GetId()}
		switch v := string(req.GetValue()); v {
		case "ons-original":
			r.Status = sinkpb.Status_ON_SUCCESS // no on_success_msg: the original goes
		case "ons-no-metadata-before":
			r.Status = sinkpb.Status_ON_SUCCESS
			r.OnSuccessMsg = &sinkpb.SinkResponse_Result_Message{Value: []byte("new"), Keys: []string{"k"},
				Metadata: &commonpb.Metadata{UserMetadata: map[string]*commonpb.KeyValueGroup{"u": {KeyValue: map[string][]byte{"a": []byte("b")}}}}}
		case "ons-nothing-at-all":
			r.Status = sinkpb.Status_ON_SUCCESS
			r.OnSuccessMsg = &sinkpb.SinkResponse_Result_Message{}
		case "nack-no-options":
			r.Status = sinkpb.Status_NACK
		default:
			r.Status = sinkpb.Status_SUCCESS
		}
		return r
	}}
	udftest.Start(t, udconn.SinkEndpoint(dir, false), func(s *grpc.Server) { sinkpb.RegisterSinkServer(s, sc.server()) })
	s := newSink(t, udftest.Settings(dir), runner.RoleSink)
	defer closeSink(t, s)
	in := msgs("ons-original", "ons-no-metadata-before", "ons-nothing-at-all", "nack-no-options", "plain")
	in[0].Metadata = numaflowMetadata()
	in[4].Metadata = numaflowMetadata()
	in[4].Metadata.User = nil
	res, err := s.Write(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != runner.WriteOnSuccess || res[0].OnSuccess != nil {
		t.Errorf("ON_SUCCESS without a message: %+v, want on-success with the original (nil)", res[0])
	}
	if r := res[1]; r.Status != runner.WriteOnSuccess || r.OnSuccess == nil || string(r.OnSuccess.Value) != "new" ||
		!reflect.DeepEqual(r.OnSuccess.Metadata, &runner.Metadata{User: map[string]map[string][]byte{"u": {"a": []byte("b")}}}) {
		t.Errorf("ON_SUCCESS with a message for an input without metadata: %+v", r.OnSuccess)
	}
	// numaflow-core replaces value and keys even when the message leaves them empty.
	if r := res[2]; r.Status != runner.WriteOnSuccess || r.OnSuccess == nil || len(r.OnSuccess.Value) != 0 || len(r.OnSuccess.Keys) != 0 ||
		r.OnSuccess.Metadata == nil || len(r.OnSuccess.Metadata.User) != 0 {
		t.Errorf("ON_SUCCESS with an empty message: %+v", r.OnSuccess)
	}
	if r := res[3]; r.Status != runner.WriteNack || r.NackOptions.Delay != 0 || r.Err == nil || !strings.Contains(r.Err.Error(), "no reason given") {
		t.Errorf("NACK without options: %+v", r)
	}
	if res[4].Status != runner.WriteOK {
		t.Errorf("SUCCESS: %+v", res[4])
	}
	reqs := sc.requests()
	if len(reqs) != len(in) {
		t.Fatalf("the container got %d requests, want %d", len(reqs), len(in))
	}
	if md := reqs[0].GetMetadata(); md.GetPreviousVertex() != "in" || string(md.GetSysMetadata()["sink"].GetKeyValue()["retry_count"]) != "0" ||
		string(md.GetUserMetadata()["g"].GetKeyValue()["k"]) != "v" {
		t.Errorf("request metadata %v, want previous vertex, system and user metadata of %+v", md, in[0].Metadata)
	}
	if md := reqs[1].GetMetadata(); md != nil {
		t.Errorf("a message without metadata was sent with %v", md)
	}
}

func TestServeStopsTheRunnerAsInNumaflow(t *testing.T) {
	_, _, s := recorderSink(t, runner.RoleSink, nil)
	res, err := s.Write(context.Background(), msgs("ok", "serve-1"))
	if !runner.IsFatal(err) || len(res) != 0 {
		t.Fatalf("SERVE answered with %v, %v; want a fatal error and no results", res, err)
	}
	if !strings.Contains(err.Error(), "serving store") || !strings.Contains(err.Error(), "m1") {
		t.Errorf("error %q does not say that a mono vertex has no serving store, or which message", err)
	}
}

func TestConfigValidatesStreams(t *testing.T) {
	for _, tc := range []struct {
		streams int
		ok      bool
	}{{0, false}, {1, true}, {3, true}, {64, true}, {65, false}, {-1, false}} {
		cfg := udsink.Config{Settings: udftest.Settings("/tmp"), Streams: tc.streams}
		err := cfg.Validate(runner.RoleSink)
		var ce *runner.ConfigError
		switch {
		case tc.ok && err != nil:
			t.Errorf("MV_UDSINK_STREAMS=%d refused: %v", tc.streams, err)
		case !tc.ok && (!errors.As(err, &ce) || ce.Var != "MV_UDSINK_STREAMS"):
			t.Errorf("MV_UDSINK_STREAMS=%d: %v, want a ConfigError naming MV_UDSINK_STREAMS", tc.streams, err)
		}
	}
	var cfg udsink.Config
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Streams != 1 {
		t.Errorf("MV_UDSINK_STREAMS defaults to %d, want 1 (Numaflow's one stream per sink)", cfg.Streams)
	}
}

func TestOnSuccessRoleUsesOnSuccessSocket(t *testing.T) {
	rec, _, s := recorderSink(t, runner.RoleOnSuccessSink, nil)
	res, err := s.Write(context.Background(), msgs("a"))
	if err != nil || res[0].Status != runner.WriteOK {
		t.Fatalf("write to onSuccess sink: %v %v", res, err)
	}
	if len(rec.received()) != 1 {
		t.Fatalf("onSuccess container received %d messages, want 1", len(rec.received()))
	}
}

// overlapSink is a numaflow-go handler that counts its calls running at the
// same time. numaflow-go calls it as soon as a SinkFn stream opens, so the
// count is also the number of streams in use. With lock it holds a mutex
// across the whole call, as a sink that is not safe for concurrent calls
// does; a second stream then waits on the mutex for ever while the first
// stream's call waits for data.
type overlapSink struct {
	lock bool
	mu   sync.Mutex

	calls   udftest.Overlap
	written atomic.Int32
}

func (o *overlapSink) Sink(ctx context.Context, ch <-chan sinker.Datum) sinker.Responses {
	defer o.calls.Enter()()
	if o.lock {
		o.mu.Lock()
		defer o.mu.Unlock()
	}
	res := sinker.ResponsesBuilder()
	for d := range ch {
		res = res.Append(sinker.ResponseOK(d.ID()))
	}
	if len(res) > 0 {
		// Time for other batches to arrive while this one is being written.
		time.Sleep(20 * time.Millisecond)
	}
	o.written.Add(int32(len(res)))
	return res
}

// writeConcurrently runs writers Writes of size messages each at once and
// fails the test unless all succeed within a bounded wait.
func writeConcurrently(t *testing.T, s *udsink.Sink, writers, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			in := make([]*runner.Message, size)
			for i := range in {
				in[i] = &runner.Message{ID: fmt.Sprintf("w%d-%d", w, i), Value: []byte("v")}
			}
			res, err := s.Write(ctx, in)
			if err == nil {
				for i, r := range res {
					if r.Status != runner.WriteOK {
						err = fmt.Errorf("message %s: %s %v", in[i].ID, r.Status, r.Err)
						break
					}
				}
			}
			errs <- err
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent write: %v", err)
		}
	}
}

func TestOneStreamKeepsASinkThatHoldsAMutexWorking(t *testing.T) {
	dir := udftest.Dir(t)
	o := &overlapSink{lock: true}
	serveSink(t, udconn.SinkEndpoint(dir, false), o)
	set := udftest.Settings(dir)
	set.CallTimeout = 30 * time.Second // a deadlock must show as one, not be cut short by a reset
	s := newSinkConfig(t, udsink.Config{Settings: set, Streams: 1}, runner.RoleSink)
	defer closeSink(t, s)
	writeConcurrently(t, s, 8, 100)
	if got := o.written.Load(); got != 800 {
		t.Errorf("the container wrote %d messages, want 800", got)
	}
	if got := o.calls.Most(); got != 1 {
		t.Errorf("up to %d handler calls ran at once with MV_UDSINK_STREAMS=1, want 1", got)
	}
}

func TestMoreStreamsOverlapBatchesForSinksThatAllowIt(t *testing.T) {
	dir := udftest.Dir(t)
	o := &overlapSink{}
	serveSink(t, udconn.SinkEndpoint(dir, false), o)
	s := newSinkConfig(t, udsink.Config{Settings: udftest.Settings(dir), Streams: 3}, runner.RoleSink)
	defer closeSink(t, s)
	writeConcurrently(t, s, 8, 100)
	if got := o.written.Load(); got != 800 {
		t.Errorf("the container wrote %d messages, want 800", got)
	}
	if got := o.calls.Most(); got < 2 || got > 3 {
		t.Errorf("up to %d handler calls ran at once with MV_UDSINK_STREAMS=3, want 2 or 3", got)
	}
}

func TestCallTimeoutDoesNotRunWhileWaitingForTheStream(t *testing.T) {
	// Each batch takes 500ms, well within the timeout, but the last of five
	// waits about 2s for the one stream: longer than the timeout.
	rec, _, s := recorderSink(t, runner.RoleSink, func(set *udconn.Settings) { set.CallTimeout = 1500 * time.Millisecond })
	const writers = 5
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			in := msgs("slow")
			in[0].ID = fmt.Sprintf("slow-%d", w)
			_, err := s.Write(context.Background(), in)
			errs <- err
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Errorf("a write queued behind slow batches failed: %v", err)
		}
	}
	if got := len(rec.received()); got != writers {
		t.Errorf("the container wrote %d messages, want %d", got, writers)
	}
}

func TestWaitingWritesHonourContextAndClose(t *testing.T) {
	_, _, s := recorderSink(t, runner.RoleSink, nil) // closed below, and again when the test ends
	first := make(chan error, 1)
	go func() {
		_, err := s.Write(context.Background(), msgs("hang"))
		first <- err
	}()
	// Wait until the slow batch holds the stream.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := s.Write(ctx, msgs("probe"))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break // a write waiting for the stream gives up with its context
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write ever waited for the stream: %v", err)
		}
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := s.Write(context.Background(), msgs("late"))
		waiting <- err
	}()
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		closed <- s.Close(ctx)
	}()
	select {
	case err := <-waiting:
		if err == nil {
			// It may have got the stream before Close began; then it was written.
			t.Logf("the waiting write went out before Close")
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("a write waiting for the stream did not return after Close")
	}
	if err := <-first; err != nil {
		t.Errorf("the batch in flight at Close: %v, want it to finish", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("close: %v", err)
	}
}

func TestFallbackRoleUsesFallbackSocket(t *testing.T) {
	rec, _, s := recorderSink(t, runner.RoleFallbackSink, nil)
	res, err := s.Write(context.Background(), msgs("a", "b"))
	if err != nil || res[0].Status != runner.WriteOK || res[1].Status != runner.WriteOK {
		t.Fatalf("write to fallback sink: %v %v", res, err)
	}
	if len(rec.received()) != 2 {
		t.Fatalf("fallback container received %d messages, want 2", len(rec.received()))
	}
}

func TestRepeatedIDsInOneBatchEachGetAResult(t *testing.T) {
	rec, _, s := recorderSink(t, runner.RoleSink, nil)
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
	_, _, s := recorderSink(t, runner.RoleSink, func(set *udconn.Settings) { set.MaxMessageSize = 64 << 10 })
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
func liar(mode string) *rawSink {
	return &rawSink{batch: func(reqs []*sinkpb.SinkRequest_Request) []*sinkpb.SinkResponse {
		var results []*sinkpb.SinkResponse_Result
		for i, req := range reqs {
			id := req.GetId()
			switch {
			case mode == "missing" && i == 0:
				continue
			case mode == "unknown" && i == 0:
				id = "nobody"
			}
			results = append(results, &sinkpb.SinkResponse_Result{Id: id, Status: sinkpb.Status_SUCCESS})
			if mode == "duplicate" && i == 0 {
				results = append(results, &sinkpb.SinkResponse_Result{Id: id, Status: sinkpb.Status_SUCCESS})
			}
			if mode == "weird" && i == 0 {
				results[len(results)-1].Status = sinkpb.Status(42)
			}
		}
		// Split the results over two responses: the client must collect until EOT.
		half := len(results) / 2
		return []*sinkpb.SinkResponse{{Results: results[:half]}, {Results: results[half:]}}
	}}
}

func TestWrongResultIDsAreAnErrorNotAnAck(t *testing.T) {
	for _, mode := range []string{"missing", "duplicate", "unknown"} {
		t.Run(mode, func(t *testing.T) {
			dir := udftest.Dir(t)
			udftest.Start(t, udconn.SinkEndpoint(dir, false), func(s *grpc.Server) { sinkpb.RegisterSinkServer(s, liar(mode)) })
			s := newSink(t, udftest.Settings(dir), runner.RoleSink)
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
		udftest.Start(t, udconn.SinkEndpoint(dir, false), func(s *grpc.Server) { sinkpb.RegisterSinkServer(s, liar("weird")) })
		s := newSink(t, udftest.Settings(dir), runner.RoleSink)
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
	rec, srv, s := recorderSink(t, runner.RoleSink, nil)
	ctx := context.Background()
	if _, err := s.Write(ctx, msgs("before")); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	// Readiness follows the container.
	udftest.WaitNotReady(t, s.Ready)
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
	srv := serveSink(t, udconn.SinkEndpoint(dir, false), &recorder{})
	set := udftest.Settings(dir)
	set.ReconnectTimeout = 800 * time.Millisecond
	s := newSink(t, set, runner.RoleSink)
	defer closeSink(t, s)
	srv.Kill()
	udftest.WantReconnectTimeout(t, func() error {
		_, err := s.Write(context.Background(), msgs("x"))
		if err == nil {
			t.Fatalf("write succeeded with the container gone")
		}
		return err
	})
	if s.Ready(context.Background()) == nil {
		t.Fatalf("ready after giving up")
	}
}

func TestNoResultsWithinTheCallTimeoutResetsTheStream(t *testing.T) {
	_, _, s := recorderSink(t, runner.RoleSink, func(set *udconn.Settings) { set.CallTimeout = 300 * time.Millisecond })
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

// panicky is a sink handler with a bug: it panics on the value "panic".
type panicky struct{}

func (panicky) Sink(_ context.Context, ch <-chan sinker.Datum) sinker.Responses {
	res := sinker.ResponsesBuilder()
	for d := range ch {
		if string(d.Value()) == "panic" {
			panic("panicky sink: cannot write " + d.ID())
		}
		res = res.Append(sinker.ResponseOK(d.ID()))
	}
	return res
}

func TestHandlerPanicIsReportedWithItsStack(t *testing.T) {
	dir := udftest.Dir(t)
	serveSink(t, udconn.SinkEndpoint(dir, true), panicky{})
	s := newSink(t, udftest.Settings(dir), runner.RoleFallbackSink)
	defer closeSink(t, s)
	var got udftest.Reports
	s.ReportErrorsTo(&got, runner.RoleFallbackSink)
	if _, err := s.Write(context.Background(), msgs("a", "panic")); err == nil {
		t.Fatal("a write whose handler panicked succeeded")
	}
	errs := got.Errors()
	if len(errs) == 0 {
		t.Fatal("the panic was not reported")
	}
	e := errs[0]
	if e.Container != "fb-udsink" || e.Stage != "fallback-sink" || e.Code != "Internal error" || e.Reason != runner.ReasonSinkRuntime ||
		!strings.Contains(e.Message, "UDF_EXECUTION_ERROR") || !strings.Contains(e.Message, "panicky sink: cannot write") ||
		!strings.Contains(e.Details, "panicky.Sink") {
		t.Fatalf("reported %+v; want the fb-udsink container's Internal error with the panic message and its stack", e)
	}
}

// TestHandlerPanicWhileTheBatchIsStillBeingSent: the handler panics on the
// first message while megabytes of the batch are still to be sent, so the
// sends find the stream ended. The error is still the container's panic,
// read from the stream's status, not just "closed".
func TestHandlerPanicWhileTheBatchIsStillBeingSent(t *testing.T) {
	dir := udftest.Dir(t)
	serveSink(t, udconn.SinkEndpoint(dir, false), panicky{})
	s := newSink(t, udftest.Settings(dir), runner.RoleSink)
	defer closeSink(t, s)
	// 64 MiB: more than grpc-go's flow-control windows can ever take in
	// (16 MiB at most for the stream, as for the connection), so sends are
	// still under way when the server ends the stream.
	values := []string{"panic"}
	mib := strings.Repeat("x", 1<<20)
	for range 64 {
		values = append(values, mib)
	}
	_, err := s.Write(context.Background(), msgs(values...))
	if err == nil || !strings.Contains(err.Error(), "(send") || !strings.Contains(err.Error(), "UDF_EXECUTION_ERROR") ||
		!strings.Contains(err.Error(), "panicky sink: cannot write") {
		t.Fatalf("write whose handler panicked mid-batch: %v; want the container's panic", err)
	}
}
