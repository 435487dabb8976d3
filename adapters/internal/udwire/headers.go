package udwire

import (
	"encoding/binary"
	"errors"

	"golang.org/x/net/http2/hpack"
)

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
