package udcodec

import (
	"fmt"
	"strings"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// SpliceThreshold is the payload size from which a payload is sent as it
// is and received by aliasing. Below it the work of finding the field in
// the wire bytes costs more than the copy it saves.
const SpliceThreshold = 16 << 10

// Payload names the large bytes field of a message type: field Inner (a
// bytes field) of the message in field Outer (a message field, singular or
// repeated) of Message, such as value in SinkRequest.request.
type Payload struct {
	Message protoreflect.MessageDescriptor
	Outer   protowire.Number
	Inner   protowire.Number
}

type rule struct {
	outer, inner protoreflect.FieldDescriptor
}

// Codec is a grpc-go CodecV2 for protobuf messages that marshals into and
// materializes from Pool, and treats the payload fields it was given
// without extra copies (see Marshal and Unmarshal). Its name is "proto", so
// servers see the usual application/grpc content type.
type Codec struct {
	pool  *Pool
	rules map[protoreflect.FullName]rule
}

var _ encoding.CodecV2 = (*Codec)(nil)

// New returns a codec using pool, with the given payload fields. It panics
// on a Payload that does not name a message field holding a bytes field:
// the table is the program's, not the user's.
func New(pool *Pool, payloads ...Payload) *Codec {
	c := &Codec{pool: pool, rules: map[protoreflect.FullName]rule{}}
	for _, p := range payloads {
		outer := p.Message.Fields().ByNumber(p.Outer)
		if outer == nil || outer.Message() == nil {
			panic(fmt.Sprintf("udcodec: %s has no message field %d", p.Message.FullName(), p.Outer))
		}
		inner := outer.Message().Fields().ByNumber(p.Inner)
		if inner == nil || inner.Kind() != protoreflect.BytesKind || inner.IsList() {
			panic(fmt.Sprintf("udcodec: %s has no bytes field %d", outer.Message().FullName(), p.Inner))
		}
		c.rules[p.Message.FullName()] = rule{outer: outer, inner: inner}
	}
	return c
}

// Name is "proto", the content subtype the SDK servers expect.
func (c *Codec) Name() string { return "proto" }

func messageOf(v any) (proto.Message, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("udcodec: %T is not a protobuf message", v)
	}
	return m, nil
}

// Marshal encodes v. A payload of SpliceThreshold bytes or more goes into
// the result as it is, between the encoded bytes before and after it, so
// it is copied once (into the HTTP/2 frames) instead of twice. gRPC reads
// it after Marshal returns, until the message is written: callers must not
// change a payload they sent (the runner never changes one). The bytes are
// exactly those of proto.Marshal.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, err := messageOf(v)
	if err != nil {
		return nil, err
	}
	// The size first: a message smaller than SpliceThreshold cannot hold a
	// payload to splice, and looking for one through protobuf's reflection
	// cost more than the encoding itself at 1 KiB.
	size := proto.Size(m)
	if size >= SpliceThreshold {
		if r, ok := c.rules[m.ProtoReflect().Descriptor().FullName()]; ok {
			if out, ok, err := c.marshalSpliced(m.ProtoReflect(), r); ok || err != nil {
				return out, err
			}
		}
	}
	opts := proto.MarshalOptions{UseCachedSize: true} // the size was just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// marshalSpliced encodes m without its payload (shallow copies of m and of
// the message holding the payload, so m is never changed) and splices the
// payload's tag, length and bytes back in where proto.Marshal puts it: in
// field-number order inside its message. ok is false when the payload is
// absent or small, or the payload's message is a repeated field.
func (c *Codec) marshalSpliced(m protoreflect.Message, r rule) (out mem.BufferSlice, ok bool, err error) {
	if r.outer.IsList() || !m.Has(r.outer) {
		return nil, false, nil
	}
	inner := m.Get(r.outer).Message()
	payload := inner.Get(r.inner).Bytes()
	if len(payload) < SpliceThreshold {
		return nil, false, nil
	}
	innerCopy := inner.New()
	inner.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd != r.inner {
			innerCopy.Set(fd, v)
		}
		return true
	})
	innerCopy.SetUnknown(inner.GetUnknown())
	outerCopy := m.New()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd == r.outer {
			v = protoreflect.ValueOfMessage(innerCopy)
		}
		outerCopy.Set(fd, v)
		return true
	})
	outerCopy.SetUnknown(m.GetUnknown())
	b, err := proto.Marshal(outerCopy.Interface())
	if err != nil {
		return nil, false, err
	}
	start, cs, ce, found := findField(b, r.outer.Number())
	if !found {
		return nil, false, fmt.Errorf("udcodec: field %d missing from the encoded %s", r.outer.Number(), m.Descriptor().FullName())
	}
	content := b[cs:ce]
	ins := insertionPoint(content, r.inner.Number())
	payloadField := protowire.SizeTag(r.inner.Number()) + protowire.SizeBytes(len(payload))
	head := make([]byte, 0, start+2*protowire.SizeVarint(uint64(len(content)+payloadField))+ins+payloadField-len(payload)+16)
	head = append(head, b[:start]...)
	head = protowire.AppendTag(head, r.outer.Number(), protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(content)+payloadField))
	head = append(head, content[:ins]...)
	head = protowire.AppendTag(head, r.inner.Number(), protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(payload)))
	out = mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(payload)}
	if tail := b[cs+ins:]; len(tail) > 0 {
		out = append(out, mem.SliceBuffer(tail))
	}
	return out, true, nil
}

