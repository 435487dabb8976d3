package udtransformer_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	stpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"github.com/numaproj/numaflow-go/pkg/sourcetransformer"
	"google.golang.org/grpc"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/adapters/transformer/udtransformer"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

var base = udftest.EventTime

var nackDelayMs uint64 = 1500

// reference implements the conformance suite's reference behaviour, plus:
// "late..." answers after a delay derived from the value (so responses
// come back out of order), "mixed" returns a kept result between two
// drop-tagged ones, "nack" hands the message back with a 1500ms delay,
// "rekey" sets its own keys and event time, "nokeys" returns no keys,
// "tagged" tags its output, "fail" carries the FAIL tag, "echo" returns
// the metadata it saw as user metadata, "panic-late" panics after 500ms.
func reference(_ context.Context, keys []string, d sourcetransformer.Datum) sourcetransformer.Messages {
	v := string(d.Value())
	out := sourcetransformer.MessagesBuilder()
	msg := sourcetransformer.NewMessage(d.Value(), d.EventTime()).WithKeys(keys)
	switch {
	case v == "drop":
		return out.Append(sourcetransformer.MessageToDrop(d.EventTime()))
	case v == "fanout":
		return out.Append(msg).Append(msg).Append(msg)
	case v == "mixed":
		return out.Append(sourcetransformer.MessageToDrop(d.EventTime())).Append(msg).Append(sourcetransformer.MessageToDrop(d.EventTime()))
	case v == "nack":
		return out.Append(sourcetransformer.MessageToNack(d.EventTime(), &sourcetransformer.NackOptions{Delay: &nackDelayMs}))
	case v == "tagged":
		return out.Append(msg.WithTags([]string{"sink", "audit"}))
	case v == "fail":
		return out.Append(msg.WithTags([]string{udtransformer.FailTag}))
	case v == "echo":
		// What the transformer saw, returned as user metadata.
		md := sourcetransformer.NewUserMetadata()
		md.AddKV("u", "sys", d.SystemMetadata().Value("sg", "sk"))
		md.AddKV("u", "user", d.UserMetadata().Value("ug", "uk"))
		return out.Append(msg.WithUserMetadata(md))
	case v == "rekey":
		return out.Append(sourcetransformer.NewMessage([]byte("rekeyed"), base.Add(time.Hour)).WithKeys([]string{"new-key"}))
	case v == "hang":
		time.Sleep(3 * time.Second)
	case v == "panic-late":
		// numaflow-go ends the stream with the handler's panic, after
		// the other messages of the call were answered.
		time.Sleep(500 * time.Millisecond)
		panic("the transformer panics")
	case v == "nokeys":
		return out.Append(sourcetransformer.NewMessage(d.Value(), d.EventTime()))
	case strings.HasPrefix(v, "late"):
		h := fnv.New32a()
		h.Write(d.Value())
		time.Sleep(time.Duration(h.Sum32()%20) * time.Millisecond)
	}
	return out.Append(msg)
}

func serve(t *testing.T, dir string) *udftest.Server {
	return udftest.Start(t, udconn.TransformerEndpoint(dir), func(s *grpc.Server) {
		stpb.RegisterSourceTransformServer(s, &sourcetransformer.Service{Transformer: sourcetransformer.SourceTransformFunc(reference)})
	})
}

func newTransformer(t *testing.T, set udconn.Settings) *udtransformer.Transformer {
	t.Helper()
	tr := udftest.Connect(t, "udtransformer.New", func(ctx context.Context) (*udtransformer.Transformer, error) {
		return udtransformer.New(ctx, set, nil)
	})
	t.Cleanup(func() { tr.Close(context.Background()) })
	return tr
}

