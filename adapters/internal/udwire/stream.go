package udwire

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2/hpack"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// directWrite is the message size from which a sender writes its message
// itself, with vectors into the payload, instead of copying it into the
// batch: the copy then costs more than the system call it saves.
const directWrite = 16 << 10

// prefixLen is the length of gRPC's message prefix: a compression flag
// and a 4-byte length.
const prefixLen = 5

// firstChunk is the most a message's buffer is allocated with before its
// bytes arrive: a larger message's buffer grows (doubling) as they do,
// so a prefix that claims 64 MiB costs at most this until the bytes are
// there. Messages up to this size (the benchmarks' 1 MiB ones among them)
// are still received into one buffer without a copy.
const firstChunk = 4 << 20

// clientStream is one call. Its sending side is used by one goroutine at a
// time (grpc.ClientStream's rule), its receiving side by another.
type clientStream struct {
	c    *ClientConn
	id   uint32
	ctx  context.Context
	stop func() bool // stops the context watch

	sendClosed atomic.Bool // set by the sender, read by the reader too
	reset      bool        // under c.bmu: this side sent RST_STREAM, no frame may follow

	// Under c.mu.
	sendWin   int64
	closedErr error // why sends fail: set once the stream ended

	// The reader goroutine's: the message being read, its size, and how
	// much of it came (msg.B may be shorter than size: it grows).
	prefix  [prefixLen]byte
	prefixN int
	msg     *payloadpool.Buffer
	size    int
	got     int

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []*payloadpool.Buffer
	ungranted int  // bytes received and not yet granted back
	waiting   bool // a RecvMsg waits for a message
	header    metadata.MD
	gotHeader bool
	trailer   metadata.MD
	ended     bool  // no more messages will come
	aborted   bool  // ended abnormally: queued messages are dropped
	endErr    error // nil for a call that ended OK
}

func (c *ClientConn) newStream(ctx context.Context, method string) (*clientStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	s := &clientStream{c: c, ctx: ctx}
	s.cond = sync.NewCond(&s.mu)
	fields := requestHeaders(ctx, method)

	c.bmu.Lock()
	c.mu.Lock()
	switch {
	case c.err != nil:
		err := c.err
		c.mu.Unlock()
		c.bmu.Unlock()
		return nil, err
	case c.goAway || c.nextID >= 1<<31:
		c.mu.Unlock()
		c.bmu.Unlock()
		return nil, unavailable("udwire: the connection to the container is going away")
	}
	s.id = c.nextID
	c.nextID += 2
	s.sendWin = c.peerInitWin
	maxFrame := c.peerMaxFrame
	c.streams[s.id] = s
	c.mu.Unlock()
	c.encBuf.Reset()
	for _, f := range fields {
		c.enc.WriteField(f)
	}
	block := c.encBuf.Bytes()
	typ := byte(frameHeaders)
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), maxFrame)
		var flags byte
		if n == len(block) {
			flags = flagEndHeaders
		}
		c.pend = append(appendFrameHeader(c.pend, n, typ, flags, s.id), block[:n]...)
		block = block[n:]
		typ = frameContinuation
	}
	c.bmu.Unlock()
	c.flush()
	stop := context.AfterFunc(ctx, func() { s.abort(status.FromContextError(ctx.Err()).Err(), true) })
	s.mu.Lock()
	s.stop = stop
	ended := s.ended
	s.mu.Unlock()
	if ended {
		stop() // the call ended before its watch was in place
	}
	return s, nil
}

// requestHeaders are a gRPC request's headers, with ctx's outgoing
// metadata and deadline.
func requestHeaders(ctx context.Context, method string) []hpack.HeaderField {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method},
		{Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "user-agent", Value: "monovertex-udwire"},
		{Name: "te", Value: "trailers"},
	}
	if dl, ok := ctx.Deadline(); ok {
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: encodeTimeout(time.Until(dl))})
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	for k, vs := range md {
		if strings.HasPrefix(k, ":") || k == "content-type" || k == "te" || k == "user-agent" || strings.HasPrefix(k, "grpc-") {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			fields = append(fields, hpack.HeaderField{Name: k, Value: v})
		}
	}
	return fields
}

