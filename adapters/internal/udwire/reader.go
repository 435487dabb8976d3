package udwire

import (
	"encoding/binary"
	"io"
	"sync/atomic"
	"syscall"
)

// reader is the connection's read buffer: what bufio.Reader does for the
// frame parser, plus scattered reads that put a large message's DATA
// straight into the message's own buffer.
//
// Why: grpc-go sends a message in DATA frames of 16 KiB, and reading them
// through a buffer copies every payload once more after the kernel did,
// which was costly at 1 MiB (hack/bench/RESULTS.md, "Large messages read
// in place").
type reader struct {
	rd  io.Reader
	raw *rawSock // nil when rd has no raw system calls: no scattered reads
	own []byte   // the buffer of the reader's own size
	buf []byte   // own, or bytes put back until they are read
	r   int      // buf[r:w] is buffered
	w   int
	// small makes the next fill read at most scatterTail: after a
	// scattered read the next bytes are most likely the start of the
	// next large message, which would otherwise be read into the buffer
	// and copied out of it.
	small bool

	// A scattered read's header slots, vectors and the parts they point
	// into, kept for the next one.
	hdrs  []byte
	iov   []syscall.Iovec
	parts [][]byte
}

// maxSlots is how many frames one scattered read guesses: two vectors
// each, within IOV_MAX with the first part and the tail.
const maxSlots = (maxIovecs - 2) / 2

// scatterTail is the buffer space a scattered read adds after the message
// for what follows it (the next frame header and message prefix): more
// would only be copied again.
const scatterTail = 16 << 10

// scatters and putBacks count scattered reads and the guesses they put
// back, for the tests to see that they reach both.
var scatters, putBacks atomic.Int64

func newReader(rd io.Reader, raw *rawSock, size int) *reader {
	b := make([]byte, size)
	return &reader{rd: rd, raw: raw, own: b, buf: b}
}

// buffered is how many bytes can be read without a system call.
func (b *reader) buffered() int { return b.w - b.r }

// fill reads into the empty buffer.
func (b *reader) fill() error {
	b.buf, b.r, b.w = b.own, 0, 0
	into := b.buf
	if b.small {
		into, b.small = into[:min(len(into), scatterTail)], false
	}
	n, err := b.read(into)
	b.w = n
	return err
}

