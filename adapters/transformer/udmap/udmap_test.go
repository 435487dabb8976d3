package udmap_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"
	"time"

	mappb "github.com/numaproj/numaflow-go/pkg/apis/proto/map/v1"
	"github.com/numaproj/numaflow-go/pkg/batchmapper"
	"github.com/numaproj/numaflow-go/pkg/info"
	"github.com/numaproj/numaflow-go/pkg/mapper"
	"github.com/numaproj/numaflow-go/pkg/mapstreamer"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/adapters/transformer/udmap"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

var base = udftest.EventTime

var modes = []udconn.MapMode{udconn.UnaryMap, udconn.BatchMap, udconn.StreamMap}

// out is what the reference map returns for one value, in a form each
// mode's SDK message is made from.
type out struct {
	value []byte
	keys  []string
	tags  []string
	nack  *mapper.NackOptions
	user  map[string]string // unary only: user metadata group "u"
}

func ms(n uint64) *uint64 { return &n }

// reference implements the conformance suite's reference behaviour, plus:
// "mixed" returns a kept result between two dropped ones, "nack" hands the
// message back with a 1500ms delay, "tagged" tags its output, "nokeys"
// returns no keys, "fail" carries the FAIL tag, "echo" returns what the
// map saw of headers and metadata as user metadata, "hang" answers after
// 3s, "late..." after a delay derived from the value, "panic" panics.
func reference(keys []string, v []byte, headers map[string]string, sys func(g, k string) []byte, user func(g, k string) []byte) []out {
	keep := out{value: v, keys: keys}
	switch s := string(v); {
	case s == "drop":
		return []out{{tags: []string{udmap.DropTag}}}
	case s == "fanout":
		return []out{keep, keep, keep}
	case s == "mixed":
		return []out{{tags: []string{udmap.DropTag}}, keep, {tags: []string{udmap.DropTag}}}
	case s == "nack":
		return []out{{tags: []string{udmap.NackTag}, nack: &mapper.NackOptions{Delay: ms(1500)}}}
	case s == "tagged":
		keep.tags = []string{"sink", "audit"}
	case s == "nokeys":
		keep.keys = nil
	case s == "fail":
		return []out{{value: v, tags: []string{udmap.FailTag}}}
	case s == "echo":
		keep.user = map[string]string{"header": headers["h"], "sys": string(sys("sg", "sk")), "user": string(user("ug", "uk"))}
	case s == "hang":
		time.Sleep(3 * time.Second)
	case s == "panic":
		panic("the map UDF panics")
	case strings.HasPrefix(s, "late"):
		h := fnv.New32a()
		h.Write(v)
		time.Sleep(time.Duration(h.Sum32()%20) * time.Millisecond)
	}
	return []out{keep}
}

func unaryRef(_ context.Context, keys []string, d mapper.Datum) mapper.Messages {
	msgs := mapper.MessagesBuilder()
	for _, o := range reference(keys, d.Value(), d.Headers(), d.SystemMetadata().Value, d.UserMetadata().Value) {
		var m mapper.Message
		if o.nack != nil {
			m = mapper.MessageToNack(o.nack)
		} else {
			m = mapper.NewMessage(o.value).WithKeys(o.keys).WithTags(o.tags)
		}
		if o.user != nil {
			md := mapper.NewUserMetadata()
			for k, v := range o.user {
				md.AddKV("u", k, []byte(v))
			}
			m = m.WithUserMetadata(md)
		}
		msgs = msgs.Append(m)
	}
	return msgs
}

func none(string, string) []byte { return nil }

func batchRef(_ context.Context, datums <-chan batchmapper.Datum) batchmapper.BatchResponses {
	resps := batchmapper.BatchResponsesBuilder()
	for d := range datums {
		r := batchmapper.NewBatchResponse(d.Id())
		for _, o := range reference(d.Keys(), d.Value(), d.Headers(), none, none) {
			if o.nack != nil {
				r = r.Append(batchmapper.MessageToNack(o.nack))
				continue
			}
			r = r.Append(batchmapper.NewMessage(o.value).WithKeys(o.keys).WithTags(o.tags))
		}
		resps = resps.Append(r)
	}
	return resps
}

