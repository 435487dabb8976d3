// Package udwire is the runner's own gRPC client transport for the Unix
// sockets of Numaflow containers: HTTP/2 as RFC 9113 has it, gRPC's
// framing as its PROTOCOL-HTTP2 document has it, and nothing else (no TLS,
// no name resolution, no load balancing, no retries, no compression: a
// container's socket is one local peer).
//
// It exists for the cost of large payloads (hack/bench RESULTS.md, "The
// runner's own gRPC transport"). grpc-go copies every received byte three
// times in user space (socket buffer, frame buffer, message) and every
// sent byte twice (into a frame, into its write buffer) and hands each
// frame between goroutines. Here the kernel reads a large message's DATA
// frames straight into the message's pooled buffer (reader.go), other
// frames are copied once from the socket buffer, the message's payload
// then aliases that buffer (udcodec.UnmarshalOwned), and a large
// message is written by its sender with one writev whose vectors point
// into the payload itself. Small messages are batched into one buffer
// that a writer goroutine flushes, as grpc-go does, so a batch of 1 KiB
// requests costs one system call, not one each; control frames join the
// batch too, but their sender writes it at once when the socket is free
// (ClientConn.queue).
//
// ClientConn implements grpc.ClientConnInterface, so the generated
// numaflow-go clients run on it unchanged.
package udwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// HTTP/2 frame types and flags (RFC 9113 section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePriority     = 0x2
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	settingEnablePush        = 0x2
	settingInitialWindowSize = 0x4
	settingMaxFrameSize      = 0x5
	settingMaxHeaderListSize = 0x6
	settingEnableConnect     = 0x8

	errCodeNo          = 0x0
	errCodeProtocol    = 0x1
	errCodeFlow        = 0x3
	errCodeRefused     = 0x7
	errCodeCancel      = 0x8
	errCodeCalm        = 0xb
	errCodeSecurity    = 0xc
	errCodeFrameSize   = 0x6
	errCodeCompression = 0x9

	frameHeaderLen  = 9
	defaultWindow   = 65535
	defaultMaxFrame = 16384
	// maxReadFrame is the largest frame this client accepts, and says so
	// in its SETTINGS: servers that honour it (grpc-go does not; it sends
	// 16 KiB) send fewer frame headers per message.
	maxReadFrame = 1 << 20
	// maxWindow is HTTP/2's largest flow-control window.
	maxWindow = 1<<31 - 1
	// DefaultMaxHeaderListSize is the largest header list (HPACK-decoded,
	// each field counted as its name, its value and 32 bytes, RFC 9113
	// section 6.5.2) a response may carry: grpc-go's client default
	// (defaultClientMaxHeaderListSize in its internal/transport, 16 MiB).
	DefaultMaxHeaderListSize = 16 << 20
	// hpackChunk is how much of a header block the decoder is given at a
	// time, so that a block over the limit stops being decoded soon after
	// the limit, not at its end.
	hpackChunk = 4 << 10
)

const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Codec is what the transport needs of udcodec.Codec: marshalling into
// buffers it may write as they are, and decoding a message whose bytes it
// hands over.
type Codec interface {
	Marshal(v any) (mem.BufferSlice, error)
	UnmarshalOwned(buf *payloadpool.Buffer, v any) error
}

// Options configure a connection.
type Options struct {
	// Codec encodes requests and decodes responses.
	Codec Codec
	// MaxMessageSize is the largest message either side may send; a
	// larger one fails its call with ResourceExhausted, as in grpc-go.
	MaxMessageSize int
	// Window is the receive window, per stream and for the connection,
	// that the server may fill before this side consumes what it sent.
	Window int
	// BufferSize is the socket read buffer's size, and the size up to
	// which small frames are batched into one write.
	BufferSize int
	// MaxHeaderListSize is the largest header list a response's headers
	// or trailers may decode to (DefaultMaxHeaderListSize when 0); this
	// side says so in SETTINGS_MAX_HEADER_LIST_SIZE, and a larger list
	// ends the connection.
	MaxHeaderListSize int
}

