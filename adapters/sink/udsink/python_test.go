package udsink_test

import (
	"testing"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/internal/testutil/pyudf"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

// TestConformanceWithAPythonSinkContainer runs the sink's conformance
// suite, over each transport, against a sink container written the way
// the Python SDK writes one (testutil/pyudf's testdata/pycontainer.py): grpc C-core's HTTP/2
// and flow control instead of grpc-go's, one batch at a time under the
// handler's lock, payloads up to 8 MiB.
func TestConformanceWithAPythonSinkContainer(t *testing.T) {
	py := pyudf.Python(t)
	for _, tr := range udftest.Transports {
		t.Run(tr, func(t *testing.T) {
			dir := udftest.Dir(t)
			ep := udconn.SinkEndpoint(dir, false)
			record := pyudf.Start(t, py, "sink", ep.Socket, ep.InfoFile, sinkpb.File_pkg_apis_proto_sink_v1_sink_proto)
			conformance.RunSink(t, conformance.SinkCase{
				New:      func(t *testing.T) runner.Sink { return newSink(t, udftest.SettingsFor(dir, tr), runner.RoleSink) },
				Received: func(t *testing.T) []*runner.Message { return record.Messages(t) },
				Features: conformance.SinkFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}, AnswersFailure: true, KeepsKeys: true, KeepsEventTime: true, KeepsHeaders: true, MaxPayload: 8 << 20},
			})
		})
	}
}