func streamRef(_ context.Context, keys []string, d mapstreamer.Datum, ch chan<- mapstreamer.Message) {
	if string(d.Value()) == "panic" {
		// Before the deferred close: numaflow-go v0.12 races a closed
		// channel (an EOT, "no outputs") against the handler's error
		// (mapstreamer/service.go MapFn), so a handler that closes its
		// channel while it panics may look like one that dropped its input.
		panic("the map UDF panics")
	}
	defer close(ch)
	for _, o := range reference(keys, d.Value(), d.Headers(), none, none) {
		if o.nack != nil {
			ch <- mapstreamer.MessageToNack(o.nack)
			continue
		}
		ch <- mapstreamer.NewMessage(o.value).WithKeys(o.keys).WithTags(o.tags)
	}
}

// register adds the SDK's service for mode, with the reference map.
func register(mode udconn.MapMode) func(*grpc.Server) {
	return func(s *grpc.Server) {
		switch mode {
		case udconn.BatchMap:
			mappb.RegisterMapServer(s, &batchmapper.Service{BatchMapper: batchmapper.BatchMapperFunc(batchRef)})
		case udconn.StreamMap:
			mappb.RegisterMapServer(s, &mapstreamer.Service{MapperStream: mapstreamer.MapStreamerFunc(streamRef)})
		default:
			mappb.RegisterMapServer(s, &mapper.Service{Mapper: mapper.MapperFunc(unaryRef)})
		}
	}
}

// serve starts a map container on a Unix socket with the server-info file
// of its mode, which can crash and be restarted like a sidecar.
func serve(t *testing.T, dir string, mode udconn.MapMode, register func(*grpc.Server)) *udftest.Server {
	t.Helper()
	si := udftest.ServerInfo(info.Mapper)
	si.Metadata = map[string]string{info.MapModeKey: string(mode)}
	return udftest.StartWithInfo(t, udconn.MapEndpoint(dir, mode), si, register)
}

func newMap(t *testing.T, set udconn.Settings) *udmap.Transformer {
	t.Helper()
	tr := udftest.Connect(t, "udmap.New", func(ctx context.Context) (*udmap.Transformer, error) { return udmap.New(ctx, set, nil) })
	t.Cleanup(func() { tr.Close(context.Background()) })
	return tr
}

// refMap serves the reference map in mode and connects the adapter to it;
// adjust, if not nil, changes the settings first.
func refMap(t *testing.T, mode udconn.MapMode, adjust func(*udconn.Settings)) (*udftest.Server, *udmap.Transformer) {
	t.Helper()
	dir := udftest.Dir(t)
	srv := serve(t, dir, mode, register(mode))
	set := udftest.Settings(dir)
	if adjust != nil {
		adjust(&set)
	}
	return srv, newMap(t, set)
}

// startSDKServer runs numaflow-go's own server for mode, which writes the
// server-info file with its MAP_MODE and listens on its default socket
// name, until the test ends.
func startSDKServer(t *testing.T, dir string, mode udconn.MapMode) {
	ep := udconn.MapEndpoint(dir, mode)
	udftest.StartSDK(t, func() udftest.SDKServer {
		switch mode {
		case udconn.BatchMap:
			return batchmapper.NewServer(batchmapper.BatchMapperFunc(batchRef),
				batchmapper.WithSockAddr(ep.Socket), batchmapper.WithServerInfoFilePath(ep.InfoFile))
		case udconn.StreamMap:
			return mapstreamer.NewServer(mapstreamer.MapStreamerFunc(streamRef),
				mapstreamer.WithSockAddr(ep.Socket), mapstreamer.WithServerInfoFilePath(ep.InfoFile))
		default:
			return mapper.NewServer(mapper.MapperFunc(unaryRef),
				mapper.WithSockAddr(ep.Socket), mapper.WithServerInfoFilePath(ep.InfoFile))
		}
	})
}

// serializedSend wraps numaflow-go v0.12's map stream service so that its
// responses are sent one at a time. The SDK sends them from one goroutine
// per request (mapstreamer/service.go writeResponseToClient), which gRPC
// does not allow on one stream: with two large responses at once one of
// them is lost now and then and the stream hangs (found by the conformance
// suite's large payloads; the adapter's MV_UDF_CALL_TIMEOUT resets such a
// stream and the engine retries). The handler code is the SDK's.
type serializedSend struct {
	*mapstreamer.Service
}

