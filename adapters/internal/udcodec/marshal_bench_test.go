package udcodec

import (
	"bytes"
	"testing"
	"time"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// BenchmarkMarshalSinkRequest encodes one message for the sink stream, as
// the udsink adapter sends each, at a payload below SpliceThreshold (the
// common case) and at 1 MiB.
func BenchmarkMarshalSinkRequest(b *testing.B) {
	c := testCodec()
	for _, size := range []int{1 << 10, 1 << 20} {
		req := &sinkpb.SinkRequest{Request: &sinkpb.SinkRequest_Request{
			Keys: []string{"k"}, Value: bytes.Repeat([]byte("v"), size), Id: "source-0-12345",
			EventTime: timestamppb.New(time.UnixMilli(1_700_000_000_001)), Watermark: timestamppb.New(time.UnixMilli(1_700_000_000_000)),
			Headers: map[string]string{"h": "v"},
		}}
		b.Run(map[int]string{1 << 10: "1KiB", 1 << 20: "1MiB"}[size], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := c.Marshal(req)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}
