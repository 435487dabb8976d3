package udcodec

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	mappb "github.com/numaproj/numaflow-go/pkg/apis/proto/map/v1"
	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	transformpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

func desc(m proto.Message) protoreflect.MessageDescriptor { return m.ProtoReflect().Descriptor() }

func testCodec() *Codec {
	return New(NewPool(),
		Payload{Message: desc(&sourcepb.ReadResponse{}), Outer: 1, Inner: 1},
		Payload{Message: desc(&sinkpb.SinkRequest{}), Outer: 1, Inner: 2},
		Payload{Message: desc(&transformpb.SourceTransformRequest{}), Outer: 1, Inner: 2},
		Payload{Message: desc(&transformpb.SourceTransformResponse{}), Outer: 1, Inner: 2},
		Payload{Message: desc(&mappb.MapRequest{}), Outer: 1, Inner: 2},
		Payload{Message: desc(&mappb.MapResponse{}), Outer: 1, Inner: 2},
	)
}

func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

var sizes = []int{0, 1, 100, SpliceThreshold - 1, SpliceThreshold, 64 << 10, 1 << 20}

// messages are the requests and responses the adapters send and receive,
// with every field around the payload set.
func messages(n int) map[string]proto.Message {
	ts := timestamppb.New(time.Unix(1700000000, 123))
	md := &common.Metadata{PreviousVertex: "in", UserMetadata: map[string]*common.KeyValueGroup{"g": {KeyValue: map[string][]byte{"k": []byte("v")}}}}
	return map[string]proto.Message{
		"ReadResponse": &sourcepb.ReadResponse{Result: &sourcepb.ReadResponse_Result{
			Payload: payload(n, 1), Offset: &sourcepb.Offset{Offset: []byte("off-1"), PartitionId: 3},
			EventTime: ts, Keys: []string{"a", "b"}, Headers: map[string]string{"h": "v"}, Metadata: md,
		}, Status: &sourcepb.ReadResponse_Status{Eot: false, Code: sourcepb.ReadResponse_Status_SUCCESS}},
		"SinkRequest": &sinkpb.SinkRequest{Request: &sinkpb.SinkRequest_Request{
			Keys: []string{"k1"}, Value: payload(n, 2), EventTime: ts, Watermark: ts, Id: "id-1",
			Headers: map[string]string{"x": "y"}, Metadata: md,
		}},
		"SourceTransformRequest": &transformpb.SourceTransformRequest{Request: &transformpb.SourceTransformRequest_Request{
			Keys: []string{"k"}, Value: payload(n, 3), EventTime: ts, Watermark: ts, Id: "t-1", Metadata: md,
		}},
		"SourceTransformResponse": &transformpb.SourceTransformResponse{Id: "t-1", Results: []*transformpb.SourceTransformResponse_Result{
			{Keys: []string{"a"}, Value: payload(n, 4), EventTime: ts, Tags: []string{"t"}},
			{Value: nil, EventTime: ts},
			{Keys: []string{"c"}, Value: payload(n/2, 5), Metadata: md},
		}},
		"MapRequest": &mappb.MapRequest{Id: "m-1", Request: &mappb.MapRequest_Request{
			Keys: []string{"k"}, Value: payload(n, 6), EventTime: ts, Watermark: ts, Headers: map[string]string{"a": "b"},
		}},
		"MapResponse": &mappb.MapResponse{Id: "m-1", Results: []*mappb.MapResponse_Result{
			{Keys: []string{"a"}, Value: payload(n, 7), Tags: []string{"x"}},
			{Keys: []string{"b"}, Value: payload(n, 8)},
		}},
		"SinkRequestHandshake": &sinkpb.SinkRequest{Handshake: &sinkpb.Handshake{Sot: true}},
	}
}

// chunks splits b into gRPC-like frame buffers of at most 16 KiB.
func chunks(b []byte) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		out = append(out, mem.SliceBuffer(bytes.Clone(b[:n])))
		b = b[n:]
	}
	return out
}

func TestMarshalEqualsProtoMarshal(t *testing.T) {
	c := testCodec()
	for _, n := range sizes {
		for name, m := range messages(n) {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				got, err := c.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				// Every map here has one entry, so proto.Marshal's order is fixed.
				if b := got.Materialize(); !bytes.Equal(b, want) {
					t.Fatalf("Marshal gave %d bytes that differ from proto.Marshal's %d", len(b), len(want))
				}
				back := m.ProtoReflect().New().Interface()
				if err := proto.Unmarshal(got.Materialize(), back); err != nil || !proto.Equal(back, m) {
					t.Fatalf("proto.Unmarshal of Marshal's output: err %v, equal %v", err, proto.Equal(back, m))
				}
				got.Free()
			})
		}
	}
}