// read reads at least one byte into p, or fails. An error that comes with
// data is not kept: a socket returns it again on the next read. A reader
// that keeps returning nothing fails with io.ErrNoProgress, as bufio's.
func (b *reader) read(p []byte) (int, error) {
	for range 100 {
		n, err := b.rd.Read(p)
		if n > 0 {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
	return 0, io.ErrNoProgress
}

// take copies buffered bytes into p and returns how many.
func (b *reader) take(p []byte) int {
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n
}

// readFull fills p, reading large parts straight into it.
func (b *reader) readFull(p []byte) error {
	for len(p) > 0 {
		if b.r == b.w {
			if len(p) >= len(b.own) {
				n, err := b.read(p)
				if err != nil {
					return err
				}
				p = p[n:]
				continue
			}
			if err := b.fill(); err != nil {
				return err
			}
		}
		p = p[b.take(p):]
	}
	return nil
}

func (b *reader) readByte() (byte, error) {
	if b.r == b.w {
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	c := b.buf[b.r]
	b.r++
	return c, nil
}

func (b *reader) discard(n int) error {
	for n > 0 {
		if b.r == b.w {
			if err := b.fill(); err != nil {
				return err
			}
		}
		k := min(n, b.w-b.r)
		b.r += k
		n -= k
	}
	return nil
}

// readv reads into the parts, waiting for data if there is none; it
// returns how many bytes it read, which fill the parts in order.
func (b *reader) readv() (int, error) {
	b.iov = b.iov[:0]
	for _, p := range b.parts {
		v := syscall.Iovec{Base: &p[0]}
		v.SetLen(len(p))
		b.iov = append(b.iov, v)
	}
	n, err := b.raw.readv(b.iov)
	clear(b.iov) // hold no message's buffer past the read
	return n, err
}

// putBack makes the bytes from offset at of the parts, up to got, the
// next ones read. The last part is the tail, the start of the reader's
// own buffer.
func (b *reader) putBack(at, got int) {
	putBacks.Add(1)
	tail := got
	for _, p := range b.parts[:len(b.parts)-1] {
		tail -= len(p)
	}
	if tailStart := got - tail; tail >= 0 && at >= tailStart {
		// Only the tail's bytes: they are where they belong.
		b.buf, b.r, b.w = b.own, at-tailStart, tail
		return
	}
	// Bytes before the tail, then the tail's: in the reader's own buffer
	// when they fit (the tail moved up first, as it is the buffer's
	// start), else in a buffer of their own until they are read.
	tail = max(tail, 0)
	before, back := got-at-tail, b.own
	if got-at > len(b.own) {
		back = make([]byte, got-at)
	}
	copy(back[before:], b.own[:tail])
	n, skip := 0, at
	for _, p := range b.parts[:len(b.parts)-1] {
		if n == before {
			break
		}
		if skip >= len(p) {
			skip -= len(p)
			continue
		}
		n += copy(back[n:before], p[skip:])
		skip = 0
	}
	b.buf, b.r, b.w = back, 0, got-at
}

// scatter reads the rest of the message s is reading, which the buffer
// (empty) does not hold, straight into the message. n is what is left of
// the current DATA frame, all of it s's payload. When guess is true (the
// frame has no padding and does not end the stream, so a frame header
// follows it) it guesses that the message goes on in DATA frames of s of
// c.dataGuess bytes, and reads their headers into slots
// between the message's parts. A slot counts only if the frame before it
// ended where the guess said and it holds a DATA header of s without
// padding or the end of the stream: then it is a real frame header, and
// what follows it real payload. At the first slot that does not count,
// that byte and every one after it are put back for the frame parser. It
// returns what is left of the frame the read ended in.
func (s *clientStream) scatter(b *reader, n int, guess bool) (int, error) {
	c := s.c
	dst := s.msg.B[s.got:]
	first := min(n, len(dst))
	b.parts = append(b.parts[:0], dst[:first])
	if cap(b.hdrs) == 0 {
		b.hdrs = make([]byte, maxSlots*frameHeaderLen)
	}
	defer clear(b.parts)
	frame := c.dataGuess
	off, slots := first, 0
	if first == n && guess {
		for off < len(dst) && slots < maxSlots {
			size := min(frame, len(dst)-off)
			h := b.hdrs[slots*frameHeaderLen : (slots+1)*frameHeaderLen]
			b.parts = append(b.parts, h, dst[off:off+size])
			off += size
			slots++
		}
	}
	b.parts = append(b.parts, b.own[:min(len(b.own), scatterTail)])
	got, err := b.readv()
	if err != nil {
		return n, err
	}
	scatters.Add(1)
	b.buf, b.r, b.w, b.small = b.own, 0, 0, true

	k := min(got, first)
	s.got += k
	n -= k
	at := k
	off = first
	for i := 0; i < slots && at < got; i++ {
		if got-at < frameHeaderLen {
			b.putBack(at, got)
			return n, nil
		}
		h := b.hdrs[i*frameHeaderLen : (i+1)*frameHeaderLen]
		length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		sid := binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1)
		if h[3] != frameData || h[4]&(flagPadded|flagEndStream) != 0 || sid != s.id || length > maxReadFrame {
			b.putBack(at, got)
			return n, nil
		}
		at += frameHeaderLen
		if err := c.chargeConn(length); err != nil {
			return n, err
		}
		if err := s.charge(length); err != nil {
			return n, err
		}
		size := min(frame, len(dst)-off)
		if length != size && length > 0 {
			// This server's frames are of another size than guessed
			// (the guess only grows otherwise): guess that from now on.
			c.dataGuess = length
		}
		k := min(got-at, size, length)
		s.got += k
		n = length - k
		at += k
		off += size
		if length != size && at < got {
			// The frame ends before its slot, or goes on past it: what
			// was read after it is not where the guess put it.
			b.putBack(at, got)
			return n, nil
		}
	}
	if at < got {
		b.putBack(at, got)
	}
	return n, nil
}
