package udconn

import (
	"unicode/utf8"

	commonpb "github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	stpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Decoders for the two messages a container sends once per datum or more
// (a source's read result, a sink's results), written out by hand for the
// codec (udcodec.WithDecoder). Through protobuf's reflection a 1 KiB read
// result took a sixth of the runner's CPU in the hack/bench profile, with
// six allocations for its nested messages; here it takes one for the
// messages and one for the bytes it keeps. Only the fields the SDKs send
// for every datum are handled: anything else (metadata that is not empty,
// an error, a handshake, an unknown field, a field given twice) is left to
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

// readResponse is a read response with the messages it points to,
// allocated together.
type readResponse struct {
	res    sourcepb.ReadResponse_Result
	off    sourcepb.Offset
	ts     timestamppb.Timestamp
	md     commonpb.Metadata
	status sourcepb.ReadResponse_Status
}

// decodeReadResponse decodes a ReadResponse holding a result and a status
// as numaflow-go's source server sends them for each datum: payload,
// offset, event time, keys, headers and an empty metadata; end of
// transmission and code (a udcodec.DecodeFunc).
func decodeReadResponse(b []byte, m proto.Message) bool {
	x, ok := m.(*sourcepb.ReadResponse)
	if !ok {
		return false
	}
	x.Reset()
	r := new(readResponse)
	for len(b) > 0 {
		var f field
		if f, b, ok = next(b); !ok || f.typ != protowire.BytesType {
			return false
		}
		switch {
		case f.num == 1 && x.Result == nil:
			if !decodeReadResult(f.b, r) {
				return false
			}
			x.Result = &r.res
		case f.num == 2 && x.Status == nil:
			if !decodeReadStatus(f.b, &r.status) {
				return false
			}
			x.Status = &r.status
		default:
			return false
		}
	}
	return true
}

// decodeReadResult decodes a read result into r.res.
func decodeReadResult(b []byte, r *readResponse) bool {
	k := keep{vals: make([]byte, 0, len(b))}
	var headers []string // key, value, key, value...
	var seen [6]bool
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.num < 1 || f.num > 6 || f.typ != protowire.BytesType || (f.num != 4 && f.num != 5 && seen[f.num-1]) {
			return false
		}
		b, seen[f.num-1] = rest, true
		switch f.num {
		case 1:
			r.res.Payload = k.val(f.b)
		case 2:
			offset, ok := decodeOffset(f.b, &r.off)
			if !ok {
				return false
			}
			// Not in k.vals with the payload: the engine lets go of a
			// payload once it is written, the offset only after the ack.
			if len(offset) > 0 {
				r.off.Offset = append([]byte(nil), offset...)
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
			k.elem(&r.res.Keys, f.b)
		case 5:
			key, v, ok := decodeStringEntry(f.b)
			if !ok {
				return false
			}
			k.elem(&headers, key)
			k.elem(&headers, v)
		case 6:
			if len(f.b) != 0 { // what the SDKs send for no metadata
				return false
			}
			r.res.Metadata = &r.md
		}
	}
	cut(k.text, k.strs)
	if len(headers) > 0 {
		r.res.Headers = make(map[string]string, len(headers)/2)
		for i := 0; i < len(headers); i += 2 {
			r.res.Headers[headers[i]] = headers[i+1]
		}
	}
	return true
}

// decodeStringEntry decodes an entry of a map<string, string>: its key
// and value, either absent meaning empty.
func decodeStringEntry(b []byte) (k, v []byte, ok bool) {
	var seen [2]bool
	for len(b) > 0 {
		var f field
		if f, b, ok = next(b); !ok || f.num < 1 || f.num > 2 || f.typ != protowire.BytesType || seen[f.num-1] || !utf8.Valid(f.b) {
			return nil, nil, false
		}
		seen[f.num-1] = true
		if f.num == 1 {
			k = f.b
		} else {
			v = f.b
		}
	}
	return k, v, true
}

// decodeReadStatus decodes a read response's status, but for an error
// (a failed read is rare: protobuf decodes that one).
func decodeReadStatus(b []byte, st *sourcepb.ReadResponse_Status) bool {
	var seen [2]bool
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.num < 1 || f.num > 2 || f.typ != protowire.VarintType || seen[f.num-1] {
			return false
		}
		b, seen[f.num-1] = rest, true
		if f.num == 1 {
			st.Eot = f.v != 0
		} else {
			st.Code = sourcepb.ReadResponse_Status_Code(int32(f.v))
		}
	}
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
	k := keep{text: make([]byte, 0, size), strs: make([]span, 0, 2*count)}
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
				if g.num == 1 {
					k.str(&r.Id, g.b)
				} else {
					k.str(&r.ErrMsg, g.b)
				}
			default:
				return false
			}
		}
		x.Results[i] = r
	}
	cut(k.text, k.strs)
	return true
}