func (s serializedSend) MapFn(st mappb.Map_MapFnServer) error {
	return s.Service.MapFn(&lockedStream{Map_MapFnServer: st})
}

type lockedStream struct {
	mappb.Map_MapFnServer
	mu sync.Mutex
}

func (l *lockedStream) Send(r *mappb.MapResponse) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Map_MapFnServer.Send(r)
}

func TestConformanceWithSDKServers(t *testing.T) {
	for _, mode := range modes {
		for _, tr := range udftest.Transports {
			t.Run(string(mode)+"/"+tr, func(t *testing.T) {
				dir := udftest.Dir(t)
				if mode == udconn.StreamMap {
					serve(t, dir, mode, func(s *grpc.Server) {
						mappb.RegisterMapServer(s, serializedSend{&mapstreamer.Service{MapperStream: mapstreamer.MapStreamerFunc(streamRef)}})
					})
				} else {
					startSDKServer(t, dir, mode)
				}
				conformance.RunTransformer(t, conformance.TransformerCase{
					New:      func(t *testing.T) runner.Transformer { return newMap(t, udftest.SettingsFor(dir, tr)) },
					Features: conformance.TransformerFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}},
				})
			})
		}
	}
}

func TestTheModeComesFromTheServerInfo(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			dir := udftest.Dir(t)
			startSDKServer(t, dir, mode)
			tr := newMap(t, udftest.Settings(dir))
			if tr.Mode() != mode {
				t.Fatalf("the adapter chose mode %s for the SDK's %s server", tr.Mode(), mode)
			}
			res, err := tr.Transform(context.Background(), udftest.Msgs("a", "fanout", "drop"))
			if err != nil {
				t.Fatal(err)
			}
			if len(res[0].Outputs) != 1 || len(res[1].Outputs) != 3 || len(res[2].Outputs) != 0 {
				t.Fatalf("results: %+v", res)
			}
		})
	}
}

func TestResultsFollowTheMap(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			_, tr := refMap(t, mode, nil)
			res, err := tr.Transform(context.Background(), udftest.Msgs("mixed", "nack", "tagged", "nokeys", "drop", "fanout", "fail", "plain"))
			if err != nil {
				t.Fatal(err)
			}
			if o := res[0].Outputs; len(o) != 1 || res[0].Nack || string(o[0].Value) != "mixed" || o[0].Tags != nil {
				t.Errorf("mixed: %+v, want the one result without the drop tag, untagged", res[0])
			}
			if !res[1].Nack || res[1].NackOptions.Delay != 1500*time.Millisecond || len(res[1].Outputs) != 0 {
				t.Errorf("nack: %+v, want Nack with a 1.5s delay (nack_options.delay is in ms)", res[1])
			}
			if o := res[2].Outputs; len(o) != 1 || fmt.Sprint(o[0].Tags) != "[sink audit]" || fmt.Sprint(o[0].Keys) != "[k]" {
				t.Errorf("tagged: %+v, want the map's tags and keys", o)
			}
			if o := res[3].Outputs; len(o) != 1 || o[0].Keys == nil || len(o[0].Keys) != 0 {
				t.Errorf("nokeys: %+v, want empty and non-nil keys (the map chose none)", o)
			}
			if len(res[4].Outputs) != 0 || res[4].Nack || res[4].Err != nil {
				t.Errorf("drop: %+v, want no outputs", res[4])
			}
			if len(res[5].Outputs) != 3 {
				t.Errorf("fanout: %d outputs", len(res[5].Outputs))
			}
			if res[6].Err == nil || runner.IsPermanent(res[6].Err) || len(res[6].Outputs) != 0 {
				t.Errorf("fail: %+v, want a retryable per-message error", res[6])
			}
			for i, r := range res {
				for _, o := range r.Outputs {
					if !o.EventTime.IsZero() || o.Headers != nil {
						t.Errorf("result %d: event time %v, headers %v; a map cannot set them, the engine fills the input's", i, o.EventTime, o.Headers)
					}
				}
			}
		})
	}
}

