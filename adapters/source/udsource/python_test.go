package udsource_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/internal/testutil/pyudf"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

// TestConformanceWithAPythonSourceContainer runs the source's conformance
// suite, over each transport, against a source container written the way
// the Python SDK writes one (testutil/pyudf's testdata/pycontainer.py): grpc
// C-core's HTTP/2 and flow control instead of grpc-go's, a read handler
// that fails the test if it is ever entered twice at once, and some
// payloads of 2 MiB.
func TestConformanceWithAPythonSourceContainer(t *testing.T) {
	py := pyudf.Python(t)
	for _, tr := range udftest.Transports {
		t.Run(tr, func(t *testing.T) {
			dir := udftest.Dir(t)
			ep := udconn.SourceEndpoint(dir)
			spool := pyudf.Start(t, py, "source", ep.Socket, ep.InfoFile, sourcepb.File_pkg_apis_proto_source_v1_source_proto)
			var mu sync.Mutex
			produced := 0
			conformance.RunSource(t, conformance.SourceCase{
				New: func(t *testing.T) runner.Source { return newSource(t, udftest.SettingsFor(dir, tr)) },
				Produce: func(t *testing.T, n int) [][]byte {
					mu.Lock()
					defer mu.Unlock()
					values := make([][]byte, n)
					for i := range values {
						values[i] = pythonValue(produced + i)
					}
					produced += n
					spool.Produce(t, values)
					return values
				},
				Features: conformance.SourceFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}, Nack: true, RedeliverAfterClose: true, Pending: true, KeepsValues: true, RedeliveryWait: 15 * time.Second},
			})
		})
	}
}

// pythonValue is message n's value: every 40th one 2 MiB, each distinct.
func pythonValue(n int) []byte {
	v := fmt.Appendf(nil, "value-%d", n)
	if n%40 == 7 {
		cell := fmt.Appendf(nil, "|%d", n)
		v = append(v, bytes.Repeat(cell, (2<<20)/len(cell))...)[:2<<20]
	}
	return v
}