// ClientConn is one HTTP/2 connection to a container's socket. All its
// methods are safe for concurrent use.
type ClientConn struct {
	nc  net.Conn
	raw *rawSock // nc's raw system calls; nil for a connection that has none
	opt Options
	br  *reader

	// wmu serializes writes to the socket; bmu guards the batch of small
	// frames (pend) waiting for the writer goroutine, and the order in
	// which frames join it (stream ids and the header encoder's state
	// must follow that order). Lock order: wmu, bmu, mu.
	wmu     sync.Mutex
	scratch []byte // frame headers of a direct write, under wmu
	bmu     sync.Mutex
	pend    []byte
	enc     *hpack.Encoder
	encBuf  bytes.Buffer
	kick    chan struct{}

	mu           sync.Mutex
	cond         *sync.Cond // send windows grew, a stream ended, or the connection failed
	streams      map[uint32]*clientStream
	nextID       uint32
	sendWin      int64 // the server's connection-level window for us
	peerInitWin  int64
	peerMaxFrame int
	recvUnacked  int // connection-level bytes received and not yet granted back
	err          error
	goAway       bool
	done         chan struct{}
	draining     chan struct{} // closed by a GOAWAY or the end

	// The reader goroutine's only: the header decoder, the fields of the
	// block it decodes, their size as RFC 9113 counts it, and the payload
	// buffer of frames other than DATA.
	dec       *hpack.Decoder
	fields    []hpack.HeaderField
	fieldsLen int
	frameBuf  []byte
	// dataGuess is the size a scattered read guesses the next DATA frames
	// have (the reader goroutine's): raised by every larger frame the
	// parser reads, set to the size a scattered read found when it
	// guessed wrong.
	dataGuess int
	// maxQueued bounds the messages a stream holds unread (see
	// clientStream.deliver).
	maxQueued int
}

var _ grpc.ClientConnInterface = (*ClientConn)(nil)