func TestConformanceWithSDKServer(t *testing.T) {
	for _, tr := range udftest.Transports {
		t.Run(tr, func(t *testing.T) {
			dir := udftest.Dir(t)
			ep := udconn.TransformerEndpoint(dir)
			udftest.StartSDK(t, func() udftest.SDKServer {
				return sourcetransformer.NewServer(sourcetransformer.SourceTransformFunc(reference),
					sourcetransformer.WithSockAddr(ep.Socket), sourcetransformer.WithServerInfoFilePath(ep.InfoFile))
			})
			conformance.RunTransformer(t, conformance.TransformerCase{
				New:      func(t *testing.T) runner.Transformer { return newTransformer(t, udftest.SettingsFor(dir, tr)) },
				Features: conformance.TransformerFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}},
			})
		})
	}
}

func TestResultsFollowTheContainer(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir)
	tr := newTransformer(t, udftest.Settings(dir))
	res, err := tr.Transform(context.Background(), udftest.Msgs("mixed", "nack", "rekey", "nokeys", "drop", "fanout"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res[0].Outputs); n != 1 || res[0].Nack {
		t.Errorf("mixed: %d outputs (nack %v), want the one result without the drop tag", n, res[0].Nack)
	}
	// It was the second result: Numaflow numbers outputs among all results.
	if fmt.Sprint(res[0].Indexes) != "[1]" {
		t.Errorf("mixed: indexes %v, want [1]", res[0].Indexes)
	}
	if res[5].Indexes != nil {
		t.Errorf("fanout: indexes %v, want nil (nothing dropped)", res[5].Indexes)
	}
	if !res[1].Nack || len(res[1].Outputs) != 0 {
		t.Errorf("nack: %+v, want Nack", res[1])
	}
	if o := res[2].Outputs; len(o) != 1 || string(o[0].Value) != "rekeyed" || fmt.Sprint(o[0].Keys) != "[new-key]" || !o[0].EventTime.Equal(base.Add(time.Hour)) {
		t.Errorf("rekey: %+v, want the container's value, keys and event time", o[0])
	}
	if o := res[3].Outputs; len(o) != 1 || o[0].Keys == nil || len(o[0].Keys) != 0 {
		t.Errorf("nokeys: keys %#v, want empty and non-nil (the container chose none)", o[0].Keys)
	}
	if len(res[4].Outputs) != 0 || res[4].Nack || res[4].Err != nil {
		t.Errorf("drop: %+v, want no outputs", res[4])
	}
	if len(res[5].Outputs) != 3 {
		t.Errorf("fanout: %d outputs", len(res[5].Outputs))
	}
}

func TestOutOfOrderResponsesAreMatchedByID(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir)
	udftest.TransformMatchesOutOfOrder(t, newTransformer(t, udftest.Settings(dir)))
}

func TestSurvivesContainerRestart(t *testing.T) {
	for _, tr := range udftest.Transports {
		t.Run(tr, func(t *testing.T) {
			dir := udftest.Dir(t)
			srv := serve(t, dir)
			udftest.TransformSurvivesRestart(t, newTransformer(t, udftest.SettingsFor(dir, tr)), srv)
		})
	}
}

func TestContainerThatStaysAwayIsFatal(t *testing.T) {
	dir := udftest.Dir(t)
	srv := serve(t, dir)
	set := udftest.Settings(dir)
	set.ReconnectTimeout = 800 * time.Millisecond
	tr := newTransformer(t, set)
	srv.Kill()
	udftest.WantReconnectTimeout(t, func() error {
		_, err := tr.Transform(context.Background(), udftest.Msgs("x"))
		return err
	})
}

func TestNoAnswerWithinTheCallTimeoutResetsTheStream(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir)
	set := udftest.Settings(dir)
	set.CallTimeout = 300 * time.Millisecond
	udftest.TransformCallTimeoutResets(t, newTransformer(t, set))
}

func TestAnswersBeforeATimeoutAreHandedOver(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir)
	set := udftest.Settings(dir)
	set.CallTimeout = 300 * time.Millisecond
	udftest.TransformEachKeepsTheAnswersBeforeATimeout(t, newTransformer(t, set), true)
}