// encodeTimeout writes a grpc-timeout value: at most eight digits and a
// unit, rounded up, as gRPC's HTTP/2 protocol document asks.
func encodeTimeout(t time.Duration) string {
	if t <= 0 {
		return "0n"
	}
	const maxValue = 1e8 - 1
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}, {time.Hour, "H"}} {
		if v := (t + u.d - 1) / u.d; v <= maxValue {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return strconv.Itoa(maxValue) + "H"
}

// Context is the call's context.
func (s *clientStream) Context() context.Context { return s.ctx }

// Header waits for the response headers.
func (s *clientStream) Header() (metadata.MD, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.gotHeader && !s.ended {
		s.cond.Wait()
	}
	if !s.gotHeader && s.aborted {
		return nil, s.endErr
	}
	return s.header, nil
}

// Trailer is the trailer metadata, once the call ended.
func (s *clientStream) Trailer() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trailer
}

// SendMsg sends one message. As in grpc-go, a stream that ended returns
// io.EOF, and RecvMsg says why.
func (s *clientStream) SendMsg(v any) error {
	if s.sendClosed.Load() {
		return status.Error(codes.Internal, "udwire: SendMsg called after CloseSend")
	}
	data, err := s.c.opt.Codec.Marshal(v)
	if err != nil {
		return status.Errorf(codes.Internal, "udwire: encoding the request: %v", err)
	}
	defer data.Free()
	size := data.Len()
	if max := s.c.opt.MaxMessageSize; max > 0 && size > max {
		return status.Errorf(codes.ResourceExhausted, "udwire: trying to send a message larger than max (%d vs. %d)", size, max)
	}
	var prefix [prefixLen]byte
	binary.BigEndian.PutUint32(prefix[1:], uint32(size))
	if prefixLen+size >= directWrite {
		// The writev's vectors reach the system call: on the heap.
		return s.sendDirect(cursor{bufs: heapParts(prefix, data)}, prefixLen+size)
	}
	// A small message's parts stay on this stack (no allocation per
	// message) when they fit in room, as the codec's one buffer does.
	var room [4][]byte
	var parts [][]byte
	if len(data) < len(room) {
		room[0] = prefix[:]
		for i, b := range data {
			room[1+i] = b.ReadOnlyData()
		}
		parts = room[:1+len(data)]
	} else {
		parts = heapParts(prefix, data)
	}
	return s.sendQueued(cursor{bufs: parts}, prefixLen+size)
}

// heapParts are a message's prefix and buffers, in a slice of their own.
func heapParts(prefix [prefixLen]byte, data mem.BufferSlice) [][]byte {
	parts := make([][]byte, 0, 1+len(data))
	parts = append(parts, append([]byte(nil), prefix[:]...))
	for _, b := range data {
		parts = append(parts, b.ReadOnlyData())
	}
	return parts
}

// sendDirect writes the size bytes at at as the window allows, each
// part of it in one writev. Like SendMsg it answers io.EOF once the
// stream ended (grpc-go's answer too: RecvMsg says why).
func (s *clientStream) sendDirect(at cursor, size int) error {
	for size > 0 {
		n, maxFrame, err := s.c.acquire(s, size)
		if err != nil {
			return io.EOF
		}
		if at, err = s.c.writeDirect(s, at, n, maxFrame); err != nil {
			return io.EOF
		}
		size -= n
	}
	return nil
}

// sendQueued copies the size bytes at at into the batch as the window
// allows.
func (s *clientStream) sendQueued(at cursor, size int) error {
	c := s.c
	for size > 0 {
		n, maxFrame, err := c.acquire(s, size)
		if err != nil {
			return io.EOF
		}
		c.bmu.Lock()
		if s.reset {
			c.bmu.Unlock()
			return io.EOF
		}
		c.pend, at = appendData(c.pend, s.id, at, n, maxFrame)
		c.bmu.Unlock()
		c.flush()
		size -= n
	}
	return nil
}

