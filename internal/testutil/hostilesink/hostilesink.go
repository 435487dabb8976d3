// Package hostilesink is a Numaflow sink container that breaks HTTP/2 on
// purpose, for the tests of what the runner's gRPC client (package udwire)
// refuses. It writes frames itself with golang.org/x/net/http2's Framer,
// as a hostile peer would: it answers IsReady and the SinkFn handshake
// like the numaflow-go SDK, never grants the runner stream window (so the
// runner's batch waits in Send and nobody reads the stream), and on
// Attack misbehaves in one of the Modes on the SinkFn stream.
package hostilesink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	"github.com/numaproj/numaflow-go/pkg/info"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// Mode is a way to break HTTP/2.
type Mode string

// The modes a Server attacks in.
const (
	// WindowOverrun sends DATA on the SinkFn stream past the window the
	// runner granted: answers of 1 MiB, back to back, up to PushLimit.
	WindowOverrun Mode = "window overrun"
	// HPACKBomb sends trailers whose block adds one 4 KiB -bin field to
	// the dynamic table and refers to it a million times: 4 GB of header
	// list from a block of 1 MiB.
	HPACKBomb Mode = "HPACK bomb"
	// HugePrefix sends a message prefix claiming 64 MiB and 1 KiB of it,
	// holds the stream HoldPrefix, then drops the connection (a container
	// that dies half-way through a message).
	HugePrefix Mode = "64 MiB prefix"
	// WrongStreams sends DATA on a stream the runner never opened.
	WrongStreams Mode = "frames on wrong streams"
)

// Modes are all the modes.
var Modes = []Mode{WindowOverrun, HPACKBomb, HugePrefix, WrongStreams}

const (
	// PushLimit is the most WindowOverrun sends before giving up: far
	// past any window, so a client that does not enforce one shows it.
	PushLimit = 512 << 20
	// HoldPrefix is how long HugePrefix holds the stream before it drops
	// the connection.
	HoldPrefix = 2 * time.Second
	// Claimed is the message size HugePrefix's prefix claims (the
	// runner's default MV_UDF_MAX_MESSAGE_SIZE, so it is allowed).
	Claimed = 64 << 20
)

// Outcome is how the runner ended the hostile connection.
type Outcome struct {
	// GoAway is whether the runner sent GOAWAY, with Code and Debug.
	GoAway bool
	Code   http2.ErrCode
	// Pushed is how many bytes of attack were written.
	Pushed int64
	// Err is the error that ended the server's reading (io.EOF when the
	// runner closed the connection).
	Err error
}

// Server serves one socket in the Mode it was made with.
type Server struct {
	mode   Mode
	sock   string
	ln     net.Listener
	attack chan struct{}
	once   sync.Once

	mu      sync.Mutex
	conns   []net.Conn
	blocked chan struct{} // closed once the runner's batch filled the SinkFn stream's window
	ended   chan Outcome  // the outcome of the attacked connection
	used    bool          // a SinkFn stream was attacked: later ones only wait
	stopped bool
}

// Start writes a sink server-info file into dir and serves dir/sink.sock
// in mode.
func Start(dir string, mode Mode) (*Server, error) {
	si := info.GetDefaultServerInfo()
	si.MinimumNumaflowVersion = info.MinimumNumaflowVersion[info.Sinker]
	if si.Version == "" {
		si.Version = "v0.12.0" // test binaries may lack module versions
	}
	if err := info.Write(si, info.WithServerInfoFilePath(filepath.Join(dir, "sinker-server-info"))); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "sink.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	s := &Server{mode: mode, sock: sock, ln: ln, attack: make(chan struct{}), blocked: make(chan struct{}), ended: make(chan Outcome, 1)}
	go s.accept()
	return s, nil
}

// Blocked is closed once the runner has filled the SinkFn stream's send
// window (65,535 bytes, never granted back): its batch then waits in
// Send, and nothing reads the stream.
func (s *Server) Blocked() <-chan struct{} { return s.blocked }

// Attack starts the misbehaviour on the SinkFn stream.
func (s *Server) Attack() { s.once.Do(func() { close(s.attack) }) }

// Ended delivers how the runner ended the attacked connection.
func (s *Server) Ended() <-chan Outcome { return s.ended }

// Stop closes the listener and every connection, and removes the socket,
// so that another server can take its place.
func (s *Server) Stop() {
	s.mu.Lock()
	s.stopped = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	os.Remove(s.sock)
}

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// conn is one connection: the framer's writes are serialised by wmu.
type conn struct {
	nc     net.Conn
	fr     *http2.Framer
	pushed atomic.Int64 // bytes of attack written
	wmu    sync.Mutex
	buf    bytes.Buffer
	enc    *hpack.Encoder
}

func (c *conn) write(f func(fr *http2.Framer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return f(c.fr)
}

// block encodes header fields (name, value pairs); wmu is held.
func (c *conn) block(fields ...string) []byte {
	c.buf.Reset()
	for i := 0; i < len(fields); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), c.buf.Bytes()...)
}