// New starts HTTP/2 on nc, which the connection then owns: it writes the
// client preface and its settings, and starts the goroutines that read
// frames and flush batched writes. It does not wait for the server: a
// server that is not there fails the first call with Unavailable.
func New(nc net.Conn, opt Options) *ClientConn {
	if opt.BufferSize <= 0 {
		opt.BufferSize = 256 << 10
	}
	if opt.Window < defaultWindow {
		opt.Window = defaultWindow
	}
	if opt.Window > maxWindow {
		opt.Window = maxWindow
	}
	if opt.MaxHeaderListSize <= 0 {
		opt.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	c := &ClientConn{
		nc:           nc,
		opt:          opt,
		kick:         make(chan struct{}, 1),
		streams:      map[uint32]*clientStream{},
		nextID:       1,
		sendWin:      defaultWindow,
		peerInitWin:  defaultWindow,
		peerMaxFrame: defaultMaxFrame,
		dataGuess:    defaultMaxFrame,
		maxQueued:    max(1024, opt.Window/64),
		done:         make(chan struct{}),
		draining:     make(chan struct{}),
	}
	c.cond = sync.NewCond(&c.mu)
	var rd io.Reader = nc
	if raw, ok := newRawSock(nc); ok {
		c.raw, rd = raw, raw
	}
	c.br = newReader(rd, c.raw, opt.BufferSize)
	// No dynamic table for the request headers: a container sees a
	// handful of streams in its life, so there is nothing to save, and
	// then no setting of the server's can make the tables disagree.
	c.enc = hpack.NewEncoder(&c.encBuf)
	c.enc.SetMaxDynamicTableSizeLimit(0)
	c.dec = hpack.NewDecoder(4096, c.emitField)
	// No string can be longer than the list it is part of.
	c.dec.SetMaxStringLength(opt.MaxHeaderListSize)

	p := append([]byte(nil), preface...)
	p = appendFrameHeader(p, 4*6, frameSettings, 0, 0)
	p = appendSetting(p, settingEnablePush, 0)
	p = appendSetting(p, settingInitialWindowSize, uint32(opt.Window))
	p = appendSetting(p, settingMaxFrameSize, maxReadFrame)
	p = appendSetting(p, settingMaxHeaderListSize, uint32(opt.MaxHeaderListSize))
	if inc := opt.Window - defaultWindow; inc > 0 {
		p = appendWindowUpdate(p, 0, uint32(inc))
	}
	c.pend = p
	go c.writeLoop()
	c.flush()
	go c.readLoop()
	return c
}

// Done is closed once the connection failed or was closed; no call made
// afterwards succeeds.
func (c *ClientConn) Done() <-chan struct{} { return c.done }

// Draining is closed once the connection takes no new calls: the server
// said GOAWAY (the calls it still serves go on) or the connection ended.
// Its owner should make a new connection then, as grpc-go does.
func (c *ClientConn) Draining() <-chan struct{} { return c.draining }

// drain closes draining once; c.mu is held.
func (c *ClientConn) drain() {
	select {
	case <-c.draining:
	default:
		close(c.draining)
	}
}

// Err is why the connection ended, nil while it works.
func (c *ClientConn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// errClosing is the error of calls on a connection closed by its owner.
var errClosing = status.Error(codes.Canceled, "udwire: the client connection is closing")

// Close ends the connection and every call on it.
func (c *ClientConn) Close() error {
	c.fail(errClosing)
	return nil
}

// fail ends the connection with err (a status error) unless it ended
// before: every open stream fails with it.
func (c *ClientConn) fail(err error) { c.end(err, false) }

// end is fail; with flush it first writes what is batched (a GOAWAY
// saying why), giving that at most a second.
func (c *ClientConn) end(err error, flush bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	streams := c.streams
	c.streams = map[uint32]*clientStream{}
	close(c.done)
	c.drain()
	c.cond.Broadcast()
	c.mu.Unlock()
	if flush {
		c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		c.wmu.Lock()
		c.bmu.Lock()
		out := c.pend
		c.pend = nil
		c.bmu.Unlock()
		c.write(out)
		c.wmu.Unlock()
	}
	c.nc.Close()
	for _, s := range streams {
		s.lost(err)
	}
}

// unavailable wraps a transport failure the way grpc-go reports one, so
// the adapters treat a lost container the same way.
func unavailable(format string, args ...any) error {
	return status.Errorf(codes.Unavailable, format, args...)
}

// --- writing ---

func appendFrameHeader(b []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(b, id), v)
}

func appendWindowUpdate(b []byte, stream uint32, inc uint32) []byte {
	b = appendFrameHeader(b, 4, frameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(b, inc)
}

// queue adds control frames (window updates, pings, resets, the end of a
// stream) to the batch; add appends them to pend. When no other write is
// under way the caller writes the batch itself, with one system call that
// does not wait; otherwise, or for what the socket did not take, it wakes
// the writer goroutine. It never blocks on the socket, so the reader can
// use it to answer pings and grant windows while a large write waits.
//
// Why not always the writer goroutine: at 1 MiB it woke about 1.7 times
// per message, mostly for window updates, often on a thread the runtime
// had to wake too; writing control frames at once took its wake-ups in a
// run of udsource->udsink at 1 MiB from 7,126 to 2,090 (a debug build's
// count; hack/bench RESULTS.md, "Control frames written by their
// sender").
// A message (sendQueued) only wakes the writer goroutine, so that the
// messages of a batch gather into one system call; an inline write takes
// whatever is batched, such messages included.
func (c *ClientConn) queue(add func(pend []byte) []byte) {
	c.bmu.Lock()
	c.pend = add(c.pend)
	c.bmu.Unlock()
	select {
	case <-c.done: // nothing writes any more: leave the batch be
		return
	default:
	}
	if c.raw != nil && c.wmu.TryLock() {
		done := c.writeNow()
		c.wmu.Unlock()
		if done {
			return
		}
	}
	c.flush()
}

// writeNow writes the batch with one system call that does not wait,
// and says whether all of it went; what did not is put back for the
// writer goroutine. wmu is held.
func (c *ClientConn) writeNow() bool {
	c.bmu.Lock()
	out := c.pend
	if len(out) == 0 { // the writer goroutine took it meanwhile
		c.bmu.Unlock()
		return true
	}
	c.pend = nil
	c.bmu.Unlock()
	n := c.raw.tryWrite(out)
	c.bmu.Lock()
	defer c.bmu.Unlock()
	if n == len(out) {
		if c.pend == nil {
			c.pend = out[:0]
		}
		return true
	}
	c.pend = unwritten(out, n, c.pend)
	return false
}

// unwritten is the batch after a write took the first n bytes of out:
// the rest of out, then what was queued meanwhile. It reuses out.
func unwritten(out []byte, n int, queued []byte) []byte {
	m := copy(out, out[n:])
	return append(out[:m], queued...)
}

// flush wakes the writer goroutine.
func (c *ClientConn) flush() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// writeLoop writes the batched frames, all that gathered since its last
// write in one system call.
func (c *ClientConn) writeLoop() {
	var spare []byte
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
		c.wmu.Lock()
		c.bmu.Lock()
		out := c.pend
		c.pend = spare[:0]
		c.bmu.Unlock()
		if len(out) > 0 {
			if err := c.write(out); err != nil {
				c.wmu.Unlock()
				c.fail(unavailable("udwire: writing to the container's socket: %v", err))
				return
			}
		}
		c.wmu.Unlock()
		// The buffer just written takes the next batch, unless a burst
		// grew it far beyond the batch size.
		if cap(out) <= 4*c.opt.BufferSize {
			spare = out
		} else {
			spare = nil // c.pend may be the old spare now
		}
	}
}

// writeDirect writes the batched frames and then DATA frames of at most
// maxFrame bytes carrying the size bytes at at, in one writev whose
// vectors point into the message's buffers, and returns the position
// after them.
func (c *ClientConn) writeDirect(s *clientStream, at cursor, size, maxFrame int) (cursor, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	frames := (size + maxFrame - 1) / maxFrame
	vec := make(net.Buffers, 0, 1+2*frames+len(at.bufs))
	if cap(c.scratch) < frames*frameHeaderLen {
		c.scratch = make([]byte, 0, frames*frameHeaderLen)
	}
	c.scratch = c.scratch[:0]
	c.bmu.Lock()
	pend := c.pend
	c.pend = nil
	reset := s.reset
	c.bmu.Unlock()
	if len(pend) > 0 {
		vec = append(vec, pend)
	}
	for !reset && size > 0 {
		n := min(size, maxFrame)
		size -= n
		h := len(c.scratch)
		c.scratch = appendFrameHeader(c.scratch, n, frameData, 0, s.id)
		vec = append(vec, c.scratch[h:])
		for n > 0 {
			var b []byte
			b, at = at.cut(n)
			vec = append(vec, b)
			n -= len(b)
		}
	}
	if err := c.writev(vec); err != nil {
		err = unavailable("udwire: writing to the container's socket: %v", err)
		c.fail(err)
		return at, err
	}
	c.bmu.Lock()
	if c.pend == nil {
		c.pend = pend[:0]
	}
	c.bmu.Unlock()
	if reset {
		return at, errReset
	}
	return at, nil
}

// errReset is what a send on a stream this side reset gets.
var errReset = errors.New("udwire: the stream was reset")

// write writes all of b to the socket.
func (c *ClientConn) write(b []byte) error {
	if c.raw != nil {
		return c.raw.writeBuffers([][]byte{b})
	}
	_, err := c.nc.Write(b)
	return err
}

// writev writes all of vec to the socket, in as few system calls as the
// kernel takes.
func (c *ClientConn) writev(vec net.Buffers) error {
	if c.raw != nil {
		return c.raw.writeBuffers(vec)
	}
	_, err := vec.WriteTo(c.nc)
	return err
}

// cursor is a position in the buffers of a message being sent. It is
// passed and returned by value, never stored through a pointer, so a small
// message's buffers can stay on its sender's stack.
type cursor struct {
	bufs [][]byte
	off  int // into bufs[0]
}

// cut returns the next bytes, at most n, and the position after them.
func (p cursor) cut(n int) ([]byte, cursor) {
	for p.off == len(p.bufs[0]) {
		p.bufs, p.off = p.bufs[1:], 0
	}
	k := min(n, len(p.bufs[0])-p.off)
	out := p.bufs[0][p.off : p.off+k]
	p.off += k
	return out, p
}

// acquire takes up to want bytes of send window for s, waiting until the
// server grants some; it fails once s or the connection ended.
// It also returns the largest frame the server accepts.
func (c *ClientConn) acquire(s *clientStream, want int) (n, maxFrame int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.err != nil {
			return 0, 0, c.err
		}
		if s.closedErr != nil {
			return 0, 0, s.closedErr
		}
		if n := min(int64(want), c.sendWin, s.sendWin); n > 0 {
			c.sendWin -= n
			s.sendWin -= n
			return int(n), c.peerMaxFrame, nil
		}
		c.cond.Wait()
	}
}