// findField returns where the first field num (length-delimited) starts in
// b, and where its content starts and ends.
func findField(b []byte, num protowire.Number) (start, cs, ce int, ok bool) {
	for off := 0; off < len(b); {
		n, typ, tn := protowire.ConsumeTag(b[off:])
		if tn < 0 {
			return 0, 0, 0, false
		}
		vn := protowire.ConsumeFieldValue(n, typ, b[off+tn:])
		if vn < 0 {
			return 0, 0, 0, false
		}
		if n == num && typ == protowire.BytesType {
			_, ln := protowire.ConsumeVarint(b[off+tn:])
			return off, off + tn + ln, off + tn + vn, true
		}
		off += tn + vn
	}
	return 0, 0, 0, false
}

// insertionPoint is the offset in b of the first field numbered above num:
// where proto.Marshal, which writes known fields in number order, puts field num.
func insertionPoint(b []byte, num protowire.Number) int {
	for off := 0; off < len(b); {
		n, typ, tn := protowire.ConsumeTag(b[off:])
		if tn < 0 || n > num {
			return off
		}
		vn := protowire.ConsumeFieldValue(n, typ, b[off+tn:])
		if vn < 0 {
			return off
		}
		off += tn + vn
	}
	return len(b)
}

// Unmarshal decodes data into v. A message with payloads of
// SpliceThreshold bytes or more is first copied into one new buffer that
// the message then owns, and its payloads alias that buffer instead of
// being copied again; gRPC's buffers are never aliased, because gRPC
// reuses them once Unmarshal returns.
//
// Given a *Received instead of a message, the buffer comes from package
// payloadpool and the Received holds it, for its owner to release once
// nothing reads the payloads any more.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	rv, _ := v.(*Received)
	if rv != nil {
		v = rv.Msg
	}
	m, err := messageOf(v)
	if err != nil {
		return err
	}
	if r, ok := c.rules[m.ProtoReflect().Descriptor().FullName()]; ok && data.Len() >= SpliceThreshold {
		if rv != nil {
			buf := payloadpool.Get(data.Len())
			data.CopyTo(buf.B)
			if done, err := unmarshalInto(buf, rv, m, r); done {
				return err
			}
			buf.Release() // decoded below, from data
		} else if ok, _, err := unmarshalAliased(owned(data), m, r); ok || err != nil {
			return err
		}
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// UnmarshalOwned decodes the message in buf, which the caller hands
// over: a transport that reads a whole message into a pooled buffer gives
// it here, so its payloads alias that buffer without the copy Unmarshal
// makes out of gRPC's frames. Given a *Received, the Received holds buf
// when a payload aliases it; otherwise buf is released (or, for a plain
// message whose payloads alias it, left to the garbage collector).
func (c *Codec) UnmarshalOwned(buf *payloadpool.Buffer, v any) error {
	rv, _ := v.(*Received)
	if rv != nil {
		v = rv.Msg
	}
	m, err := messageOf(v)
	if err != nil {
		buf.Release()
		return err
	}
	if r, ok := c.rules[m.ProtoReflect().Descriptor().FullName()]; ok && len(buf.B) >= SpliceThreshold {
		if rv != nil {
			if done, err := unmarshalInto(buf, rv, m, r); done {
				return err
			}
		} else if ok, aliases, err := unmarshalAliased(buf.B, m, r); ok || err != nil {
			if !aliases {
				buf.Release()
			}
			return err
		}
	}
	defer buf.Release()
	return proto.Unmarshal(buf.B, m)
}

// unmarshalInto decodes buf into m with its payloads aliasing buf, which
// rv then holds; when no payload does, buf is released. done is false,
// with nothing decoded and buf left to the caller, for input
// unmarshalAliased leaves to proto.Unmarshal.
func unmarshalInto(buf *payloadpool.Buffer, rv *Received, m proto.Message, r rule) (done bool, err error) {
	ok, cut, err := unmarshalAliased(buf.B, m, r)
	if !ok {
		return false, nil
	}
	if err == nil && cut {
		rv.Buf = buf
		return true, nil
	}
	buf.Release() // nothing aliases it
	return true, err
}

// Received is what to give grpc-go's RecvMsg in place of a message whose
// payloads should alias a pooled buffer: Msg is decoded as ever, and Buf
// is the buffer its payloads alias (nil when none does, as for a small
// message). The receiver must call Buf.Release once nothing reads them,
// or leave the buffer to the garbage collector by never releasing it.
type Received struct {
	Msg proto.Message
	Buf *payloadpool.Buffer
}

// owned copies data into one new buffer without clearing it first (a
// strings.Builder allocates without zeroing, unlike make). The bytes are
// never changed after this, so using a string's memory as []byte is sound.
func owned(data mem.BufferSlice) []byte {
	var sb strings.Builder
	sb.Grow(data.Len())
	for _, b := range data {
		sb.Write(b.ReadOnlyData())
	}
	s := sb.String()
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// aliased is one payload cut out of the wire bytes: the element of the
// outer field it belongs to (0 for a singular field) and its bytes.
type aliased struct {
	elem  int
	value []byte
}

// unmarshalAliased decodes b into m with the payloads cut out (so
// proto.Unmarshal copies only the small rest), then sets each payload to
// its bytes in b; aliases says whether any payload now aliases b. ok is false, with nothing done, for input this does not
// handle (bad wire bytes, a singular field sent twice): the caller then
// decodes it the ordinary way, which also reports what is wrong.
func unmarshalAliased(b []byte, m proto.Message, r rule) (ok, aliases bool, err error) {
	rest := make([]byte, 0, 256)
	var cut []aliased
	elems := 0
	for off := 0; off < len(b); {
		n, typ, tn := protowire.ConsumeTag(b[off:])
		if tn < 0 {
			return false, false, nil
		}
		vn := protowire.ConsumeFieldValue(n, typ, b[off+tn:])
		if vn < 0 {
			return false, false, nil
		}
		if n != r.outer.Number() || typ != protowire.BytesType {
			rest = append(rest, b[off:off+tn+vn]...)
			off += tn + vn
			continue
		}
		if !r.outer.IsList() && elems > 0 {
			return false, false, nil // merged occurrences: leave it to proto.Unmarshal
		}
		content, _ := protowire.ConsumeBytes(b[off+tn:])
		kept, payload, found, good := strip(content, r.inner.Number())
		if !good {
			return false, false, nil
		}
		rest = protowire.AppendTag(rest, n, protowire.BytesType)
		rest = protowire.AppendBytes(rest, kept)
		if found {
			cut = append(cut, aliased{elems, payload})
		}
		elems++
		off += tn + vn
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return true, false, err
	}
	pm := m.ProtoReflect()
	for _, a := range cut {
		var holder protoreflect.Message
		if r.outer.IsList() {
			holder = pm.Get(r.outer).List().Get(a.elem).Message()
		} else {
			holder = pm.Mutable(r.outer).Message()
		}
		holder.Set(r.inner, protoreflect.ValueOfBytes(a.value))
	}
	return true, len(cut) > 0, nil
}

// strip returns content without its non-empty occurrences of bytes field
// num, and the value of the last occurrence when that one is non-empty
// (the last occurrence wins; an empty last one stays in kept so
// proto.Unmarshal sets it). good is false for bad wire bytes.
func strip(content []byte, num protowire.Number) (kept, payload []byte, found, good bool) {
	kept = make([]byte, 0, min(len(content), 256))
	for off := 0; off < len(content); {
		n, typ, tn := protowire.ConsumeTag(content[off:])
		if tn < 0 {
			return nil, nil, false, false
		}
		vn := protowire.ConsumeFieldValue(n, typ, content[off+tn:])
		if vn < 0 {
			return nil, nil, false, false
		}
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(content[off+tn:])
			if len(v) > 0 {
				// Clipped, so an append to one payload reallocates instead
				// of writing over the next one in the shared buffer.
				payload, found = v[:len(v):len(v)], true
				off += tn + vn
				continue
			}
			found = false
		}
		kept = append(kept, content[off:off+tn+vn]...)
		off += tn + vn
	}
	return kept, payload, found, true
}
