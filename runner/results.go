package runner

// ResultTaker is implemented by sources that answer each input with what
// became of it, such as the HTTP source with MV_HTTP_RESPONSE=result
// (Benthos' sync_response, Numaflow's Serving). Just before the engine
// acks inputs, it hands over, per input, the outputs the sink or the
// fallback sink wrote for it, in the order they were written: none when
// every output was dropped on purpose. Inputs that are nacked get no
// results; their Nack follows as usual.
type ResultTaker interface {
	// TakesResults reports, once when the engine is built, whether the
	// engine should gather results at all; with false it costs nothing.
	TakesResults() bool
	// Results is called before Ack(msgs) with written[i] the outputs of
	// msgs[i]. The outputs' payloads are given back after the ack (see
	// Message.Release): what is kept must be copied before Results returns.
	Results(msgs []*Message, written [][]*Message)
}

// keepResult records that o reached a sink, for a ResultTaker source.
func (b *batch) keepResult(o output) {
	if b.e.results == nil {
		return
	}
	in := &b.inputs[o.parent]
	in.written = append(in.written, o.msg)
}

// handResults gives a ResultTaker source the outputs of ready, the inputs
// about to be acked, from index first of the batch on, in order.
func (b *batch) handResults(first int, ready []*Message) {
	if b.e.results == nil {
		return
	}
	written := make([][]*Message, 0, len(ready))
	for i := first; len(written) < len(ready) && i < len(b.inputs); i++ {
		if in := &b.inputs[i]; in.msg == ready[len(written)] {
			written = append(written, in.written)
			in.written = nil
		}
	}
	b.e.results.Results(ready, written)
}