// Receive windows. The connection's is granted back as DATA arrives
// (chargeConn), as grpc-go does: holding it until messages are read would
// let two streams each half-way through a message larger than half the
// window wait for each other for ever. A stream's is granted back as its
// messages are read, and for the message a RecvMsg waits for while it
// arrives (clientStream.grantable): so a message larger than the window
// still arrives, a reader that falls behind stops the server, and no
// window is granted for bytes nobody asked for. Both are granted in
// updates of at least a quarter window, so small messages do not each
// cost a frame. Both are enforced: a server that sends past what it was
// granted breaks flow control (RFC 9113 section 6.9.1), and the
// connection ends before its bytes are kept anywhere.

// chargeConn counts a DATA frame of n bytes (its whole payload, padding
// included) against the connection's receive window, and grants the
// window back once a quarter of it came.
func (c *ClientConn) chargeConn(n int) error {
	c.mu.Lock()
	if left := c.opt.Window - c.recvUnacked; n > left {
		c.mu.Unlock()
		return perr(errCodeFlow, "DATA of %d bytes exceeds the %d bytes left of the connection's flow-control window", n, left)
	}
	c.recvUnacked += n
	inc := 0
	if c.recvUnacked >= c.opt.Window/4 {
		inc, c.recvUnacked = c.recvUnacked, 0
	}
	c.mu.Unlock()
	if inc > 0 {
		c.queue(func(b []byte) []byte { return appendWindowUpdate(b, 0, uint32(inc)) })
	}
	return nil
}

