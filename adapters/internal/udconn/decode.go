package udconn

import (
	"unicode/utf8"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Decoders for the two messages a container sends once per datum or more
// (a source's read result, a sink's results), written out by hand for the
// codec (udcodec.WithDecoder). Through protobuf's reflection a 1 KiB read
// result took a sixth of the runner's CPU in the hack/bench profile, with
// four allocations for its nested messages; here it takes one for the
// messages and one for the bytes it keeps. Only the fields the SDKs send
// for every datum are handled: anything else (headers, metadata, a status,
// a handshake, an unknown field, a field given twice) is left to
// proto.Unmarshal, so what is decoded is always what protobuf decodes
// (FuzzDecodersMatchProtobuf).

// field is one field of a message being decoded: its number, wire type
// and, for the length-delimited ones, its bytes.
type field struct {
	num protowire.Number
	typ protowire.Type
	b   []byte // the value of a BytesType field
	v   uint64 // the value of a VarintType field
}

// next consumes the field at the start of b; ok is false when b does not
// hold a whole field of a varint or length-delimited type.
func next(b []byte) (f field, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return f, nil, false
	}
	b = b[n:]
	f.num, f.typ = num, typ
	switch typ {
	case protowire.BytesType:
		f.b, n = protowire.ConsumeBytes(b)
	case protowire.VarintType:
		f.v, n = protowire.ConsumeVarint(b)
	default:
		return f, nil, false
	}
	if n < 0 {
		return f, nil, false
	}
	return f, b[n:], true
}

// readResult is a read result with the messages it points to, allocated
// together.
type readResult struct {
	res sourcepb.ReadResponse_Result
	off sourcepb.Offset
	ts  timestamppb.Timestamp
}

// decodeReadResponse decodes a ReadResponse holding a result whose fields
// are payload, offset, event time and keys (a udcodec.DecodeFunc).
func decodeReadResponse(b []byte, m proto.Message) bool {
	x, ok := m.(*sourcepb.ReadResponse)
	if !ok {
		return false
	}
	x.Reset()
	if len(b) == 0 {
		return true
	}
	f, rest, ok := next(b)
	if !ok || f.num != 1 || f.typ != protowire.BytesType || len(rest) != 0 {
		return false
	}
	r := new(readResult)
	var payload, offset []byte
	var keys [][]byte
	var seen [4]bool
	for b = f.b; len(b) > 0; {
		if f, b, ok = next(b); !ok || f.num < 1 || f.num > 4 || f.typ != protowire.BytesType || (f.num != 4 && seen[f.num-1]) {
			return false
		}
		seen[f.num-1] = true
		switch f.num {
		case 1:
			payload = f.b
		case 2:
			if offset, ok = decodeOffset(f.b, &r.off); !ok {
				return false
			}
			r.res.Offset = &r.off
		case 3:
			if !decodeTimestamp(f.b, &r.ts) {
				return false
			}
			r.res.EventTime = &r.ts
		case 4:
			if !utf8.Valid(f.b) {
				return false
			}
			keys = append(keys, f.b)
		}
	}
	// The payload and the offset share one copy, as the keys do.
	if n := len(payload) + len(offset); n > 0 {
		kept := make([]byte, n)
		copy(kept, payload)
		copy(kept[len(payload):], offset)
		if len(payload) > 0 {
			r.res.Payload = kept[:len(payload):len(payload)]
		}
		if len(offset) > 0 {
			r.off.Offset = kept[len(payload):]
		}
	}
	r.res.Keys = copyStrings(keys)
	x.Result = &r.res
	return true
}

// decodeOffset decodes an Offset into o, except for its bytes, which it
// returns for the caller to copy.
func decodeOffset(b []byte, o *sourcepb.Offset) (offset []byte, ok bool) {
	var seen [2]bool
	for len(b) > 0 {
		var f field
		if f, b, ok = next(b); !ok || f.num < 1 || f.num > 2 || seen[f.num-1] {
			return nil, false
		}
		seen[f.num-1] = true
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			offset = f.b
		case f.num == 2 && f.typ == protowire.VarintType:
			o.PartitionId = int32(f.v)
		default:
			return nil, false
		}
	}
	return offset, true
}

// decodeTimestamp decodes a google.protobuf.Timestamp into ts.
func decodeTimestamp(b []byte, ts *timestamppb.Timestamp) bool {
	var seen [2]bool
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.num < 1 || f.num > 2 || f.typ != protowire.VarintType || seen[f.num-1] {
			return false
		}
		b, seen[f.num-1] = rest, true
		if f.num == 1 {
			ts.Seconds = int64(f.v)
		} else {
			ts.Nanos = int32(f.v)
		}
	}
	return true
}

// copyStrings copies parts into one string and returns its pieces; nil
// for none.
func copyStrings(parts [][]byte) []string {
	if len(parts) == 0 {
		return nil
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	all := make([]byte, 0, n)
	for _, p := range parts {
		all = append(all, p...)
	}
	s := string(all)
	out := make([]string, len(parts))
	at := 0
	for i, p := range parts {
		out[i] = s[at : at+len(p)]
		at += len(p)
	}
	return out
}

// decodeSinkResponse decodes a SinkResponse that holds only results with
// an id, a status and an error message (a udcodec.DecodeFunc).
func decodeSinkResponse(b []byte, m proto.Message) bool {
	x, ok := m.(*sinkpb.SinkResponse)
	if !ok {
		return false
	}
	x.Reset()
	// Two passes: the first counts the results, so that they and their
	// strings take one allocation each.
	count, size := 0, 0
	for rest := b; len(rest) > 0; count++ {
		var f field
		if f, rest, ok = next(rest); !ok || f.num != 1 || f.typ != protowire.BytesType {
			return false
		}
		size += len(f.b)
	}
	if count == 0 {
		return true
	}
	results := make([]sinkpb.SinkResponse_Result, count)
	x.Results = make([]*sinkpb.SinkResponse_Result, count)
	text := make([]byte, 0, size)
	// Where each string's bytes are in text, to cut them out of one string
	// once all are copied.
	type span struct {
		dst    *string
		at, to int
	}
	spans := make([]span, 0, 2*count)
	for i := range results {
		var f field
		f, b, _ = next(b)
		r := &results[i]
		var seen [3]bool
		for v := f.b; len(v) > 0; {
			var g field
			if g, v, ok = next(v); !ok || g.num < 1 || g.num > 3 || seen[g.num-1] {
				return false
			}
			seen[g.num-1] = true
			switch {
			case g.num == 2 && g.typ == protowire.VarintType:
				r.Status = sinkpb.Status(int32(g.v))
			case g.num != 2 && g.typ == protowire.BytesType && utf8.Valid(g.b):
				dst := &r.Id
				if g.num == 3 {
					dst = &r.ErrMsg
				}
				spans = append(spans, span{dst, len(text), len(text) + len(g.b)})
				text = append(text, g.b...)
			default:
				return false
			}
		}
		x.Results[i] = r
	}
	all := string(text)
	for _, sp := range spans {
		*sp.dst = all[sp.at:sp.to]
	}
	return true
}
