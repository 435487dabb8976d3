package udtransformer_test

import (
	"testing"

	stpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/internal/testutil/pyudf"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

// TestConformanceWithAPythonTransformerContainer runs the transformer's
// conformance suite, over each transport, against a transformer container
// written the way the Python SDK writes one (testutil/pyudf's
// testdata/pycontainer.py): grpc C-core's HTTP/2 and flow control in both
// directions instead of grpc-go's, answers from a thread pool in any
// order, payloads up to 8 MiB.
func TestConformanceWithAPythonTransformerContainer(t *testing.T) {
	py := pyudf.Python(t)
	for _, tr := range udftest.Transports {
		t.Run(tr, func(t *testing.T) {
			dir := udftest.Dir(t)
			ep := udconn.TransformerEndpoint(dir)
			pyudf.Start(t, py, "transformer", ep.Socket, ep.InfoFile, stpb.File_pkg_apis_proto_sourcetransform_v1_transform_proto)
			conformance.RunTransformer(t, conformance.TransformerCase{
				New:      func(t *testing.T) runner.Transformer { return newTransformer(t, udftest.SettingsFor(dir, tr)) },
				Features: conformance.TransformerFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}, MaxPayload: 8 << 20},
			})
		})
	}
}