// grantStream sends a window update of inc bytes for s, unless this side
// reset it.
func (c *ClientConn) grantStream(s *clientStream, inc int) {
	if inc > 0 {
		c.queue(func(b []byte) []byte {
			if s.reset {
				return b
			}
			return appendWindowUpdate(b, s.id, uint32(inc))
		})
	}
}

// --- reading ---

func (c *ClientConn) readLoop() {
	var hdr [frameHeaderLen]byte
	for {
		if err := c.br.readFull(hdr[:]); err != nil {
			c.fail(unavailable("udwire: reading from the container's socket: %v", readErr(err)))
			return
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		sid := binary.BigEndian.Uint32(hdr[5:]) & (1<<31 - 1)
		var err error
		switch {
		case length > maxReadFrame:
			err = perr(errCodeFrameSize, "a %s frame of %d bytes, more than the %d this client allows (SETTINGS_MAX_FRAME_SIZE)", frameName(typ), length, maxReadFrame)
		case typ == frameData:
			err = c.onData(sid, flags, length)
		default:
			var p []byte
			if p, err = c.readPayload(length); err == nil {
				err = c.onControl(typ, flags, sid, p)
			}
		}
		if err != nil {
			var pe *protocolErr
			if errors.As(err, &pe) {
				c.protocolError(pe.code, "%s", pe.msg)
			} else {
				c.fail(unavailable("udwire: reading from the container's socket: %v", readErr(err)))
			}
			return
		}
	}
}

// readPayload reads a frame payload of length bytes into the reader
// goroutine's frame buffer; it is valid until the next call.
func (c *ClientConn) readPayload(length int) ([]byte, error) {
	if cap(c.frameBuf) < length {
		c.frameBuf = make([]byte, length)
	}
	c.frameBuf = c.frameBuf[:length]
	return c.frameBuf, c.br.readFull(c.frameBuf)
}

func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return io.EOF
	}
	return err
}

type protocolErr struct {
	code uint32
	msg  string
}

func (e *protocolErr) Error() string { return e.msg }

func perr(code uint32, format string, args ...any) error {
	return &protocolErr{code: code, msg: fmt.Sprintf(format, args...)}
}

// frameName is the RFC's name of a frame type, for errors.
func frameName(typ byte) string {
	switch typ {
	case frameData:
		return "DATA"
	case frameHeaders:
		return "HEADERS"
	case framePriority:
		return "PRIORITY"
	case frameRSTStream:
		return "RST_STREAM"
	case frameSettings:
		return "SETTINGS"
	case framePushPromise:
		return "PUSH_PROMISE"
	case framePing:
		return "PING"
	case frameGoAway:
		return "GOAWAY"
	case frameWindowUpdate:
		return "WINDOW_UPDATE"
	case frameContinuation:
		return "CONTINUATION"
	}
	return "unknown"
}

// protocolError ends the connection after a GOAWAY saying why.
func (c *ClientConn) protocolError(code uint32, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.queue(func(b []byte) []byte {
		b = appendFrameHeader(b, 8, frameGoAway, 0, 0)
		b = binary.BigEndian.AppendUint32(b, 0)
		return binary.BigEndian.AppendUint32(b, code)
	})
	c.end(status.Errorf(codes.Internal, "udwire: HTTP/2 protocol error from the container: %s", msg), true)
}

// streamFor is the open stream sid that a frame of type typ is for, or
// nil for a stream that was open and has ended (its frames may still be
// on the way, RFC 9113 section 5.1). Stream 0 and streams this client
// never opened (idle: even ids, which only a server's pushes would use,
// and ids not handed out yet) are a protocol error.
func (c *ClientConn) streamFor(typ byte, sid uint32) (*clientStream, error) {
	if sid == 0 {
		return nil, perr(errCodeProtocol, "%s on stream 0, which carries only SETTINGS, PING, GOAWAY and WINDOW_UPDATE", frameName(typ))
	}
	c.mu.Lock()
	s, idle := c.streams[sid], sid%2 == 0 || sid >= c.nextID
	c.mu.Unlock()
	if idle {
		return nil, perr(errCodeProtocol, "%s on stream %d, which this client never opened", frameName(typ), sid)
	}
	return s, nil
}

