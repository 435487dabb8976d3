package udwire

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
