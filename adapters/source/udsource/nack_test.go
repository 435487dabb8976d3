package udsource_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	"github.com/numaproj/numaflow-go/pkg/sourcer"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/runner"
)

// nackRecorder is numaflow-go's source service that keeps, before the
// SDK sees it, each NackFn request's options as they came on the wire.
type nackRecorder struct {
	*sourcer.Service
	mu   sync.Mutex
	seen []*sourcepb.NackRequest
}

func (r *nackRecorder) NackFn(ctx context.Context, req *sourcepb.NackRequest) (*sourcepb.NackResponse, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req)
	r.mu.Unlock()
	return r.Service.NackFn(ctx, req)
}

// sdkNacks records what numaflow-go's NackFn hands the user's source.
type sdkNacks struct {
	*store
	mu   sync.Mutex
	opts []*sourcer.NackOptions
}

func (s *sdkNacks) Nack(ctx context.Context, req sourcer.NackRequest) {
	s.mu.Lock()
	for _, o := range req.Offsets() {
		s.opts = append(s.opts, o.NackOptions)
	}
	s.mu.Unlock()
	s.store.Nack(ctx, req)
}

// TestNackCarriesEverythingTheNackAskedFor: a nack's delay, reason and
// max_deliveries reach numaflow-go's NackFn exactly as they were asked
// for, and its nack_map is on the wire as Numaflow's field 4 (map<string,
// string> nack_map), which numaflow-go v0.12.0 does not decode but newer
// SDKs do.
func TestNackCarriesEverythingTheNackAskedFor(t *testing.T) {
	dir := udftest.Dir(t)
	st := &sdkNacks{store: newStore(0)}
	rec := &nackRecorder{Service: &sourcer.Service{Source: st}}
	udftest.Start(t, udconn.SourceEndpoint(dir), func(s *grpc.Server) { sourcepb.RegisterSourceServer(s, rec) })
	src := newSource(t, udftest.Settings(dir))
	t.Cleanup(func() { src.Close(context.Background()) })
	st.produce(2)
	msgs := readAll(t, src, 2)
	sent := runner.Nack{Delay: 1500 * time.Millisecond, Reason: "sink said later", MaxDeliveries: 3, Map: map[string]string{"tenant": "a", "attempt": "1"}}
	if err := src.Nack(context.Background(), msgs, sent); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	opts := st.opts
	st.mu.Unlock()
	if len(opts) != 2 {
		t.Fatalf("the SDK's NackFn saw %d offsets; want 2", len(opts))
	}
	for _, o := range opts {
		if o == nil || o.Delay == nil || *o.Delay != 1500 || o.Reason == nil || *o.Reason != sent.Reason || o.MaxDeliveries == nil || *o.MaxDeliveries != 3 {
			t.Fatalf("the SDK's NackFn saw %+v; want delay 1500 (ms), reason %q, max_deliveries 3", o, sent.Reason)
		}
	}
	rec.mu.Lock()
	seen := rec.seen
	rec.mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("%d NackFn calls; want 1", len(seen))
	}
	wire := seen[0].GetRequest()[0].GetNackOptions().ProtoReflect().GetUnknown()
	if got := decodeStringMap(t, wire, 4); !reflect.DeepEqual(got, sent.Map) {
		t.Errorf("nack_map on the wire %v; want %v", got, sent.Map)
	}
	// The engine's own nack (shutdown, failures) carries the runner's reason.
	st.produce(1)
	more := readAll(t, src, 3)
	if err := src.Nack(context.Background(), more[:1], runner.Nack{}); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	last := st.opts[len(st.opts)-1]
	st.mu.Unlock()
	if last.Reason == nil || *last.Reason == "" || last.Delay != nil || last.MaxDeliveries != nil {
		t.Errorf("the engine's own nack reached the SDK as %+v; want the runner's reason and nothing else", last)
	}
}

// decodeStringMap reads the map<string, string> entries of field num.
func decodeStringMap(t *testing.T, b []byte, num protowire.Number) map[string]string {
	t.Helper()
	out := map[string]string{}
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			t.Fatalf("bad tag in %x", b)
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			t.Fatalf("bad field %d in %x", n, b)
		}
		if n == num && typ == protowire.BytesType {
			entry, _ := protowire.ConsumeBytes(b)
			var k, v string
			for len(entry) > 0 {
				en, _, el := protowire.ConsumeTag(entry)
				entry = entry[el:]
				s, sl := protowire.ConsumeString(entry)
				entry = entry[sl:]
				if en == 1 {
					k = s
				} else {
					v = s
				}
			}
			out[k] = v
		}
		b = b[l:]
	}
	return out
}