// onData reads a DATA frame's payload straight into the messages of its
// stream.
func (c *ClientConn) onData(sid uint32, flags byte, length int) error {
	s, err := c.streamFor(frameData, sid)
	if err != nil {
		return err
	}
	// Flow control counts the whole payload, padding included, and is
	// checked before a byte of it is read.
	if err := c.chargeConn(length); err != nil {
		return err
	}
	if s != nil {
		if err := s.charge(length); err != nil {
			return err
		}
	}
	pad := 0
	if flags&flagPadded != 0 {
		if length < 1 {
			return perr(errCodeProtocol, "padded DATA without a pad length")
		}
		b, err := c.br.readByte()
		if err != nil {
			return err
		}
		pad = int(b)
		length--
		if pad > length {
			return perr(errCodeProtocol, "DATA padding longer than the frame")
		}
	}
	c.sawData(length)
	if s == nil {
		// A stream this side ended.
		return c.br.discard(length)
	}
	// Only a frame without padding and the end of the stream can be
	// followed by more of the stream's DATA frames.
	if err := s.readData(c.br, length-pad, flags&(flagPadded|flagEndStream) == 0); err != nil {
		return err
	}
	if pad > 0 {
		if err := c.br.discard(pad); err != nil {
			return err
		}
	}
	if flags&flagEndStream != 0 {
		s.finish(status.Error(codes.Internal, "udwire: the container ended the stream without trailers"))
	}
	return nil
}

// sawData notes a DATA frame's length for the scattered reads' guess.
func (c *ClientConn) sawData(length int) {
	if length > c.dataGuess {
		c.dataGuess = min(length, maxReadFrame)
	}
}

// onControl handles every frame but DATA; p is its payload. Each frame
// is checked as RFC 9113 section 6 has it before it changes anything.
func (c *ClientConn) onControl(typ, flags byte, sid uint32, p []byte) error {
	switch typ {
	case frameSettings, framePing, frameGoAway:
		if sid != 0 {
			return perr(errCodeProtocol, "%s on stream %d; it belongs on stream 0", frameName(typ), sid)
		}
	}
	switch typ {
	case frameHeaders:
		return c.onHeaders(flags, sid, p)
	case frameContinuation:
		return perr(errCodeProtocol, "CONTINUATION on stream %d without HEADERS before it", sid)
	case framePriority:
		if sid == 0 {
			return perr(errCodeProtocol, "PRIORITY on stream 0")
		}
		if len(p) != 5 {
			return perr(errCodeFrameSize, "PRIORITY of %d bytes, not 5", len(p))
		}
	case frameRSTStream:
		if len(p) != 4 {
			return perr(errCodeFrameSize, "RST_STREAM of %d bytes, not 4", len(p))
		}
		s, err := c.streamFor(typ, sid)
		if err != nil {
			return err
		}
		if s != nil {
			s.lost(rstError(binary.BigEndian.Uint32(p)))
		}
	case frameSettings:
		if flags&flagAck != 0 {
			if len(p) != 0 {
				return perr(errCodeFrameSize, "SETTINGS acknowledgement with %d bytes of payload", len(p))
			}
			return nil
		}
		if len(p)%6 != 0 {
			return perr(errCodeFrameSize, "SETTINGS of %d bytes, not a multiple of 6", len(p))
		}
		return c.onSettings(p)
	case framePing:
		if len(p) != 8 {
			return perr(errCodeFrameSize, "PING of %d bytes, not 8", len(p))
		}
		if flags&flagAck == 0 {
			c.queue(func(b []byte) []byte {
				return append(appendFrameHeader(b, 8, framePing, flagAck, 0), p...)
			})
		}
	case frameGoAway:
		if len(p) < 8 {
			return perr(errCodeFrameSize, "GOAWAY of %d bytes, fewer than 8", len(p))
		}
		c.onGoAway(binary.BigEndian.Uint32(p)&(1<<31-1), binary.BigEndian.Uint32(p[4:]), string(p[8:]))
	case frameWindowUpdate:
		if len(p) != 4 {
			return perr(errCodeFrameSize, "WINDOW_UPDATE of %d bytes, not 4", len(p))
		}
		return c.onWindowUpdate(sid, int64(binary.BigEndian.Uint32(p)&(1<<31-1)))
	case framePushPromise:
		return perr(errCodeProtocol, "PUSH_PROMISE, which this client disabled")
	}
	// Unknown frame types are ignored (RFC 9113 section 5.5).
	return nil
}

