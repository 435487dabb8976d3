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
	"errors"
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

// --- reading ---

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
