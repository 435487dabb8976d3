package udwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