// onWindowUpdate adds inc to the send window of the connection (sid 0)
// or of a stream.
func (c *ClientConn) onWindowUpdate(sid uint32, inc int64) error {
	if inc == 0 {
		return perr(errCodeProtocol, "WINDOW_UPDATE of 0 on stream %d", sid)
	}
	if sid != 0 {
		if _, err := c.streamFor(frameWindowUpdate, sid); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	win := &c.sendWin
	if sid != 0 {
		s := c.streams[sid]
		if s == nil {
			return nil // an ended stream's
		}
		win = &s.sendWin
	}
	if *win+inc > maxWindow {
		return perr(errCodeFlow, "WINDOW_UPDATE of %d on stream %d takes its send window past 2^31-1", inc, sid)
	}
	*win += inc
	c.cond.Broadcast()
	return nil
}

func (c *ClientConn) onSettings(p []byte) error {
	c.mu.Lock()
	for i := 0; i < len(p); i += 6 {
		id, v := binary.BigEndian.Uint16(p[i:]), binary.BigEndian.Uint32(p[i+2:])
		switch id {
		case settingEnablePush:
			// Only a client may enable push (RFC 9113 section 6.5.2).
			if v != 0 {
				c.mu.Unlock()
				return perr(errCodeProtocol, "SETTINGS_ENABLE_PUSH %d from the server", v)
			}
		case settingEnableConnect:
			if v > 1 {
				c.mu.Unlock()
				return perr(errCodeProtocol, "SETTINGS_ENABLE_CONNECT_PROTOCOL %d", v)
			}
		case settingInitialWindowSize:
			if v > maxWindow {
				c.mu.Unlock()
				return perr(errCodeFlow, "SETTINGS_INITIAL_WINDOW_SIZE %d, more than 2^31-1", v)
			}
			delta := int64(v) - c.peerInitWin
			for _, s := range c.streams {
				if s.sendWin+delta > maxWindow {
					c.mu.Unlock()
					return perr(errCodeFlow, "SETTINGS_INITIAL_WINDOW_SIZE %d takes the send window of stream %d past 2^31-1", v, s.id)
				}
			}
			c.peerInitWin = int64(v)
			for _, s := range c.streams {
				s.sendWin += delta
			}
		case settingMaxFrameSize:
			if v < defaultMaxFrame || v > 1<<24-1 {
				c.mu.Unlock()
				return perr(errCodeProtocol, "SETTINGS_MAX_FRAME_SIZE %d, outside 16384 to 2^24-1", v)
			}
			c.peerMaxFrame = int(v)
		}
		// SETTINGS_HEADER_TABLE_SIZE needs nothing: the encoder keeps no
		// dynamic table (New).
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.queue(func(b []byte) []byte { return appendFrameHeader(b, 0, frameSettings, flagAck, 0) })
	return nil
}

func (c *ClientConn) onGoAway(last, code uint32, debug string) {
	err := unavailable("udwire: the container is going away (GOAWAY code %d %q)", code, debug)
	c.mu.Lock()
	c.goAway = true
	c.drain()
	var gone []*clientStream
	for id, s := range c.streams {
		if id > last {
			gone = append(gone, s)
		}
	}
	idle := len(gone) == len(c.streams)
	c.cond.Broadcast()
	c.mu.Unlock()
	// The server never saw these: they may be retried elsewhere.
	for _, s := range gone {
		s.lost(err)
	}
	// The connection serves the calls it still has, and ends with the
	// last of them (clientStream.end).
	if idle {
		c.fail(err)
	}
}

// rstError is the status of a stream the server reset, as grpc-go maps
// HTTP/2 error codes.
func rstError(code uint32) error {
	c := codes.Internal
	switch code {
	case errCodeRefused:
		c = codes.Unavailable
	case errCodeCancel:
		c = codes.Canceled
	case errCodeCalm:
		c = codes.ResourceExhausted
	case errCodeSecurity:
		c = codes.PermissionDenied
	}
	return status.Errorf(c, "udwire: the container reset the stream (HTTP/2 error code %d)", code)
}

// maxContinuations bounds the CONTINUATION frames of one header block, so
// that a flood of empty ones ends the connection, and maxBlock its
// encoded bytes, so that a block of what decodes to nothing (table size
// updates) does too. A field takes fewer bytes encoded than it counts
// for in the list (its 32 bytes of overhead), so a list of the largest
// size stays well within both, in frames of the default size.
func (c *ClientConn) maxContinuations() int {
	return 16 + 2*c.opt.MaxHeaderListSize/defaultMaxFrame
}

func (c *ClientConn) maxBlock() int { return 2 * c.opt.MaxHeaderListSize }

// onHeaders decodes a header block, fragment by fragment as its HEADERS
// and CONTINUATION frames arrive (so that no block is held whole), and
// gives it to its stream.
func (c *ClientConn) onHeaders(flags byte, sid uint32, p []byte) error {
	s, err := c.streamFor(frameHeaders, sid)
	if err != nil {
		return err
	}
	if flags&flagPadded != 0 {
		if len(p) < 1 || int(p[0]) > len(p)-1 {
			return perr(errCodeProtocol, "HEADERS padding longer than the frame")
		}
		p = p[1 : len(p)-int(p[0])]
	}
	if flags&flagPriority != 0 {
		if len(p) < 5 {
			return perr(errCodeFrameSize, "HEADERS with the priority flag and %d bytes", len(p))
		}
		p = p[5:]
	}
	c.fields, c.fieldsLen = c.fields[:0], 0
	c.dec.SetEmitEnabled(true)
	defer c.dropFields()
	if err := c.decodeFragment(sid, p); err != nil {
		return err
	}
	for frames, encoded := 0, len(p); flags&flagEndHeaders == 0; frames++ {
		if frames == c.maxContinuations() {
			return perr(errCodeProtocol, "the header block of stream %d goes on past %d CONTINUATION frames", sid, frames)
		}
		var hdr [frameHeaderLen]byte
		if err := c.br.readFull(hdr[:]); err != nil {
			return err
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		fsid := binary.BigEndian.Uint32(hdr[5:]) & (1<<31 - 1)
		switch {
		case hdr[3] != frameContinuation:
			return perr(errCodeProtocol, "a %s frame inside the header block of stream %d, where only CONTINUATION may come", frameName(hdr[3]), sid)
		case fsid != sid:
			return perr(errCodeProtocol, "CONTINUATION on stream %d inside the header block of stream %d", fsid, sid)
		case length > maxReadFrame:
			return perr(errCodeFrameSize, "a CONTINUATION frame of %d bytes, more than the %d this client allows (SETTINGS_MAX_FRAME_SIZE)", length, maxReadFrame)
		case encoded+length > c.maxBlock():
			return perr(errCodeProtocol, "the header block of stream %d goes on past %d bytes encoded", sid, c.maxBlock())
		}
		encoded += length
		flags = flags&^flagEndHeaders | hdr[4]&flagEndHeaders
		frag, err := c.readPayload(length)
		if err != nil {
			return err
		}
		if err := c.decodeFragment(sid, frag); err != nil {
			return err
		}
	}
	if err := c.dec.Close(); err != nil {
		return perr(errCodeCompression, "header block of stream %d: %v", sid, err)
	}
	if s != nil {
		s.onHeaders(c.fields, flags&flagEndStream != 0)
	}
	return nil
}

// decodeFragment decodes part of a header block, a few KiB at a time so
// that a list over the limit stops soon after it: an entry of the dynamic
// table referred to by one byte can otherwise make a block of 1 MiB decode
// to gigabytes. An error ends the connection, since the decoder's state
// is then lost (RFC 9113 section 4.3).
func (c *ClientConn) decodeFragment(sid uint32, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), hpackChunk)
		_, err := c.dec.Write(p[:n])
		if c.fieldsLen > c.opt.MaxHeaderListSize || errors.Is(err, hpack.ErrStringLength) {
			return perr(errCodeProtocol, "the header list of stream %d exceeds %d bytes (SETTINGS_MAX_HEADER_LIST_SIZE)", sid, c.opt.MaxHeaderListSize)
		}
		if err != nil {
			return perr(errCodeCompression, "header block of stream %d: %v", sid, err)
		}
		p = p[n:]
	}
	return nil
}