func grpcMessage(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

func (s *Server) serve(nc net.Conn) {
	defer nc.Close()
	pre := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(nc, pre); err != nil || string(pre) != http2.ClientPreface {
		return
	}
	c := &conn{nc: nc, fr: http2.NewFramer(nc, nc)}
	c.enc = hpack.NewEncoder(&c.buf)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if c.write(func(fr *http2.Framer) error { return fr.WriteSettings() }) != nil {
		return
	}
	var out Outcome
	var attacked bool
	sinkStream, sinkData := uint32(0), 0
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			out.Err = err
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func(fr *http2.Framer) error { return fr.WritePing(true, f.Data) })
			}
		case *http2.GoAwayFrame:
			out.GoAway, out.Code = true, f.ErrCode
		case *http2.MetaHeadersFrame:
			path := ""
			for _, hf := range f.Fields {
				if hf.Name == ":path" {
					path = hf.Value
				}
			}
			switch {
			case strings.HasSuffix(path, "/IsReady"):
				go c.ready(f.StreamID)
			case strings.HasSuffix(path, "/SinkFn") && sinkStream == 0:
				sinkStream = f.StreamID
				c.handshake(sinkStream)
				s.mu.Lock()
				attacked, s.used = !s.used, true
				s.mu.Unlock()
				if attacked {
					id := sinkStream
					go func() {
						<-s.attack
						s.misbehave(c, id)
					}()
				}
			}
		case *http2.DataFrame:
			// The connection's window is given back (IsReady calls go
			// on), a stream's never: the SinkFn batch fills its window
			// and waits.
			if f.Length > 0 {
				c.write(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, uint32(f.Length)) })
			}
			if f.StreamID == sinkStream {
				if sinkData += int(f.Length); sinkData >= 65535 {
					s.mu.Lock()
					select {
					case <-s.blocked:
					default:
						close(s.blocked)
					}
					s.mu.Unlock()
				}
			}
		}
	}
	if attacked {
		out.Pushed = c.pushed.Load()
		s.ended <- out
	}
}

// ready answers an IsReady call: ready.
func (c *conn) ready(id uint32) {
	c.write(func(fr *http2.Framer) error {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, BlockFragment: c.block(":status", "200", "content-type", "application/grpc")})
		fr.WriteData(id, false, grpcMessage(&sinkpb.ReadyResponse{Ready: true}))
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true, BlockFragment: c.block("grpc-status", "0")})
	})
}

// handshake answers SinkFn's handshake as numaflow-go does.
func (c *conn) handshake(id uint32) {
	c.write(func(fr *http2.Framer) error {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, BlockFragment: c.block(":status", "200", "content-type", "application/grpc")})
		return fr.WriteData(id, false, grpcMessage(&sinkpb.SinkResponse{Handshake: &sinkpb.Handshake{Sot: true}}))
	})
}

// misbehave attacks stream id in the server's mode, counting what it
// writes in c.pushed; it ends when the runner closed the connection or
// the attack is complete.
func (s *Server) misbehave(c *conn, id uint32) error {
	switch s.mode {
	case WindowOverrun:
		// Well-formed answers (results for an id nobody sent), so that
		// what the runner reads of them says nothing but what broke.
		msg := grpcMessage(&sinkpb.SinkResponse{Results: []*sinkpb.SinkResponse_Result{{Id: strings.Repeat("x", 1<<20)}}})
		for c.pushed.Load() < PushLimit {
			for off := 0; off < len(msg); off += 16 << 10 {
				frame := msg[off:min(len(msg), off+16<<10)]
				if err := c.write(func(fr *http2.Framer) error { return fr.WriteData(id, false, frame) }); err != nil {
					return err
				}
				c.pushed.Add(int64(len(frame)))
			}
		}
		return errors.New("hostilesink: the runner took all of the push")
	case HPACKBomb:
		c.pushed.Add(1 << 20)
		return c.write(func(fr *http2.Framer) error {
			var buf bytes.Buffer
			enc := hpack.NewEncoder(&buf)
			enc.WriteField(hpack.HeaderField{Name: "x-bomb-bin", Value: strings.Repeat("A", 4000)})
			// 62 is the newest entry of the dynamic table; each byte
			// refers to it. The block fits the 1 MiB frame udwire allows.
			block := append(buf.Bytes(), bytes.Repeat([]byte{0x80 | 62}, 1<<20-8<<10)...)
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true, BlockFragment: block})
		})
	case HugePrefix:
		msg := make([]byte, 5+1024)
		binary.BigEndian.PutUint32(msg[1:], Claimed)
		if err := c.write(func(fr *http2.Framer) error { return fr.WriteData(id, false, msg) }); err != nil {
			return err
		}
		c.pushed.Add(int64(len(msg)))
		time.Sleep(HoldPrefix)
		return c.nc.Close()
	case WrongStreams:
		c.pushed.Add(16 << 10)
		return c.write(func(fr *http2.Framer) error { return fr.WriteData(id+1000, false, make([]byte, 16<<10)) })
	}
	return fmt.Errorf("hostilesink: unknown mode %q", s.mode)
}
