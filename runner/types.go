// Package runner is the monovertex engine: it reads batches from a Source,
// passes them through an optional Transformer, writes them to a Sink (and a
// fallback Sink), and acknowledges each message only after it reached a final
// state. It owns batching, retries, fallback routing, ack tracking, metrics
// and shutdown; adapters implement the small interfaces in this file.
package runner

import (
	"fmt"
	"time"
)

// Message is one record moving from a source through the transformer to a sink.
type Message struct {
	// ID identifies the message within its source. The engine derives the IDs
	// of transformer outputs from it (see Engine), so they are stable across
	// redeliveries and sinks can de-duplicate on them. Under
	// MV_MESSAGE_IDS=numaflow the engine names the message itself while it
	// holds it (see NumaflowIDs); the source gets it back under its own ID.
	ID string
	// Keys are the message keys (Numaflow keys, CloudEvents partitionkey).
	Keys []string
	// Value is the payload.
	Value []byte
	// EventTime is when the event happened, as the producer says.
	EventTime time.Time
	// Headers carry user metadata (Numaflow headers, CloudEvents extensions).
	// A map is read only once its message is made: the engine gives an
	// input's to its outputs, and a source may share one among messages.
	// To change headers, set a new map.
	Headers map[string]string
	// Tags are the tags a Numaflow transformer or map UDF put on the
	// message (numaflow-go's WithTags); bypass conditions route on them.
	Tags []string
	// Metadata is Numaflow's per-message metadata; nil when there is none.
	Metadata *Metadata
	// FallbackCause, on a message the engine writes to the fallback sink,
	// is the failure that sent it there: the sink's (or a stage's) last
	// error once MV_ON_FAILURE=fallback applied. It is nil when the sink
	// asked for the fallback itself (WriteFallback). A fallback sink may
	// record it, as the CloudEvents sink does in Knative's knativeerror*
	// extensions.
	FallbackCause error
	// Offset is the source's own handle, given back to it in Ack and Nack.
	// The engine and sinks never look inside it; where the engine asks a
	// source about a message (PartitionedSource), the source finds the
	// answer here.
	Offset any
	// Release, when the adapter that made the message sets it, gives the
	// memory behind Value back to that adapter (package payloadpool). The
	// engine calls it at most once, when nothing will read Value again: as
	// a transformer's outputs replace the message, or after its input's
	// ack. It leaves the memory to the garbage collector instead (never
	// calls it) when any call that carried the batch failed, since a call
	// cut short may still be reading. So that this is sound, a sink's Write
	// and a transformer's Transform must not read any message's Value
	// after they return successfully. The engine takes it off a message it
	// reads as the batch starts, so a copy of the message (out := *m in a
	// transformer) does not carry it.
	Release func()
}

// Metadata is the metadata Numaflow carries with a message from the source
// through every stage to the sink (common.Metadata in Numaflow's protos):
// user metadata, which sources, transformers and map UDFs may set and
// change, and system metadata, which only the runner sets and containers
// may read. Both are groups of key-value pairs.
type Metadata struct {
	// PreviousVertex is the stage the message last came from.
	PreviousVertex string
	// User is the read-write user metadata, group -> key -> value.
	User map[string]map[string][]byte
	// System is the read-only system metadata, group -> key -> value.
	System map[string]map[string][]byte
}

// Clone returns a deep copy, so a stage can change its copy without
// changing what another output of the same input carries.
func (md *Metadata) Clone() *Metadata {
	if md == nil {
		return nil
	}
	return &Metadata{PreviousVertex: md.PreviousVertex, User: cloneGroups(md.User), System: cloneGroups(md.System)}
}

func cloneGroups(g map[string]map[string][]byte) map[string]map[string][]byte {
	if g == nil {
		return nil
	}
	out := make(map[string]map[string][]byte, len(g))
	for name, kv := range g {
		c := make(map[string][]byte, len(kv))
		for k, v := range kv {
			c[k] = v // values are never changed in place, only replaced
		}
		out[name] = c
	}
	return out
}

