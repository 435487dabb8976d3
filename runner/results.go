package runner

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
