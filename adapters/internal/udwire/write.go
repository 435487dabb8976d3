package udwire

import (
	"errors"
	"net"
)

// queue adds control frames (window updates, pings, resets, the end of a
// stream) to the batch; add appends them to pend. When no other write is
// under way the caller writes the batch itself, with one system call that
// does not wait; otherwise, or for what the socket did not take, it wakes
// the writer goroutine. It never blocks on the socket, so the reader can
// use it to answer pings and grant windows while a large write waits.
//
// Why not always the writer goroutine: waking it for every window update
// woke threads too, which writing control frames at once mostly avoids
// (hack/bench/RESULTS.md, "Control frames written by their sender").
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