func TestMetadataFollowsNumaflowRules(t *testing.T) {
	in := func() *runner.Message {
		return &runner.Message{ID: "m", Value: []byte("echo"), EventTime: base, Headers: map[string]string{"h": "hv"},
			Metadata: &runner.Metadata{
				PreviousVertex: "source",
				User:           map[string]map[string][]byte{"ug": {"uk": []byte("uv")}},
				System:         map[string]map[string][]byte{"sg": {"sk": []byte("sv")}},
			}}
	}
	t.Run("unary: the map reads both, sets user, keeps system", func(t *testing.T) {
		_, tr := refMap(t, udconn.UnaryMap, nil)
		res, err := tr.Transform(context.Background(), []*runner.Message{in()})
		if err != nil {
			t.Fatal(err)
		}
		md := res[0].Outputs[0].Metadata
		want := map[string]string{"header": "hv", "sys": "sv", "user": "uv"}
		for k, v := range want {
			if got := string(md.User["u"][k]); got != v {
				t.Errorf("the map saw %s = %q, want %q", k, got, v)
			}
		}
		if _, kept := md.User["ug"]; kept {
			t.Errorf("user metadata %v: the map's replaces the input's", md.User)
		}
		if string(md.System["sg"]["sk"]) != "sv" || md.PreviousVertex != "source" {
			t.Errorf("metadata %+v: the input's system metadata is kept", md)
		}
	})
	t.Run("batch: no user metadata back, system kept", func(t *testing.T) {
		_, tr := refMap(t, udconn.BatchMap, nil)
		m := in()
		res, err := tr.Transform(context.Background(), []*runner.Message{m})
		if err != nil {
			t.Fatal(err)
		}
		md := res[0].Outputs[0].Metadata
		if md == nil || md.User != nil || string(md.System["sg"]["sk"]) != "sv" {
			t.Errorf("metadata %+v, want the input's system metadata only (numaflow-go's batch map returns no user metadata)", md)
		}
		if string(m.Metadata.User["ug"]["uk"]) != "uv" {
			t.Errorf("the input's metadata was changed: %+v", m.Metadata)
		}
	})
}

func TestOutOfOrderResponsesAreMatchedByID(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			_, tr := refMap(t, mode, nil)
			udftest.TransformMatchesOutOfOrder(t, tr)
		})
	}
}

func TestSurvivesContainerRestart(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			srv, tr := refMap(t, mode, nil)
			udftest.TransformSurvivesRestart(t, tr, srv)
		})
	}
}

func TestHandlerPanicFailsTheCallAndTheNextWorks(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			_, tr := refMap(t, mode, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := tr.Transform(ctx, udftest.Msgs("a", "panic"))
			failed := err != nil && strings.Contains(err.Error(), "UDF_EXECUTION_ERROR")
			if mode == udconn.StreamMap && err != nil && strings.Contains(err.Error(), "MV_UDF_CALL_TIMEOUT") {
				// numaflow-go v0.12's map-stream server sends from one
				// goroutine per request on the same stream; under load the
				// error can be lost and the stream hangs, which the call
				// timeout turns into the same whole-call failure.
				failed = true
			}
			if !failed {
				t.Fatalf("transform with a panicking handler: %v, want the whole call to fail with the container's error", err)
			}
			var res []runner.TransformResult
			for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(50 * time.Millisecond) {
				if res, err = tr.Transform(ctx, udftest.Msgs("b")); err == nil {
					break
				}
			}
			if err != nil || string(res[0].Outputs[0].Value) != "b" {
				t.Fatalf("transform after the failed call: %+v, %v", res, err)
			}
		})
	}
}

func TestNoAnswerWithinTheCallTimeoutResetsTheStream(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			_, tr := refMap(t, mode, func(set *udconn.Settings) { set.CallTimeout = 300 * time.Millisecond })
			udftest.TransformCallTimeoutResets(t, tr)
		})
	}
}

func TestAnswersBeforeATimeoutAreHandedOver(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			_, tr := refMap(t, mode, func(set *udconn.Settings) { set.CallTimeout = 300 * time.Millisecond })
			// A batch map answers once per batch: nothing comes before
			// the whole batch is done.
			udftest.TransformEachKeepsTheAnswersBeforeATimeout(t, tr, mode != udconn.BatchMap)
		})
	}
}