// appendData appends DATA frames of at most maxFrame bytes carrying the
// size bytes at at, and returns the position after them.
func appendData(b []byte, id uint32, at cursor, size, maxFrame int) ([]byte, cursor) {
	for size > 0 {
		n := min(size, maxFrame)
		size -= n
		b = appendFrameHeader(b, n, frameData, 0, id)
		for n > 0 {
			var p []byte
			p, at = at.cut(n)
			b = append(b, p...)
			n -= len(p)
		}
	}
	return b, at
}

// CloseSend ends the sending side (an empty DATA frame ending the stream).
func (s *clientStream) CloseSend() error {
	if s.sendClosed.Swap(true) {
		return nil
	}
	s.c.mu.Lock()
	live := s.c.streams[s.id] == s
	s.c.mu.Unlock()
	if live {
		s.c.queue(func(b []byte) []byte {
			if s.reset {
				return b
			}
			return appendFrameHeader(b, 0, frameData, flagEndStream, s.id)
		})
	}
	return nil
}

// RecvMsg receives one message into v (a proto.Message or a
// *udcodec.Received). A call that ended OK returns io.EOF, one that failed
// its status.
func (s *clientStream) RecvMsg(v any) error {
	s.mu.Lock()
	for len(s.queue) == 0 && !s.ended {
		// Asking for a message grants what the server sent meanwhile.
		s.waiting = true
		if inc := s.grantable(); inc > 0 {
			s.mu.Unlock()
			s.c.grantStream(s, inc)
			s.mu.Lock()
			continue
		}
		s.cond.Wait()
	}
	s.waiting = false
	if s.aborted {
		err := s.endErr
		s.mu.Unlock()
		return err
	}
	if len(s.queue) == 0 {
		err := s.endErr
		s.mu.Unlock()
		if err == nil {
			return io.EOF
		}
		return err
	}
	buf := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	inc := s.grantable()
	s.mu.Unlock()
	s.c.grantStream(s, inc)
	if err := s.c.opt.Codec.UnmarshalOwned(buf, v); err != nil {
		return status.Errorf(codes.Internal, "udwire: decoding the container's message: %v", err)
	}
	return nil
}

// scatterMin is the part of a message left to read from which the reader
// reads it in place (reader.scatter) rather than through its buffer.
const scatterMin = 16 << 10

// readData reads n bytes of a DATA frame into the stream's messages; the
// reader goroutine calls it. more says whether the frame may be followed
// at once by another frame header (it has no padding and does not end the
// stream), so that a large message's next frames can be read in place.
func (s *clientStream) readData(br *reader, n int, more bool) error {
	for n > 0 {
		if s.msg == nil {
			k := min(n, prefixLen-s.prefixN)
			if err := br.readFull(s.prefix[s.prefixN : s.prefixN+k]); err != nil {
				return err
			}
			n -= k
			if s.prefixN += k; s.prefixN < prefixLen {
				continue
			}
			s.prefixN = 0
			size := int(binary.BigEndian.Uint32(s.prefix[1:]))
			var bad error
			switch max := s.c.opt.MaxMessageSize; {
			case s.prefix[0] != 0:
				bad = status.Error(codes.Internal, "udwire: the container sent a compressed message, which this client never asks for")
			case max > 0 && size > max:
				bad = status.Errorf(codes.ResourceExhausted, "udwire: received a message larger than max (%d vs. %d)", size, max)
			}
			if bad != nil {
				s.abort(bad, true)
				return br.discard(n)
			}
			s.msg, s.size, s.got = payloadpool.Get(min(size, firstChunk)), size, 0
		} else if s.got == len(s.msg.B) {
			s.grow()
			continue
		} else if rest := len(s.msg.B) - s.got; br.raw != nil && rest >= scatterMin && br.buffered() < min(n, rest) {
			// Take what the buffer holds, then read the rest in place.
			k := br.take(s.msg.B[s.got:])
			s.got += k
			var err error
			if n, err = s.scatter(br, n-k, more); err != nil {
				return err
			}
		} else {
			k := min(n, len(s.msg.B)-s.got)
			if err := br.readFull(s.msg.B[s.got : s.got+k]); err != nil {
				return err
			}
			s.got += k
			n -= k
		}
		if s.msg != nil && s.got == s.size {
			s.deliver(s.msg)
			s.msg = nil
		}
	}
	return nil
}