func TestMarshalSendsLargePayloadWithoutCopy(t *testing.T) {
	c := testCodec()
	value := payload(1<<20, 9)
	m := &sinkpb.SinkRequest{Request: &sinkpb.SinkRequest_Request{Value: value, Id: "x", Keys: []string{"k"}}}
	got, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 || &got[1].ReadOnlyData()[0] != &value[0] || got[1].Len() != len(value) {
		t.Fatalf("the payload was copied: %d buffers", len(got))
	}
	if !bytes.Equal(m.Request.Value, value) || m.Request.Id != "x" {
		t.Fatal("Marshal changed the message")
	}
}

func TestUnmarshalEqualsProtoUnmarshal(t *testing.T) {
	c := testCodec()
	for _, n := range sizes {
		for name, m := range messages(n) {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				wire, err := proto.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				in := chunks(wire)
				got := m.ProtoReflect().New().Interface()
				if err := c.Unmarshal(in, got); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, m) {
					t.Fatalf("Unmarshal gave a different message")
				}
				// gRPC reuses its buffers after Unmarshal: the message must not
				// alias them.
				for _, b := range in {
					clear(b.ReadOnlyData())
				}
				if !proto.Equal(got, m) {
					t.Fatalf("the message changed when gRPC's buffers were reused: it aliases them")
				}
			})
		}
	}
}

func TestUnmarshalAliasesOneOwnedBuffer(t *testing.T) {
	c := testCodec()
	m := messages(1 << 20)["SourceTransformResponse"].(*transformpb.SourceTransformResponse)
	wire, _ := proto.Marshal(m)
	got := &transformpb.SourceTransformResponse{}
	if err := c.Unmarshal(chunks(wire), got); err != nil {
		t.Fatal(err)
	}
	a, b := got.Results[0].Value, got.Results[2].Value
	// Both payloads sit in the one buffer the message owns, in wire order.
	if d := uintptr(unsafePointer(b)) - uintptr(unsafePointer(a)); d <= uintptr(len(a)) || d > uintptr(len(wire)) {
		t.Fatalf("payloads are not in one buffer (distance %d)", d)
	}
	if cap(a) != len(a) || cap(b) != len(b) {
		t.Fatalf("payloads are not clipped (cap %d for %d bytes): an append would write over the next one", cap(a), len(a))
	}
	if !proto.Equal(got, m) {
		t.Fatal("different message")
	}
}

func TestUnmarshalLastOccurrenceWins(t *testing.T) {
	c := testCodec()
	big := payload(SpliceThreshold+10, 1)
	inner := func(vals ...[]byte) []byte {
		var b []byte
		for _, v := range vals {
			b = append(b, 0x0a) // field 1, bytes
			b = appendBytes(b, v)
		}
		return b
	}
	for name, vals := range map[string][][]byte{
		"big then empty": {big, {}},
		"empty then big": {{}, big},
		"big then small": {big, []byte("s")},
		"small then big": {[]byte("s"), big},
	} {
		t.Run(name, func(t *testing.T) {
			wire := appendBytes([]byte{0x0a}, inner(vals...)) // ReadResponse.result
			want, got := &sourcepb.ReadResponse{}, &sourcepb.ReadResponse{}
			if err := proto.Unmarshal(wire, want); err != nil {
				t.Fatal(err)
			}
			if err := c.Unmarshal(chunks(wire), got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("got payload of %d bytes, want %d", len(got.GetResult().GetPayload()), len(want.GetResult().GetPayload()))
			}
		})
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, n := range []int{0, 100, SpliceThreshold} {
		for _, m := range messages(n) {
			b, _ := proto.Marshal(m)
			f.Add(b)
		}
	}
	c := testCodec()
	f.Fuzz(func(t *testing.T, wire []byte) {
		if len(wire) < SpliceThreshold {
			// Make the aliasing path run: pad with a payload-sized unknown field.
			wire = append(bytes.Clone(wire), appendBytes([]byte{0xfa, 0x01}, make([]byte, SpliceThreshold))...) // field 31
		}
		for _, m := range []proto.Message{&sourcepb.ReadResponse{}, &transformpb.SourceTransformResponse{}, &mappb.MapResponse{}} {
			want := m.ProtoReflect().New().Interface()
			werr := proto.Unmarshal(wire, want)
			got := m.ProtoReflect().New().Interface()
			gerr := c.Unmarshal(chunks(wire), got)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%T: proto.Unmarshal error %v, codec error %v", m, werr, gerr)
			}
			if werr == nil && !proto.Equal(got, want) {
				t.Fatalf("%T: codec decoded a different message", m)
			}
		}
	})
}

