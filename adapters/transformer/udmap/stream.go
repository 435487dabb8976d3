package udmap

import (
	"errors"
	"fmt"
	"sync"

	mappb "github.com/numaproj/numaflow-go/pkg/apis/proto/map/v1"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/internal/payloadpool"
)

// errReset ends a stream the adapter gave up on (replaced, or a batch
// abandoned by its caller) without the container being at fault.
var errReset = errors.New("stream reset")

// mapFn is the MapFn protocol of every map mode, opened with a handshake.
var mapFn = udconn.NewProtocol[mappb.MapRequest, mappb.MapResponse]("MapFn", mappb.NewMapClient, mappb.MapClient.MapFn)

// reply is the results for one request, routed to the call that sent it.
type reply struct {
	k       int // index in the call's messages
	results []*mappb.MapResponse_Result
	bufs    []*payloadpool.Buffer // what the results' values alias
}

// waiter is a call waiting for the results of one request. In stream mode
// the results of several responses gather in acc until the request's EOT;
// only the receive loop touches acc until it hands it over.
type waiter struct {
	k    int
	ch   chan<- reply
	acc  []*mappb.MapResponse_Result
	bufs []*payloadpool.Buffer
}

// stream is one MapFn stream after its handshake, with the calls waiting
// for results on it.
type stream struct {
	*udconn.Stream[mappb.MapRequest, mappb.MapResponse]
	mode    udconn.MapMode
	log     *zap.SugaredLogger
	waiting udconn.Waiters[*waiter]

	mu  sync.Mutex
	eot chan struct{} // batch mode: closed by the container's EOT for the batch on the stream
}

// newStream takes a MapFn stream after its handshake and starts routing
// its responses.
func newStream(s *udconn.Stream[mappb.MapRequest, mappb.MapResponse], mode udconn.MapMode, log *zap.SugaredLogger) *stream {
	st := &stream{Stream: s, mode: mode, log: log}
	go st.ReceiveOwned(st.route)
	return st
}

// route hands one response's results to the call waiting for them.
func (st *stream) route(resp *mappb.MapResponse, buf *payloadpool.Buffer) error {
	eot := resp.GetStatus().GetEot()
	switch st.mode {
	case udconn.BatchMap:
		if eot {
			buf.Release()
			return st.batchEnded()
		}
		st.deliver(resp.GetId(), resp.GetResults(), buf, true)
	case udconn.StreamMap:
		// Results, or the EOT that ends the request's results.
		st.deliver(resp.GetId(), resp.GetResults(), buf, eot)
	default:
		st.deliver(resp.GetId(), resp.GetResults(), buf, true)
	}
	return nil
}

// deliver adds results for request id and, when final, hands them all to
// the call waiting for them.
func (st *stream) deliver(id string, results []*mappb.MapResponse_Result, buf *payloadpool.Buffer, final bool) {
	w, ok := st.waiting.Get(id, final)
	if !ok {
		buf.Release()
		// A call that gave up (its context ended) or a container answering
		// an id it was not sent: either way nobody waits for it, as
		// numaflow-core logs and skips it (mapper/map/unary.rs
		// process_unary_response).
		st.log.Debugw("dropping a map response nobody waits for", "id", id)
		return
	}
	w.acc = append(w.acc, results...)
	if buf != nil {
		w.bufs = append(w.bufs, buf)
	}
	if final {
		w.ch <- reply{k: w.k, results: w.acc, bufs: w.bufs} // buffered for every request of the call
	}
}

// beginBatch notes that a batch is going onto the stream and returns the
// channel its EOT closes.
func (st *stream) beginBatch() <-chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.eot = make(chan struct{})
	return st.eot
}

// batchEnded takes the container's EOT. An EOT while results are still
// owed is a broken batch map (numaflow-core: UDF_PARTIAL_RESPONSE, a
// redrive), and one with no batch on the stream a protocol error.
func (st *stream) batchEnded() error {
	st.mu.Lock()
	eot := st.eot
	st.eot = nil
	st.mu.Unlock()
	switch owed := st.waiting.Len(); {
	case owed > 0:
		return fmt.Errorf("the batch map container ended the batch (EOT) before it answered %d of its messages; check that the BatchMap handler returns a response for every datum", owed)
	case eot == nil:
		return errors.New("protocol error: the batch map container sent an EOT with no batch in flight")
	}
	close(eot)
	return nil
}