// grow doubles the buffer of the message being read, up to its size,
// once the bytes that came filled it.
func (s *clientStream) grow() {
	b := payloadpool.Get(min(s.size, 2*len(s.msg.B)))
	copy(b.B, s.msg.B[:s.got])
	s.msg.Release()
	s.msg = b
}

// charge counts a DATA frame of n bytes of the stream against its receive
// window, failing when the server sent more than it was granted, and
// grants the window back if a RecvMsg waits and nothing is queued.
func (s *clientStream) charge(n int) error {
	s.mu.Lock()
	if left := s.c.opt.Window - s.ungranted; n > left {
		s.mu.Unlock()
		return perr(errCodeFlow, "DATA of %d bytes on stream %d exceeds the %d bytes left of its flow-control window", n, s.id, left)
	}
	s.ungranted += n
	inc := s.grantable()
	s.mu.Unlock()
	s.c.grantStream(s, inc)
	return nil
}

// grantable is the stream window to grant back now (s.mu held): what was
// received, once a RecvMsg waits for more, nothing is queued for it,
// and it is worth an update.
func (s *clientStream) grantable() int {
	if s.ended || !s.waiting || len(s.queue) > 0 || s.ungranted < s.c.opt.Window/4 {
		return 0
	}
	inc := s.ungranted
	s.ungranted = 0
	return inc
}

// deliver queues a received message for RecvMsg. The window bounds the
// queue's bytes; maxQueued bounds its length too, since a window's worth
// of empty messages would otherwise cost far more than the window in
// bookkeeping: a stream whose reader left that many unread is aborted.
func (s *clientStream) deliver(buf *payloadpool.Buffer) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		buf.Release()
		return
	}
	if len(s.queue) >= s.c.maxQueued {
		s.mu.Unlock()
		buf.Release()
		s.abort(status.Errorf(codes.ResourceExhausted, "udwire: the container sent more than %d messages the call has not read", s.c.maxQueued), true)
		return
	}
	s.queue = append(s.queue, buf)
	s.cond.Signal()
	s.mu.Unlock()
}

// onHeaders takes the response headers, or the trailers that end the call.
func (s *clientStream) onHeaders(fields []hpack.HeaderField, endStream bool) {
	md := metadata.MD{}
	var httpStatus, grpcStatus, grpcMessage, details, contentType string
	for _, f := range fields {
		switch f.Name {
		case ":status":
			httpStatus = f.Value
		case "grpc-status":
			grpcStatus = f.Value
		case "grpc-message":
			grpcMessage = decodeMessage(f.Value)
		case "grpc-status-details-bin":
			details = f.Value
		case "content-type":
			contentType = f.Value
		default:
			if !strings.HasPrefix(f.Name, ":") {
				v := f.Value
				if strings.HasSuffix(f.Name, "-bin") {
					if b, err := decodeBin(v); err == nil {
						v = string(b)
					}
				}
				md.Append(f.Name, v)
			}
		}
	}
	s.mu.Lock()
	first := !s.gotHeader
	if first {
		s.gotHeader, s.header = true, md
	} else {
		s.trailer = md
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	if first && !endStream {
		switch {
		case httpStatus != "200":
			s.abort(httpError(httpStatus), true)
		case contentType != "application/grpc" && !strings.HasPrefix(contentType, "application/grpc+") && !strings.HasPrefix(contentType, "application/grpc;"):
			s.abort(status.Errorf(codes.Internal, "udwire: the container answered with content type %q, not gRPC", contentType), true)
		}
		return
	}
	if !endStream {
		s.abort(status.Error(codes.Internal, "udwire: the container sent trailers that do not end the stream"), true)
		return
	}
	if first {
		s.mu.Lock()
		s.trailer = md
		s.mu.Unlock()
	}
	switch {
	case grpcStatus != "":
		s.finish(s.cutShort(statusError(grpcStatus, grpcMessage, details)))
	case first && httpStatus != "200":
		s.finish(httpError(httpStatus))
	default:
		s.finish(status.Error(codes.Internal, "udwire: the container ended the call without a grpc-status"))
	}
}

// cutShort is err, or Internal when the stream ended inside a message,
// whose part read is released (the reader goroutine's state, like the
// message it reads into).
func (s *clientStream) cutShort(err error) error {
	if s.msg == nil && s.prefixN == 0 {
		return err
	}
	s.msg.Release()
	s.msg, s.prefixN = nil, 0
	return status.Error(codes.Internal, "udwire: the container ended the stream inside a message")
}

// statusError is the call's outcome from its trailers: nil for OK.
func statusError(code, msg, details string) error {
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return status.Errorf(codes.Internal, "udwire: malformed grpc-status %q", code)
	}
	if details != "" {
		if b, err := decodeBin(details); err == nil {
			p := new(spb.Status)
			if proto.Unmarshal(b, p) == nil && p.Code == int32(n) {
				return status.FromProto(p).Err()
			}
		}
	}
	if n == 0 {
		return nil
	}
	return status.New(codes.Code(n), msg).Err()
}