func TestAnswersBeforeAPanicStand(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir)
	tr := newTransformer(t, udftest.Settings(dir))
	got := map[int]string{}
	err := tr.TransformEach(context.Background(), udftest.Msgs("a", "panic-late", "b"), func(k int, r runner.TransformResult) {
		got[k] = string(r.Outputs[0].Value)
	})
	if err == nil || !strings.Contains(err.Error(), "broke") {
		t.Fatalf("a call whose container panicked: %v, want the broken stream", err)
	}
	if want := map[int]string{0: "a", 2: "b"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handed over %v before the stream broke, want %v: the answers that came stand", got, want)
	}
}

func TestTagsNackDelayAndFailure(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir)
	tr := newTransformer(t, udftest.Settings(dir))
	res, err := tr.Transform(context.Background(), udftest.Msgs("tagged", "nack", "fail", "mixed"))
	if err != nil {
		t.Fatal(err)
	}
	if o := res[0].Outputs; len(o) != 1 || fmt.Sprint(o[0].Tags) != "[sink audit]" {
		t.Errorf("tagged: %+v, want the container's tags on the output", o)
	}
	if !res[1].Nack || res[1].NackOptions.Delay != 1500*time.Millisecond {
		t.Errorf("nack: %+v, want Nack after 1.5s (nack_options.delay is in ms)", res[1])
	}
	if res[2].Err == nil || runner.IsPermanent(res[2].Err) || len(res[2].Outputs) != 0 {
		t.Errorf("fail: %+v, want a retryable per-message error", res[2])
	}
	if o := res[3].Outputs; len(o) != 1 || o[0].Tags != nil {
		t.Errorf("mixed: %+v, want one untagged output (the drop tag is not an output tag)", o)
	}
}

func TestMetadataGoesBothWays(t *testing.T) {
	dir := udftest.Dir(t)
	serve(t, dir)
	tr := newTransformer(t, udftest.Settings(dir))
	in := &runner.Message{ID: "m", Value: []byte("echo"), EventTime: base, Metadata: &runner.Metadata{
		PreviousVertex: "source",
		User:           map[string]map[string][]byte{"ug": {"uk": []byte("uv")}},
		System:         map[string]map[string][]byte{"sg": {"sk": []byte("sv")}},
	}}
	res, err := tr.Transform(context.Background(), []*runner.Message{in, {ID: "plain", Value: []byte("x"), EventTime: base}})
	if err != nil {
		t.Fatal(err)
	}
	md := res[0].Outputs[0].Metadata
	if md == nil || string(md.User["u"]["sys"]) != "sv" || string(md.User["u"]["user"]) != "uv" {
		t.Fatalf("metadata %+v: want what the container saw of the input's system and user metadata", md)
	}
	if _, kept := md.User["ug"]; kept || string(md.System["sg"]["sk"]) != "sv" {
		t.Errorf("metadata %+v: the container's user metadata replaces the input's, the input's system metadata stays", md)
	}
	if md := res[1].Outputs[0].Metadata; md != nil {
		t.Errorf("an input without metadata and a container that sets none: %+v, want nil", md)
	}
}

// TestRequestsInFlightStayWithinTheConcurrency: concurrent calls share the
// bound, as numaflow-core's spec.limits.concurrency bounds a transformer's
// requests on its one stream.
func TestRequestsInFlightStayWithinTheConcurrency(t *testing.T) {
	dir := udftest.Dir(t)
	var calls udftest.Overlap
	udftest.Start(t, udconn.TransformerEndpoint(dir), func(s *grpc.Server) {
		stpb.RegisterSourceTransformServer(s, &sourcetransformer.Service{Transformer: sourcetransformer.SourceTransformFunc(
			func(_ context.Context, keys []string, d sourcetransformer.Datum) sourcetransformer.Messages {
				defer calls.Enter()()
				time.Sleep(2 * time.Millisecond)
				return sourcetransformer.MessagesBuilder().Append(sourcetransformer.NewMessage(d.Value(), d.EventTime()).WithKeys(keys))
			})})
	})
	udftest.TransformWithinConcurrency(t, newTransformer(t, udftest.Settings(dir)), &calls, "transformer")
}
