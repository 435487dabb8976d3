package udmap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	mappb "github.com/numaproj/numaflow-go/pkg/apis/proto/map/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/monovertex/monovertex/adapters/internal/serverinfo"
)

// errReset ends a stream the adapter gave up on (replaced, or a batch
// abandoned by its caller) without the container being at fault.
var errReset = errors.New("stream reset")

// reply is the results for one request, routed to the call that sent it.
type reply struct {
	k       int // index in the call's messages
	results []*mappb.MapResponse_Result
}

// waiter is a call waiting for the results of one request. In stream mode
// the results of several responses gather in acc until the request's EOT.
type waiter struct {
	k   int
	ch  chan<- reply
	acc []*mappb.MapResponse_Result
}

// stream is one MapFn stream after its handshake, with the calls waiting
// for results on it.
type stream struct {
	gen    uint64
	mode   serverinfo.MapMode
	c      mappb.Map_MapFnClient
	cancel context.CancelFunc
	log    *zap.SugaredLogger
	sendMu sync.Mutex

	mu      sync.Mutex
	waiting map[string]*waiter
	eot     chan struct{} // batch mode: closed by the container's EOT for the batch on the stream
	err     error
	dead    chan struct{}
}

// open starts a MapFn stream under parent (which outlives the call) and
// does the handshake, bounded by ctx (the call's).
func open(ctx, parent context.Context, cc *grpc.ClientConn, gen uint64, mode serverinfo.MapMode, log *zap.SugaredLogger) (*stream, error) {
	sctx, cancel := context.WithCancel(parent)
	c, err := mappb.NewMapClient(cc).MapFn(sctx)
	if err == nil {
		err = c.Send(&mappb.MapRequest{Handshake: &mappb.Handshake{Sot: true}})
	}
	if err == nil {
		err = handshake(ctx, c)
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open MapFn stream: %w", err)
	}
	st := &stream{gen: gen, mode: mode, c: c, cancel: cancel, log: log, waiting: map[string]*waiter{}, dead: make(chan struct{})}
	go st.receive()
	return st, nil
}

func handshake(ctx context.Context, c mappb.Map_MapFnClient) error {
	errc := make(chan error, 1)
	go func() {
		resp, err := c.Recv()
		if err == nil && !resp.GetHandshake().GetSot() {
			err = fmt.Errorf("protocol error: the first response is not a handshake: %v", resp)
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// receive routes results to their calls until the stream ends.
func (st *stream) receive() {
	for {
		resp, err := st.c.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the container closed the stream")
			}
			st.fail(err)
			return
		}
		eot := resp.GetStatus().GetEot()
		switch st.mode {
		case serverinfo.BatchMap:
			if eot {
				st.batchEnded()
				continue
			}
			st.deliver(resp.GetId(), resp.GetResults(), true)
		case serverinfo.StreamMap:
			// Results, or the EOT that ends the request's results.
			st.deliver(resp.GetId(), resp.GetResults(), eot)
		default:
			st.deliver(resp.GetId(), resp.GetResults(), true)
		}
	}
}

// deliver adds results for request id and, when final, hands them all to
// the call waiting for them.
func (st *stream) deliver(id string, results []*mappb.MapResponse_Result, final bool) {
	st.mu.Lock()
	w, ok := st.waiting[id]
	if ok {
		w.acc = append(w.acc, results...)
		if final {
			delete(st.waiting, id)
		}
	}
	st.mu.Unlock()
	if !ok {
		// A call that gave up (its context ended) or a container answering
		// an id it was not sent: either way nobody waits for it, as
		// numaflow-core logs and skips it (mapper/map/unary.rs
		// process_unary_response).
		st.log.Debugw("dropping a map response nobody waits for", "id", id)
		return
	}
	if final {
		w.ch <- reply{k: w.k, results: w.acc} // buffered for every request of the call
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
func (st *stream) batchEnded() {
	st.mu.Lock()
	owed, eot := len(st.waiting), st.eot
	st.eot = nil
	st.mu.Unlock()
	switch {
	case owed > 0:
		st.fail(fmt.Errorf("the batch map container ended the batch (EOT) before it answered %d of its messages; check that the BatchMap handler returns a response for every datum", owed))
	case eot == nil:
		st.fail(errors.New("protocol error: the batch map container sent an EOT with no batch in flight"))
	default:
		close(eot)
	}
}

func (st *stream) expect(id string, w *waiter) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	st.waiting[id] = w
	return nil
}

func (st *stream) forget(ids []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, id := range ids {
		delete(st.waiting, id)
	}
}

func (st *stream) send(req *mappb.MapRequest) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	return st.c.Send(req)
}

func (st *stream) closeSend() {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.c.CloseSend()
}

func (st *stream) fail(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err == nil {
		st.err = err
		close(st.dead)
	}
}

func (st *stream) failure() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}