// httpError is the status of a response that is not HTTP 200, as gRPC's
// HTTP-to-gRPC status mapping has it.
func httpError(httpStatus string) error {
	c := codes.Unknown
	switch httpStatus {
	case "400":
		c = codes.Internal
	case "401":
		c = codes.Unauthenticated
	case "403":
		c = codes.PermissionDenied
	case "404":
		c = codes.Unimplemented
	case "429", "502", "503", "504":
		c = codes.Unavailable
	}
	return status.Errorf(c, "udwire: the container answered HTTP status %q", httpStatus)
}

// decodeMessage undoes grpc-message's percent-encoding.
func decodeMessage(v string) string {
	if !strings.Contains(v, "%") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if n, err := strconv.ParseUint(v[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// decodeBin decodes a -bin header's base64, padded or not.
func decodeBin(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// finish ends the call as the server ended it: err is its status, nil
// for OK. Messages already received are still handed out.
func (s *clientStream) finish(err error) {
	if live, _, ok := s.end(err, false, io.EOF); ok && live && !s.sendClosed.Load() {
		// The server is done with a stream this side did not close:
		// tell it nothing more comes, as grpc-go does.
		s.c.queue(func(b []byte) []byte { return s.appendRST(b, errCodeNo) })
	}
}

// lost ends the call with err as the connection or the server ended it
// (a reset): what arrived before is still handed out, as grpc-go does,
// and nothing is sent.
func (s *clientStream) lost(err error) { s.end(err, false, err) }

// abort ends the call at once with err, dropping what it received, and
// with rst tells the server to stop.
func (s *clientStream) abort(err error, rst bool) {
	if live, failed, ok := s.end(err, true, err); ok && live && rst && !failed {
		s.c.queue(func(b []byte) []byte { return s.appendRST(b, errCodeCancel) })
	}
}

// end marks the call ended with err (aborted: dropping what it received),
// stops its context watch and takes it off the connection; sends then
// fail with sendErr. ok is false, with nothing done, when the call had
// ended before; live says whether it was still on the connection, and
// connFailed whether the connection had failed.
func (s *clientStream) end(err error, aborted bool, sendErr error) (live, connFailed, ok bool) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return false, false, false
	}
	s.ended, s.aborted, s.endErr = true, aborted, err
	if aborted {
		for i, b := range s.queue {
			b.Release()
			s.queue[i] = nil
		}
		s.queue = nil
	}
	s.cond.Broadcast()
	stop := s.stop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	live = c.streams[s.id] == s
	if live {
		delete(c.streams, s.id)
	}
	if s.closedErr == nil {
		s.closedErr = sendErr
	}
	c.cond.Broadcast()
	if c.goAway && len(c.streams) == 0 && c.err == nil {
		// The last call of a connection the server is closing.
		go c.fail(unavailable("udwire: the container closed the connection (GOAWAY)"))
	}
	return live, c.err != nil, true
}

// appendRST appends the stream's RST_STREAM (under c.bmu, as every
// queue function runs) and marks it reset, so no frame of it follows.
func (s *clientStream) appendRST(b []byte, code uint32) []byte {
	if s.reset {
		return b
	}
	s.reset = true
	return binary.BigEndian.AppendUint32(appendFrameHeader(b, 4, frameRSTStream, 0, s.id), code)
}