func TestACancelledBatchDoesNotConfuseTheNext(t *testing.T) {
	_, tr := refMap(t, udconn.BatchMap, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := tr.Transform(ctx, udftest.Msgs("hang", "x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled batch: %v", err)
	}
	// The first batch's EOT comes later; the next batch must not take it
	// for its own and return before its results.
	res, err := tr.Transform(context.Background(), udftest.Msgs("b", "fanout"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res[0].Outputs) != 1 || string(res[0].Outputs[0].Value) != "b" || len(res[1].Outputs) != 3 {
		t.Fatalf("results of the batch after a cancelled one: %+v", res)
	}
}

// fakeMap answers MapFn with hand-made responses, to test what the SDKs
// never send.
type fakeMap struct {
	mappb.UnimplementedMapServer
	respond func(req *mappb.MapRequest, send func(*mappb.MapResponse) error) error
}

func (f *fakeMap) IsReady(context.Context, *emptypb.Empty) (*mappb.ReadyResponse, error) {
	return &mappb.ReadyResponse{Ready: true}, nil
}

func (f *fakeMap) MapFn(s mappb.Map_MapFnServer) error {
	return udftest.ServeStream(s, &mappb.MapResponse{Handshake: &mappb.Handshake{Sot: true}}, func(req *mappb.MapRequest) error {
		return f.respond(req, s.Send)
	})
}

func echo(req *mappb.MapRequest) *mappb.MapResponse {
	return &mappb.MapResponse{Id: req.GetId(), Results: []*mappb.MapResponse_Result{{Keys: req.GetRequest().GetKeys(), Value: req.GetRequest().GetValue()}}}
}

func TestAResponseForAnUnknownIDIsIgnored(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir, udconn.UnaryMap, func(s *grpc.Server) {
		mappb.RegisterMapServer(s, &fakeMap{respond: func(req *mappb.MapRequest, send func(*mappb.MapResponse) error) error {
			bogus := echo(req)
			bogus.Id = "never-sent-" + req.GetId()
			bogus.Results[0].Value = []byte("bogus")
			if err := send(bogus); err != nil {
				return err
			}
			return send(echo(req))
		}})
	})
	tr := newMap(t, udftest.Settings(dir))
	res, err := tr.Transform(context.Background(), udftest.Msgs("a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"a", "b", "c"} {
		if o := res[i].Outputs; len(o) != 1 || string(o[0].Value) != want {
			t.Fatalf("result %d: %+v, want %q", i, res[i], want)
		}
	}
}

func TestABatchEndedBeforeAllResultsFailsTheCall(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir, udconn.BatchMap, func(s *grpc.Server) {
		mappb.RegisterMapServer(s, &fakeMap{respond: func(req *mappb.MapRequest, send func(*mappb.MapResponse) error) error {
			switch {
			case req.GetStatus().GetEot():
				return send(&mappb.MapResponse{Status: &mappb.TransmissionStatus{Eot: true}})
			case string(req.GetRequest().GetValue()) == "skip":
				return nil
			}
			return send(echo(req))
		}})
	})
	set := udftest.Settings(dir)
	set.CallTimeout = 5 * time.Second
	tr := newMap(t, set)
	_, err := tr.Transform(context.Background(), udftest.Msgs("a", "skip"))
	if err == nil || !strings.Contains(err.Error(), "before it answered 1") {
		t.Fatalf("batch whose EOT came before all results: %v, want an error naming the missing result", err)
	}
	var res []runner.TransformResult
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if res, err = tr.Transform(context.Background(), udftest.Msgs("b")); err == nil {
			break
		}
	}
	if err != nil || string(res[0].Outputs[0].Value) != "b" {
		t.Fatalf("the next batch: %+v, %v", res, err)
	}
}

