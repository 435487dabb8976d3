package runner

import (
	"slices"
	"strconv"
	"strings"
)

// MessageIDs is how the engine forms the IDs sinks and transformers see
// (MV_MESSAGE_IDS).
type MessageIDs string

// The ways of forming message IDs.
const (
	// SourceIDs keeps the source's own IDs; one output of a stage keeps
	// its input's, several get "-k" suffixes.
	SourceIDs MessageIDs = "source"
	// NumaflowIDs forms them as numaflow-core's MessageID prints:
	// <vertex>-<offset>-<index>, the vertex being MV_NAME and the offset
	// the source's offset string (what the source gives as the ID). A
	// stage's outputs derive from the message's offset (NumaflowOffsetter,
	// where a source's differs from its ID's) and are numbered by their
	// place k among all the results the container returned, dropped ones
	// included (TransformResult.Indexes): a transformer's keeps the offset
	// and takes index k (transformer/user_defined.rs); a map UDF's appends
	// its input's index to the offset, unary and batch taking index k
	// (mapper/map.rs), stream mode numbering on from the input's index
	// (mapper/map/stream.rs). So a sink that de-duplicates on IDs sees,
	// for the same source offset, the IDs Numaflow gave it, except where
	// Numaflow's would collide (see outputID).
	NumaflowIDs MessageIDs = "numaflow"
)

// nameNumaflow gives the inputs of a batch, as it starts, the names
// numaflow-core gives messages read: <vertex>-<ID>-0, the source's ID
// being the offset numaflow-core puts in the MessageID. Each input's
// record keeps the offset its outputs are named from: the source's own
// (NumaflowOffsetter), or else its ID. The record keeps the source's ID
// too, which the message gets back before Ack or Nack (sourceIDs).
func (b *batch) nameNumaflow() {
	e := b.e
	for i := range b.inputs {
		in := &b.inputs[i]
		if e.offsets != nil {
			in.offset = e.offsets.NumaflowOffset(in.msg)
		}
		if in.offset == "" {
			in.offset = in.id
		}
		in.msg.ID = e.opts.Name + "-" + in.id + "-0"
	}
}

// sourceIDs returns ready, the inputs from index first of the batch on
// that are about to be acked, in order, under the IDs their source gave
// them, which nameNumaflow or a stage that passed the message on alone
// replaced: a source finds its messages by the IDs it gave them, and the
// engine's set of messages in flight holds those (settled). ready itself
// keeps the engine's messages (the lanes and recycle find inputs by
// pointer); the slice returned holds a copy where sourceMsg made one.
// handBack does the same for the inputs it hands back.
func (b *batch) sourceIDs(first int, ready []*Message) []*Message {
	out, cloned := ready, false
	for i, j := first, 0; j < len(ready) && i < len(b.inputs); i++ {
		in := &b.inputs[i]
		if in.msg != ready[j] {
			continue
		}
		if m := b.sourceMsg(in); m != in.msg {
			if !cloned {
				out, cloned = slices.Clone(ready), true
			}
			out[j] = m
		}
		j++
	}
	return out
}

// sourceMsg is in's message under the ID its source gave it. A message
// whose ID is the source's already is not written to; one that was
// renamed gets its ID back in place, unless a call of this batch failed
// (b.tainted): a call cut short may still read its messages (udsink's
// batch goroutine, whose caller's context ended, reads their IDs to match
// the container's answers), so the source then gets a copy under its ID
// and the message the call holds keeps the name it was sent under.
func (b *batch) sourceMsg(in *inputState) *Message {
	m := in.msg
	if m.ID == in.id {
		return m
	}
	if b.tainted {
		cp := *m
		cp.ID = in.id
		return &cp
	}
	m.ID = in.id
	return m
}

// outputID derives the ID of output k of the n outputs of in at stage
// st; place is the output's place among all the results the stage's
// container returned (Numaflow numbers by it: TransformResult.Indexes),
// offset the offset of the input read that in came from (nameNumaflow).
// Under SourceIDs one output keeps the input's ID and several get "-k"
// suffixes; under NumaflowIDs see NumaflowIDs. Either way the IDs are the
// same on every redelivery, so sinks can de-duplicate on them.
func (e *Engine) outputID(st *stage, in *Message, offset string, k, place, n int) string {
	if st.Role == RoleFilter {
		// A filter passes its input on as it is: Numaflow has no such
		// stage, so the ID the sink sees is the one it would see without it.
		return in.ID
	}
	if e.opts.MessageIDs != NumaflowIDs {
		if n == 1 {
			return in.ID
		}
		return in.ID + "-" + strconv.Itoa(k)
	}
	base := e.opts.Name + "-" + offset
	switch {
	case st.Role == RoleTransformer:
		// MessageID{offset: the source's offset, index: the place}
		// (transformer/user_defined.rs).
		return base + "-" + strconv.Itoa(place)
	case st.streams:
		// numaflow-core's stream map: offset <offset>-<i> and index i,
		// where i counts on from the input's index p (stream.rs).
		p := idIndex(in.ID)
		i := strconv.Itoa(p + place)
		if p == 0 {
			return base + "-" + i + "-" + i
		}
		// After a transformer's fan-out Numaflow's IDs collide (output 1
		// of input 0 and output 0 of input 1 are both <offset>-1-1), and a
		// sink matching answers to requests by ID, or JetStream's
		// de-duplication, could not tell them apart. Here p stays in
		// front, so they cannot: three numbers after the offset where
		// input 0's outputs have two.
		return base + "-" + strconv.Itoa(p) + "-" + i + "-" + i
	default:
		// Unary and batch map: offset <offset>-<input index>, index the
		// place (mapper/map.rs).
		return base + "-" + strconv.Itoa(idIndex(in.ID)) + "-" + strconv.Itoa(place)
	}
}

// idIndex is the index a Numaflow-style ID ends with; the engine made it,
// so it is a number.
func idIndex(id string) int {
	n, _ := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	return n
}
