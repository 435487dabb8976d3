package udconn

import (
	"testing"
	"time"

	commonpb "github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

func readResponses() []*sourcepb.ReadResponse {
	eot := true
	return []*sourcepb.ReadResponse{
		{Result: &sourcepb.ReadResponse_Result{Payload: []byte("hello"), Offset: &sourcepb.Offset{Offset: []byte("17"), PartitionId: 3},
			EventTime: timestamppb.New(timestampOf(1_700_000_000, 123)), Keys: []string{"k1", "", "ключ"}}},
		{Result: &sourcepb.ReadResponse_Result{Payload: make([]byte, 1000), Offset: &sourcepb.Offset{Offset: []byte{0, 1, 2}, PartitionId: -1},
			EventTime: &timestamppb.Timestamp{Seconds: -5, Nanos: -7}}},
		{Result: &sourcepb.ReadResponse_Result{}},
		{Result: &sourcepb.ReadResponse_Result{Offset: &sourcepb.Offset{}, EventTime: &timestamppb.Timestamp{}}},
		// Left to protobuf: headers, metadata, a status, a handshake.
		{Result: &sourcepb.ReadResponse_Result{Payload: []byte("x"), Headers: map[string]string{"a": "b"}}},
		{Result: &sourcepb.ReadResponse_Result{Payload: []byte("x"), Metadata: &commonpb.Metadata{PreviousVertex: "in"}}},
		{Status: &sourcepb.ReadResponse_Status{Eot: eot, Code: sourcepb.ReadResponse_Status_SUCCESS}},
		{Handshake: &sourcepb.Handshake{Sot: true}},
		{},
	}
}

func sinkResponses() []*sinkpb.SinkResponse {
	return []*sinkpb.SinkResponse{
		{Results: []*sinkpb.SinkResponse_Result{{Id: "a-0", Status: sinkpb.Status_SUCCESS}, {Id: "b-1", Status: sinkpb.Status_FAILURE, ErrMsg: "disk full"},
			{Id: "c-2", Status: sinkpb.Status_FALLBACK}, {}, {Id: "d-3", Status: sinkpb.Status(42)}}},
		{Results: []*sinkpb.SinkResponse_Result{{Id: "a-0"}}},
		// Left to protobuf: a serve response, an on-success message, the
		// end of the batch, a handshake.
		{Results: []*sinkpb.SinkResponse_Result{{Id: "a-0", Status: sinkpb.Status_SERVE, ServeResponse: []byte("r")}}},
		{Results: []*sinkpb.SinkResponse_Result{{Id: "a-0", Status: sinkpb.Status_ON_SUCCESS, OnSuccessMsg: &sinkpb.SinkResponse_Result_Message{Value: []byte("v")}}}},
		{Status: &sinkpb.TransmissionStatus{Eot: true}},
		{Handshake: &sinkpb.Handshake{Sot: true}},
		{},
	}
}

// TestDecodersMatchProtobuf decodes the messages the SDKs send with the
// hand-written decoders through the codec, and checks each against
// proto.Unmarshal, and that the decoders take the usual shapes themselves.
func TestDecodersMatchProtobuf(t *testing.T) {
	handled := 0
	for i, want := range readResponses() {
		b := marshal(t, want)
		checkDecode(t, b, new(sourcepb.ReadResponse))
		if decodeReadResponse(b, new(sourcepb.ReadResponse)) {
			handled++
		} else if i < 4 {
			t.Errorf("read response %d (%v) was left to protobuf", i, want)
		}
	}
	for i, want := range sinkResponses() {
		b := marshal(t, want)
		checkDecode(t, b, new(sinkpb.SinkResponse))
		if decodeSinkResponse(b, new(sinkpb.SinkResponse)) {
			handled++
		} else if i < 2 {
			t.Errorf("sink response %d (%v) was left to protobuf", i, want)
		}
	}
	// The four read results with usual fields, the two sink batches, and
	// the empty messages (nothing to do).
	if handled != 8 {
		t.Errorf("the decoders took %d messages, want 8", handled)
	}
}

// TestDecodedBytesDoNotAliasTheInput checks that what the decoders keep
// is copied: the codec gives the buffer back right after decoding.
func TestDecodedBytesDoNotAliasTheInput(t *testing.T) {
	b := marshal(t, readResponses()[0])
	var got sourcepb.ReadResponse
	if !decodeReadResponse(b, &got) {
		t.Fatal("not decoded")
	}
	s := marshal(t, sinkResponses()[0])
	var sr sinkpb.SinkResponse
	if !decodeSinkResponse(s, &sr) {
		t.Fatal("not decoded")
	}
	clear(b)
	clear(s)
	if r := got.GetResult(); string(r.GetPayload()) != "hello" || string(r.GetOffset().GetOffset()) != "17" || r.GetKeys()[2] != "ключ" {
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
		"payload twice":          bytesField(nil, 1, bytesField(result, 1, []byte("q"))),
		"result twice":           bytesField(bytesField(nil, 1, result), 1, result),
		"partition as bytes":     bytesField(nil, 1, bytesField(nil, 2, bytesField(nil, 2, []byte("x")))),
		"seconds as fixed64":     bytesField(nil, 1, bytesField(nil, 3, protowire.AppendFixed64(tag(nil, 1, protowire.Fixed64Type), 9))),
		"an unknown field":       bytesField(nil, 1, bytesField(result, 9, []byte("u"))),
		"a key not UTF-8":        bytesField(nil, 1, bytesField(nil, 4, []byte{0xff})),
		"a truncated result":     bytesField(nil, 1, result)[:4],
		"an overlong varint":     bytesField(nil, 1, append(tag(nil, 3, protowire.BytesType), 11, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)),
		"a group":                append(tag(nil, 1, protowire.StartGroupType), tag(nil, 1, protowire.EndGroupType)...),
		"an id not UTF-8":        bytesField(nil, 1, bytesField(nil, 1, []byte{0xc0})),
		"an id twice":            bytesField(nil, 1, bytesField(bytesField(nil, 1, []byte("a")), 1, []byte("b"))),
		"a status as bytes":      bytesField(nil, 1, bytesField(nil, 2, []byte("a"))),
		"a result not a message": append(tag(nil, 1, protowire.VarintType), 1),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			var r sourcepb.ReadResponse
			var s sinkpb.SinkResponse
			if decodeReadResponse(b, &r) && decodeSinkResponse(b, &s) {
				t.Fatal("both decoders took it")
			}
			checkDecode(t, b, new(sourcepb.ReadResponse))
			checkDecode(t, b, new(sinkpb.SinkResponse))
		})
	}
}

// FuzzDecodersMatchProtobuf feeds arbitrary bytes to the codec's
// decoding of the two messages with hand-written decoders: it must fail
// where proto.Unmarshal fails and decode what proto.Unmarshal decodes.
func FuzzDecodersMatchProtobuf(f *testing.F) {
	for _, m := range readResponses() {
		f.Add(marshal(f, m))
	}
	for _, m := range sinkResponses() {
		f.Add(marshal(f, m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b, new(sourcepb.ReadResponse))
		checkDecode(t, b, new(sinkpb.SinkResponse))
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
	gotErr := codec.UnmarshalOwned(buf, got)
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