// A container that answers "a" and then breaks its stream: a unary map's
// answer stands (numaflow-core re-sends only what was in flight), a batch
// map's does not (numaflow-core sends the whole batch again).
func TestAnswersBeforeABrokenStreamStandExceptInABatch(t *testing.T) {
	for _, mode := range []udconn.MapMode{udconn.UnaryMap, udconn.BatchMap} {
		t.Run(string(mode), func(t *testing.T) {
			dir := udftest.Dir(t)
			serve(t, dir, mode, func(s *grpc.Server) {
				mappb.RegisterMapServer(s, &fakeMap{respond: func(req *mappb.MapRequest, send func(*mappb.MapResponse) error) error {
					if string(req.GetRequest().GetValue()) == "break" {
						return errors.New("the container breaks its stream")
					}
					return send(echo(req))
				}})
			})
			tr := newMap(t, udftest.Settings(dir))
			got := map[int]string{}
			err := tr.TransformEach(context.Background(), udftest.Msgs("a", "break", "b"), func(k int, r runner.TransformResult) {
				got[k] = string(r.Outputs[0].Value)
			})
			if err == nil {
				t.Fatal("a call whose stream broke returned no error")
			}
			want := map[int]string{0: "a"}
			if mode == udconn.BatchMap {
				want = map[int]string{}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("handed over %v before the stream broke, want %v (err %v)", got, want, err)
			}
		})
	}
}

func TestStreamResultsGatherUntilTheirEOT(t *testing.T) {
	dir := udftest.Dir(t)
	// Interleaves the responses of two requests: each result of a request
	// arrives as its own response, and its EOT only after the other
	// request's first result.
	var mu sync.Mutex
	var pending []*mappb.MapRequest
	serve(t, dir, udconn.StreamMap, func(s *grpc.Server) {
		mappb.RegisterMapServer(s, &fakeMap{respond: func(req *mappb.MapRequest, send func(*mappb.MapResponse) error) error {
			mu.Lock()
			defer mu.Unlock()
			pending = append(pending, req)
			if len(pending) < 2 {
				return nil
			}
			a, b := pending[0], pending[1]
			pending = nil
			for _, r := range []*mappb.MapResponse{echo(a), echo(b), echo(a), {Id: a.GetId(), Status: &mappb.TransmissionStatus{Eot: true}}, echo(b), {Id: b.GetId(), Status: &mappb.TransmissionStatus{Eot: true}}} {
				if err := send(r); err != nil {
					return err
				}
			}
			return nil
		}})
	})
	tr := newMap(t, udftest.Settings(dir))
	res, err := tr.Transform(context.Background(), udftest.Msgs("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"a", "b"} {
		o := res[i].Outputs
		if len(o) != 2 || string(o[0].Value) != want || string(o[1].Value) != want {
			t.Fatalf("result %d: %+v, want two outputs %q", i, res[i], want)
		}
	}
}

// TestRequestsInFlightStayWithinTheConcurrency: concurrent calls share the
// bound, as numaflow-core's spec.limits.concurrency bounds a map's requests.
func TestRequestsInFlightStayWithinTheConcurrency(t *testing.T) {
	for _, mode := range []udconn.MapMode{udconn.UnaryMap, udconn.StreamMap} {
		t.Run(string(mode), func(t *testing.T) {
			dir := udftest.Dir(t)
			var calls udftest.Overlap
			// Each handler call counts itself and takes 2ms.
			enter := func() {
				defer calls.Enter()()
				time.Sleep(2 * time.Millisecond)
			}
			if mode == udconn.StreamMap {
				serve(t, dir, mode, func(s *grpc.Server) {
					mappb.RegisterMapServer(s, &mapstreamer.Service{MapperStream: mapstreamer.MapStreamerFunc(
						func(ctx context.Context, keys []string, d mapstreamer.Datum, ch chan<- mapstreamer.Message) {
							defer close(ch)
							enter()
							ch <- mapstreamer.NewMessage(d.Value()).WithKeys(keys)
						})})
				})
			} else {
				serve(t, dir, mode, func(s *grpc.Server) {
					mappb.RegisterMapServer(s, &mapper.Service{Mapper: mapper.MapperFunc(
						func(_ context.Context, keys []string, d mapper.Datum) mapper.Messages {
							enter()
							return mapper.MessagesBuilder().Append(mapper.NewMessage(d.Value()).WithKeys(keys))
						})})
				})
			}
			udftest.TransformWithinConcurrency(t, newMap(t, udftest.Settings(dir)), &calls, "map")
		})
	}
}