// span is where a string's bytes are in a decoder's kept bytes, and the
// string or the element of a list of strings to set to them.
type span struct {
	str    *string
	list   *[]string
	idx    int
	at, to int
}

// cut copies kept into one string and sets each span's string to its
// piece of it: one allocation for all the strings of a message.
func cut(kept []byte, strs []span) {
	if len(strs) == 0 {
		return
	}
	all := string(kept)
	for _, sp := range strs {
		if sp.list != nil {
			(*sp.list)[sp.idx] = all[sp.at:sp.to]
		} else {
			*sp.str = all[sp.at:sp.to]
		}
	}
}

// transformResult is a transformer's result with the messages it points
// to, allocated together.
type transformResult struct {
	res stpb.SourceTransformResponse_Result
	ts  timestamppb.Timestamp
	md  commonpb.Metadata
}

// decodeTransformResponse decodes a SourceTransformResponse as
// numaflow-go's transformer server sends it for each datum: its id and
// results of keys, value, event time, tags and an empty metadata (a
// udcodec.DecodeFunc).
func decodeTransformResponse(b []byte, m proto.Message) bool {
	x, ok := m.(*stpb.SourceTransformResponse)
	if !ok {
		return false
	}
	x.Reset()
	// Two passes: the first checks the fields and counts the results and
	// the bytes to keep, so that each kind takes one allocation.
	count, size := 0, 0
	var id []byte
	for rest := b; len(rest) > 0; {
		var f field
		if f, rest, ok = next(rest); !ok || f.typ != protowire.BytesType {
			return false
		}
		switch {
		case f.num == 1:
			count++
			size += len(f.b)
		case f.num == 2 && id == nil && utf8.Valid(f.b):
			id = f.b[:len(f.b):len(f.b)]
		default:
			return false
		}
	}
	k := keep{vals: make([]byte, 0, size)}
	if id != nil {
		k.str(&x.Id, id)
	}
	if count > 0 {
		results := make([]transformResult, count)
		x.Results = make([]*stpb.SourceTransformResponse_Result, count)
		i := 0
		for rest := b; len(rest) > 0; {
			var f field
			if f, rest, _ = next(rest); f.num != 1 {
				continue
			}
			r := &results[i]
			if !decodeTransformResult(f.b, r, &k) {
				return false
			}
			x.Results[i] = &r.res
			i++
		}
	}
	cut(k.text, k.strs)
	return true
}

// keep gathers the bytes a decoder keeps: values in vals, copied at once;
// strings in text, to be cut out of one string at the end.
type keep struct {
	vals, text []byte
	strs       []span
}

// str has *dst set to a copy of b by cut.
func (k *keep) str(dst *string, b []byte) {
	k.strs = append(k.strs, span{str: dst, at: len(k.text), to: len(k.text) + len(b)})
	k.text = append(k.text, b...)
}

// elem appends an element to *list that cut sets to a copy of b.
func (k *keep) elem(list *[]string, b []byte) {
	*list = append(*list, "") // set by cut: the list may grow yet
	k.strs = append(k.strs, span{list: list, idx: len(*list) - 1, at: len(k.text), to: len(k.text) + len(b)})
	k.text = append(k.text, b...)
}

// val returns a copy of b, nil for none, as protobuf decodes a bytes
// field without presence.
func (k *keep) val(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	at := len(k.vals)
	k.vals = append(k.vals, b...)
	return k.vals[at:len(k.vals):len(k.vals)]
}

// decodeTransformResult decodes one result into r, keeping its bytes in k.
func decodeTransformResult(b []byte, r *transformResult, k *keep) bool {
	var seen [5]bool
	for len(b) > 0 {
		f, rest, ok := next(b)
		if !ok || f.num < 1 || f.num > 5 || f.typ != protowire.BytesType || (f.num != 1 && f.num != 4 && seen[f.num-1]) {
			return false
		}
		b, seen[f.num-1] = rest, true
		switch f.num {
		case 1, 4:
			if !utf8.Valid(f.b) {
				return false
			}
			if f.num == 1 {
				k.elem(&r.res.Keys, f.b)
			} else {
				k.elem(&r.res.Tags, f.b)
			}
		case 2:
			r.res.Value = k.val(f.b)
		case 3:
			if !decodeTimestamp(f.b, &r.ts) {
				return false
			}
			r.res.EventTime = &r.ts
		case 5:
			if len(f.b) != 0 { // what the SDKs send for no metadata
				return false
			}
			r.res.Metadata = &r.md
		}
	}
	return true
}