func TestPool(t *testing.T) {
	p := NewPool()
	for _, n := range []int{0, 1, 256, 257, 16 << 10, 64<<10 + 1, 1 << 20, 64 << 20} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d) has length %d", n, len(*b))
		}
		if c := cap(*b); c < n || c&(c-1) != 0 {
			t.Fatalf("Get(%d) has capacity %d, not a power of two holding it", n, c)
		}
		p.Put(b)
	}
	if b := p.Get(64<<20 + 1); len(*b) != 64<<20+1 {
		t.Fatal("Get above the largest tier")
	}
	p.Put(&[]byte{}) // ignored, not a tier buffer
	odd := make([]byte, 300)
	p.Put(&odd) // ignored: 300 is not a tier's capacity
	if b := p.Get(300); cap(*b) != 512 {
		t.Fatalf("Get(300) capacity %d after putting a 300-byte buffer, want 512", cap(*b))
	}
}

func TestReceivedAliasesAPooledBufferOnlyWhenItHoldsAPayload(t *testing.T) {
	c := testCodec()
	for _, n := range sizes {
		for name, m := range messages(n) {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				wire, err := proto.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				got := m.ProtoReflect().New().Interface()
				rv := &Received{Msg: got}
				if err := c.Unmarshal(chunks(wire), rv); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, m) {
					t.Fatal("Unmarshal into a Received gave a different message")
				}
				var large [][]byte
				got.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
					collectPayloads(fd, v, &large)
					return true
				})
				wantBuf := false
				for _, p := range large {
					wantBuf = wantBuf || (len(p) > 0 && len(wire) >= SpliceThreshold && name != "SinkRequestHandshake")
				}
				if (rv.Buf != nil) != wantBuf {
					t.Fatalf("Buf is %v with payloads of %d bytes in %d wire bytes", rv.Buf, n, len(wire))
				}
				if rv.Buf == nil {
					return
				}
				for _, p := range large {
					if len(p) > 0 && !rv.Buf.Backs(p) {
						t.Fatal("a payload is not in the pooled buffer")
					}
				}
				// Released and overwritten, as when the next message reuses
				// it: the payloads were in it, so they change.
				want := proto.Clone(got)
				b := rv.Buf.B[:cap(rv.Buf.B)]
				rv.Buf.Release()
				clear(b)
				if proto.Equal(got, want) {
					t.Fatal("clearing the released buffer did not change the payloads: they were copied, not aliased")
				}
			})
		}
	}
}

// collectPayloads appends the values of the bytes fields named value or
// payload in v (a field fd of a message), one level down.
func collectPayloads(fd protoreflect.FieldDescriptor, v protoreflect.Value, out *[][]byte) {
	if fd.Message() == nil {
		return
	}
	each := func(m protoreflect.Message) {
		for _, name := range []protoreflect.Name{"value", "payload"} {
			if f := m.Descriptor().Fields().ByName(name); f != nil && f.Kind() == protoreflect.BytesKind {
				*out = append(*out, m.Get(f).Bytes())
			}
		}
	}
	if fd.IsList() {
		for i := 0; i < v.List().Len(); i++ {
			each(v.List().Get(i).Message())
		}
		return
	}
	if !fd.IsMap() {
		each(v.Message())
	}
}

// TestUnmarshalOwnedDecodesWhatItCannotAlias: a singular message field sent
// twice (proto merges the two) is left by the aliasing decoder to
// proto.Unmarshal; the buffer handed over must still hold the bytes then,
// for a *Received and for a plain message alike.
func TestUnmarshalOwnedDecodesWhatItCannotAlias(t *testing.T) {
	c := testCodec()
	first := appendBytes([]byte{0x0a}, append([]byte{0x0a}, appendBytes(nil, payload(SpliceThreshold+10, 1))...))
	offset := appendBytes([]byte{0x0a}, []byte("off")) // Offset.offset
	wire := append(first, appendBytes([]byte{0x0a}, append([]byte{0x12}, appendBytes(nil, offset)...))...)
	want := &sourcepb.ReadResponse{}
	if err := proto.Unmarshal(wire, want); err != nil {
		t.Fatal(err)
	}
	for _, received := range []bool{true, false} {
		buf := payloadpool.Get(len(wire))
		copy(buf.B, wire)
		got := &sourcepb.ReadResponse{}
		var v any = got
		if received {
			v = &Received{Msg: got}
		}
		if err := c.UnmarshalOwned(buf, v); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("Received %v: got a payload of %d bytes, want %d", received, len(got.GetResult().GetPayload()), len(want.GetResult().GetPayload()))
		}
	}
}
