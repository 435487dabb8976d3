package udmap_test

import (
	"testing"

	mappb "github.com/numaproj/numaflow-go/pkg/apis/proto/map/v1"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/internal/testutil/pyudf"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

// TestConformanceWithPythonMapContainers runs the transformer's
// conformance suite, over each transport, against map containers written
// the way the Python SDK writes them (testutil/pyudf's testdata/pycontainer.py):
// grpc C-core's HTTP/2 and flow control in both directions instead of
// grpc-go's; in unary mode answers from a thread pool in any order, in
// batch mode one batch at a time (a second batch stream while one is open
// fails the test); payloads up to 8 MiB.
func TestConformanceWithPythonMapContainers(t *testing.T) {
	py := pyudf.Python(t)
	for _, c := range []struct {
		mode udconn.MapMode
		kind string
	}{{udconn.UnaryMap, "map"}, {udconn.BatchMap, "batchmap"}} {
		for _, tr := range udftest.Transports {
			t.Run(string(c.mode)+"/"+tr, func(t *testing.T) {
				dir := udftest.Dir(t)
				ep := udconn.MapEndpoint(dir, c.mode)
				pyudf.Start(t, py, c.kind, ep.Socket, ep.InfoFile, mappb.File_pkg_apis_proto_map_v1_map_proto)
				conformance.RunTransformer(t, conformance.TransformerCase{
					New:      func(t *testing.T) runner.Transformer { return newMap(t, udftest.SettingsFor(dir, tr)) },
					Features: conformance.TransformerFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}, MaxPayload: 8 << 20},
				})
			})
		}
	}
}