// Nack is what a transformer, map UDF or sink asked of the source when it
// nacked a message: Numaflow's NackOptions (common.NackOptions; its
// numaflow-core form in message.rs), carried to the source's nack as they
// came, so a user-defined source's NackFn sees them as the sink sent them.
type Nack struct {
	// Delay asks the source to redeliver no sooner than this (Numaflow's
	// delay, in milliseconds on the wire); 0: no delay asked for.
	Delay time.Duration
	// Reason says why, in the nacking container's words; "" when none.
	Reason string
	// MaxDeliveries is the most deliveries the nacking side wants the
	// message to have; 0 when none was asked for.
	MaxDeliveries uint32
	// Map is Numaflow's nack_map, generic values for the source.
	Map map[string]string
}

// longer returns whichever of n and o asks for the longer delay, n on a
// tie: when several outputs of one input nack, the input is handed back
// once, with the options of the nack that asked to wait longest.
func (n Nack) longer(o Nack) Nack {
	if o.Delay > n.Delay {
		return o
	}
	return n
}

// key identifies the options, so the engine can hand back the inputs
// nacked alike in one call; fmt prints a map's keys sorted.
func (n Nack) key() string {
	return fmt.Sprintf("%d\x00%q\x00%d\x00%v", n.Delay, n.Reason, n.MaxDeliveries, n.Map)
}

// TransformResult is the outcome of transforming one input message.
type TransformResult struct {
	// Outputs are the messages to write; none means the input was dropped on
	// purpose. The engine sets their IDs and fills empty fields (event time,
	// keys, headers) from the input.
	Outputs []*Message
	// Indexes, when not nil, is each output's place among all the results
	// its container returned, those it asked to drop included: Outputs[k]
	// was result Indexes[k]. Numaflow numbers outputs by that place
	// (MV_MESSAGE_IDS=numaflow); nil means output k was result k.
	Indexes []int
	// Err is set when this message failed. It is retried with the retry
	// strategy unless wrapped with Permanent, after which MV_ON_FAILURE decides.
	Err error
	// Nack asks the engine to hand the input back to the source
	// unprocessed, with NackOptions (a delay, where the source can delay
	// it, and the rest of what the container asked for).
	Nack        bool
	NackOptions Nack
}

// Hold hands the engine release, which frees memory that the outputs'
// values may alias (a pooled receive buffer): the engine calls it once
// every output is written, after the input's ack, like a Message's
// Release. With no outputs it runs at once.
func (r *TransformResult) Hold(release func()) {
	switch {
	case release == nil:
	case len(r.Outputs) == 0:
		release()
	case r.Outputs[0].Release == nil:
		r.Outputs[0].Release = release
	default:
		prev := r.Outputs[0].Release
		r.Outputs[0].Release = func() {
			prev()
			release()
		}
	}
}

// WriteStatus is the outcome of writing one message.
type WriteStatus uint8

const (
	// WriteOK means the sink took the message.
	WriteOK WriteStatus = iota
	// WriteFailed means the write failed; the engine retries it.
	WriteFailed
	// WriteFallback means the sink asks for the message to go to the fallback sink.
	WriteFallback
	// WriteOnSuccess means the sink took the message and asks for it (or
	// WriteResult.OnSuccess in its place) to be written to the onSuccess
	// sink; the input is acked only after that write.
	WriteOnSuccess
	// WriteNack means the sink hands the message back to the source with
	// WriteResult.NackOptions; it is not retried on the sink.
	WriteNack
)

// String names the status for logs.
func (s WriteStatus) String() string {
	switch s {
	case WriteOK:
		return "ok"
	case WriteFailed:
		return "failed"
	case WriteFallback:
		return "fallback"
	case WriteOnSuccess:
		return "on-success"
	case WriteNack:
		return "nack"
	}
	return "unknown"
}

// WriteResult is the outcome of writing one message.
type WriteResult struct {
	Status WriteStatus
	// Err says why a write failed; Permanent errors skip the remaining retries.
	Err error
	// OnSuccess, with WriteOnSuccess, is the message to write to the
	// onSuccess sink instead of the original; nil writes the original.
	OnSuccess *Message
	// NackOptions, with WriteNack, is what the sink asked of the source:
	// how long to wait before redelivering the message, and why.
	NackOptions Nack
}

// OKResults returns n successful results, for sinks that succeed or fail
// whole batches.
func OKResults(n int) []WriteResult {
	return make([]WriteResult, n)
}
