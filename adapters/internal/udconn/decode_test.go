package udconn

import (
	"strings"
	"testing"
	"time"

	commonpb "github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	stpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// sdkMetadata is the metadata numaflow-go's servers send with every datum
// that has none (internal/metadata.UserMetadataToProto): empty maps, so an
// empty message on the wire.
func sdkMetadata() *commonpb.Metadata {
	return &commonpb.Metadata{SysMetadata: map[string]*commonpb.KeyValueGroup{}, UserMetadata: map[string]*commonpb.KeyValueGroup{}}
}

type sample[M proto.Message] struct {
	m    M
	fast bool // the hand-written decoder takes it
}

func readResponses() []sample[*sourcepb.ReadResponse] {
	type r = sourcepb.ReadResponse_Result
	return []sample[*sourcepb.ReadResponse]{
		// As numaflow-go's source server sends a datum (pkg/sourcer/service.go).
		{&sourcepb.ReadResponse{Result: &r{Payload: []byte("hello"), Offset: &sourcepb.Offset{Offset: []byte("17"), PartitionId: 3},
			EventTime: timestamppb.New(timestampOf(1_700_000_000, 123)), Keys: []string{"k1", "", "ключ"},
			Headers: map[string]string{"h": "v", "": "", "x-ключ": "значение"}, Metadata: sdkMetadata()},
			Status: &sourcepb.ReadResponse_Status{Eot: false, Code: 0}}, true},
		{&sourcepb.ReadResponse{Status: &sourcepb.ReadResponse_Status{Eot: true, Code: sourcepb.ReadResponse_Status_SUCCESS}}, true},
		{&sourcepb.ReadResponse{Result: &r{Payload: make([]byte, 1000), Offset: &sourcepb.Offset{Offset: []byte{0, 1, 2}, PartitionId: -1},
			EventTime: &timestamppb.Timestamp{Seconds: -5, Nanos: -7}}}, true},
		{&sourcepb.ReadResponse{Result: &r{}}, true},
		{&sourcepb.ReadResponse{Result: &r{Offset: &sourcepb.Offset{}, EventTime: &timestamppb.Timestamp{}}}, true},
		{&sourcepb.ReadResponse{Status: &sourcepb.ReadResponse_Status{Code: 7}}, true},
		{&sourcepb.ReadResponse{}, true},
		// Left to protobuf: metadata, a failure, a handshake.
		{&sourcepb.ReadResponse{Result: &r{Payload: []byte("x"), Metadata: &commonpb.Metadata{PreviousVertex: "in"}}}, false},
		{&sourcepb.ReadResponse{Status: &sourcepb.ReadResponse_Status{Eot: true, Code: sourcepb.ReadResponse_Status_FAILURE,
			Error: sourcepb.ReadResponse_Status_OTHER.Enum(), Msg: proto.String("boom")}}, false},
		{&sourcepb.ReadResponse{Handshake: &sourcepb.Handshake{Sot: true}}, false},
	}
}

func sinkResponses() []sample[*sinkpb.SinkResponse] {
	type r = sinkpb.SinkResponse_Result
	return []sample[*sinkpb.SinkResponse]{
		// As numaflow-go's sink server answers a batch (pkg/sinker/service.go).
		{&sinkpb.SinkResponse{Results: []*r{{Id: "a-0", Status: sinkpb.Status_SUCCESS}, {Id: "b-1", Status: sinkpb.Status_FAILURE, ErrMsg: "disk full"},
			{Id: "c-2", Status: sinkpb.Status_FALLBACK}, {}, {Id: "d-3", Status: sinkpb.Status(42)}}}, true},
		{&sinkpb.SinkResponse{Results: []*r{{Id: "a-0"}}}, true},
		{&sinkpb.SinkResponse{}, true},
		// Left to protobuf: a serve response, an on-success message, a
		// nack, the end of the batch, a handshake.
		{&sinkpb.SinkResponse{Results: []*r{{Id: "a-0", Status: sinkpb.Status_SERVE, ServeResponse: []byte("r")}}}, false},
		{&sinkpb.SinkResponse{Results: []*r{{Id: "a-0", Status: sinkpb.Status_ON_SUCCESS, OnSuccessMsg: &sinkpb.SinkResponse_Result_Message{Value: []byte("v")}}}}, false},
		{&sinkpb.SinkResponse{Results: []*r{{Id: "a-0", Status: sinkpb.Status_NACK, NackOptions: &commonpb.NackOptions{}}}}, false},
		{&sinkpb.SinkResponse{Status: &sinkpb.TransmissionStatus{Eot: true}}, false},
		{&sinkpb.SinkResponse{Handshake: &sinkpb.Handshake{Sot: true}}, false},
	}
}

func transformResponses() []sample[*stpb.SourceTransformResponse] {
	type r = stpb.SourceTransformResponse_Result
	et := timestamppb.New(timestampOf(1_700_000_000, 5))
	return []sample[*stpb.SourceTransformResponse]{
		// As numaflow-go's transformer server answers a datum
		// (pkg/sourcetransformer/service.go).
		{&stpb.SourceTransformResponse{Id: "1a", Results: []*r{{Keys: []string{"k", "", "ключ"}, Value: []byte("v1"), Tags: []string{"t1", "t2"}, EventTime: et, Metadata: sdkMetadata()},
			{Value: []byte("v2"), EventTime: et, Metadata: sdkMetadata()}, {Tags: []string{"U+005F__DROP__"}, EventTime: &timestamppb.Timestamp{}, Metadata: sdkMetadata()}}}, true},
		{&stpb.SourceTransformResponse{Id: "2", Results: []*r{{Value: make([]byte, 1000), EventTime: et, Metadata: sdkMetadata()}}}, true},
		{&stpb.SourceTransformResponse{Id: "3"}, true},
		{&stpb.SourceTransformResponse{Results: []*r{{}}}, true},
		{&stpb.SourceTransformResponse{}, true},
		// Left to protobuf: metadata, nack options, a handshake.
		{&stpb.SourceTransformResponse{Id: "4", Results: []*r{{Value: []byte("v"), Metadata: &commonpb.Metadata{PreviousVertex: "in"}}}}, false},
		{&stpb.SourceTransformResponse{Id: "5", Results: []*r{{Value: []byte("v"), NackOptions: &commonpb.NackOptions{Reason: proto.String("later")}}}}, false},
		{&stpb.SourceTransformResponse{Handshake: &stpb.Handshake{Sot: true}}, false},
	}
}

// TestDecodersMatchProtobuf decodes what the SDK servers send through the
// codec and checks each message against proto.Unmarshal, and that the
// hand-written decoders take the usual shapes and leave the others.
func TestDecodersMatchProtobuf(t *testing.T) {
	for i, s := range readResponses() {
		b := marshal(t, s.m)
		checkDecode(t, b, new(sourcepb.ReadResponse))
		if got := decodeReadResponse(b, new(sourcepb.ReadResponse)); got != s.fast {
			t.Errorf("read response %d (%v): decoded by hand %v, want %v", i, s.m, got, s.fast)
		}
	}
	for i, s := range transformResponses() {
		b := marshal(t, s.m)
		checkDecode(t, b, new(stpb.SourceTransformResponse))
		if got := decodeTransformResponse(b, new(stpb.SourceTransformResponse)); got != s.fast {
			t.Errorf("transform response %d (%v): decoded by hand %v, want %v", i, s.m, got, s.fast)
		}
	}
	for i, s := range sinkResponses() {
		b := marshal(t, s.m)
		checkDecode(t, b, new(sinkpb.SinkResponse))
		if got := decodeSinkResponse(b, new(sinkpb.SinkResponse)); got != s.fast {
			t.Errorf("sink response %d (%v): decoded by hand %v, want %v", i, s.m, got, s.fast)
		}
	}
}

// TestDecodedBytesDoNotAliasTheInput checks that what the decoders keep
// is copied: the codec gives the buffer back right after decoding.
func TestDecodedBytesDoNotAliasTheInput(t *testing.T) {
	b := marshal(t, readResponses()[0].m)
	var got sourcepb.ReadResponse
	if !decodeReadResponse(b, &got) {
		t.Fatal("not decoded")
	}
	s := marshal(t, sinkResponses()[0].m)
	var sr sinkpb.SinkResponse
	if !decodeSinkResponse(s, &sr) {
		t.Fatal("not decoded")
	}
	tb := marshal(t, transformResponses()[0].m)
	var tr stpb.SourceTransformResponse
	if !decodeTransformResponse(tb, &tr) {
		t.Fatal("not decoded")
	}
	clear(b)
	clear(s)
	clear(tb)
	if r := tr.GetResults()[0]; tr.GetId() != "1a" || string(r.GetValue()) != "v1" || r.GetKeys()[2] != "ключ" || r.GetTags()[1] != "t2" {
		t.Fatalf("decoded fields changed with the input: %v", &tr)
	}
	if r := got.GetResult(); string(r.GetPayload()) != "hello" || string(r.GetOffset().GetOffset()) != "17" || r.GetKeys()[2] != "ключ" || r.GetHeaders()["x-ключ"] != "значение" {
		t.Fatalf("decoded fields changed with the input: %v", r)
	}
	if sr.GetResults()[1].GetId() != "b-1" || sr.GetResults()[1].GetErrMsg() != "disk full" {
		t.Fatalf("decoded fields changed with the input: %v", sr.GetResults())
	}
}

func TestDecodersLeaveOddInputToProtobuf(t *testing.T) {
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	bytesField := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), v)
	}
	result := bytesField(nil, 1, []byte("p"))
	cases := map[string][]byte{
		"read/payload twice":             bytesField(nil, 1, bytesField(result, 1, []byte("q"))),
		"read/result twice":              bytesField(bytesField(nil, 1, result), 1, result),
		"read/partition as bytes":        bytesField(nil, 1, bytesField(nil, 2, bytesField(nil, 2, []byte("x")))),
		"read/seconds as fixed64":        bytesField(nil, 1, bytesField(nil, 3, protowire.AppendFixed64(tag(nil, 1, protowire.Fixed64Type), 9))),
		"read/an unknown field":          bytesField(nil, 1, bytesField(result, 9, []byte("u"))),
		"read/a key not UTF-8":           bytesField(nil, 1, bytesField(nil, 4, []byte{0xff})),
		"read/a header not UTF-8":        bytesField(nil, 1, bytesField(nil, 5, bytesField(nil, 2, []byte{0xff}))),
		"read/a header key twice":        bytesField(nil, 1, bytesField(nil, 5, bytesField(bytesField(nil, 1, []byte("a")), 1, []byte("b")))),
		"read/metadata not empty":        bytesField(nil, 1, bytesField(nil, 6, bytesField(nil, 1, []byte("v")))),
		"read/eot as bytes":              bytesField(nil, 2, bytesField(nil, 1, []byte("x"))),
		"both/a truncated result":        bytesField(nil, 1, result)[:4],
		"read/an overlong varint":        bytesField(nil, 1, append(tag(nil, 3, protowire.BytesType), 11, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)),
		"both/a group":                   append(tag(nil, 1, protowire.StartGroupType), tag(nil, 1, protowire.EndGroupType)...),
		"sink/an id not UTF-8":           bytesField(nil, 1, bytesField(nil, 1, []byte{0xc0})),
		"sink/an id twice":               bytesField(nil, 1, bytesField(bytesField(nil, 1, []byte("a")), 1, []byte("b"))),
		"sink/a status as bytes":         bytesField(nil, 1, bytesField(nil, 2, []byte("a"))),
		"transform/a tag not UTF-8":      bytesField(nil, 1, bytesField(nil, 4, []byte{0xfe})),
		"transform/a value twice":        bytesField(nil, 1, bytesField(bytesField(nil, 2, []byte("a")), 2, []byte("b"))),
		"transform/an id twice":          bytesField(bytesField(nil, 2, []byte("a")), 2, []byte("b")),
		"transform/an id not UTF-8":      bytesField(nil, 2, []byte{0xc3}),
		"transform/nack options":         bytesField(nil, 1, bytesField(nil, 6, nil)),
		"transform/metadata not empty":   bytesField(nil, 1, bytesField(nil, 5, bytesField(nil, 1, []byte("v")))),
		"transform/event time as varint": bytesField(nil, 1, append(tag(nil, 3, protowire.VarintType), 1)),
		"both/a result not a message":    append(tag(nil, 1, protowire.VarintType), 1),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			kind, _, _ := strings.Cut(name, "/")
			if (kind == "read" || kind == "both") && decodeReadResponse(b, new(sourcepb.ReadResponse)) {
				t.Error("the read response decoder took it")
			}
			if (kind == "sink" || kind == "both") && decodeSinkResponse(b, new(sinkpb.SinkResponse)) {
				t.Error("the sink response decoder took it")
			}
			if (kind == "transform" || kind == "both") && decodeTransformResponse(b, new(stpb.SourceTransformResponse)) {
				t.Error("the transform response decoder took it")
			}
			checkDecode(t, b, new(sourcepb.ReadResponse))
			checkDecode(t, b, new(sinkpb.SinkResponse))
			checkDecode(t, b, new(stpb.SourceTransformResponse))
		})
	}
}