// emitField is the decoder's: it keeps a decoded field while the list is
// within its limit (counting as RFC 9113 section 6.5.2 does), and stops
// keeping them once it is not.
func (c *ClientConn) emitField(f hpack.HeaderField) {
	c.fieldsLen += int(f.Size())
	if c.fieldsLen > c.opt.MaxHeaderListSize {
		c.dec.SetEmitEnabled(false)
		return
	}
	c.fields = append(c.fields, f)
}

// dropFields lets go of the last block's fields, and of their slice if
// a large block grew it.
func (c *ClientConn) dropFields() {
	if cap(c.fields) > 64 {
		c.fields = nil
		return
	}
	clear(c.fields)
	c.fields = c.fields[:0]
}

// --- calls ---

// NewStream starts a call of method (/package.Service/Method). The call
// ends when ctx does.
func (c *ClientConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.newStream(ctx, method)
}

// Invoke makes a unary call.
func (c *ClientConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.newStream(ctx, method)
	if err != nil {
		return err
	}
	if err := s.SendMsg(args); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	if err := s.RecvMsg(reply); err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.Internal, "udwire: the container answered a unary call with no message")
		}
		return err
	}
	if err := s.RecvMsg(reply); !errors.Is(err, io.EOF) {
		if err == nil {
			return status.Error(codes.Internal, "udwire: the container answered a unary call with more than one message")
		}
		return err
	}
	return nil
}