// FuzzDecodersMatchProtobuf feeds arbitrary bytes to the codec's
// decoding of the two messages with hand-written decoders: it must fail
// where proto.Unmarshal fails and decode what proto.Unmarshal decodes.
func FuzzDecodersMatchProtobuf(f *testing.F) {
	for _, s := range readResponses() {
		f.Add(marshal(f, s.m))
	}
	for _, s := range sinkResponses() {
		f.Add(marshal(f, s.m))
	}
	for _, s := range transformResponses() {
		f.Add(marshal(f, s.m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b, new(sourcepb.ReadResponse))
		checkDecode(t, b, new(sinkpb.SinkResponse))
		checkDecode(t, b, new(stpb.SourceTransformResponse))
	})
}

// checkDecode decodes b into got through the runner's codec, as a message
// received from a container, and into a new message of its type with
// proto.Unmarshal, and fails unless both fail or both give equal messages.
func checkDecode(t *testing.T, b []byte, got proto.Message) {
	t.Helper()
	want := got.ProtoReflect().New().Interface()
	wantErr := proto.Unmarshal(b, want)
	buf := payloadOf(b)
	raw := buf.B[:cap(buf.B)]
	gotErr := codec.UnmarshalOwned(buf, got)
	// The buffer goes back to the pool: whatever the decoded message
	// kept of it must be a copy.
	for i := range raw {
		raw[i] = 0xa5
	}
	switch {
	case (gotErr == nil) != (wantErr == nil):
		t.Fatalf("%x: codec error %v, protobuf error %v", b, gotErr, wantErr)
	case gotErr == nil && !proto.Equal(got, want):
		t.Fatalf("%x: codec decoded %v, protobuf %v", b, got, want)
	}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func timestampOf(sec int64, nsec int64) time.Time { return time.Unix(sec, nsec) }

// payloadOf is b in a pooled buffer, as udwire hands a message to the
// codec.
func payloadOf(b []byte) *payloadpool.Buffer {
	buf := payloadpool.Get(len(b))
	copy(buf.B, b)
	return buf
}
