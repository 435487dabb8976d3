package cewire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// direct is the HTTP/1.1 path a Client takes to a plain http:// URL that no
// proxy serves: a call borrows a kept-alive connection, writes its request
// and reads the answer on it in the calling goroutine. net/http's transport
// hands each request to a writer goroutine of the connection and each
// answer back from a reader goroutine; for small events those hand-offs
// (channel sends, selects, wake-ups) cost about as much as the system
// calls. The request is written by net/http's own Request.Write and the
// answer read as its ReadResponse reads it (readAnswer), so what goes on
// the wire is the same.
// A small request fits the socket's buffer and is written whole before
// the answer is read; a larger one is written from a goroutine of the call
// while the answer is read, so an answer that comes before the function
// read the body is taken, as net/http takes it.
type direct struct {
	addr    string
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle int
	mu      sync.Mutex
	idle    []*directConn // most recently used last
}

// directConn is one kept-alive connection, used by one call at a time.
type directConn struct {
	conn net.Conn
	// in is what br reads from: the connection, capped while an answer's
	// header is read.
	in *capReader
	br *bufio.Reader
	bw *bufio.Writer
	// idleSince is when the connection was put back.
	idleSince time.Time
}

// staleAfter is how long a connection may sit idle before it is checked
// for a close by the peer (a server closes its idle keep-alive connections
// when it shuts down or after its idle timeout) before it is used again.
// The check is one system call that does not wait (peekIdle), so a
// connection in steady use skips it; one the peer closes within this time
// of its last answer fails the next call as a transport error, which the
// engine retries. net/http's transport learns of a close from the reader
// goroutine it keeps on every connection.
const staleAfter = 2 * time.Millisecond

// directIO is the size of a connection's read and write buffers: a small
// event's request goes out, and its answer comes in, with one system call.
const directIO = 32 << 10

// maxInterim is how many interim (1xx) answers a call takes before its
// answer, as net/http's transport.
const maxInterim = 5

// aLongTimeAgo is a deadline in the past, which makes pending I/O return.
var aLongTimeAgo = time.Unix(1, 0)

// newDirect returns the direct path to rawURL, or nil when it does not
// apply: not http, or sent through a proxy.
func newDirect(rawURL string, dial func(ctx context.Context, network, addr string) (net.Conn, error), maxIdle int) *direct {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		return nil
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &direct{addr: addr, dial: dial, maxIdle: maxIdle}
}

// do sends req and reads the answer's header; the answer's body reads from
// the connection, which goes back to the pool when the body was read to
// its end and closed. aside writes the request beside the read of the
// answer (see roundTripAside). Nothing reads req's body once do returned.
// Like net/http, an error says what failed and, when ctx ended, wraps
// ctx's error.
func (d *direct) do(ctx context.Context, req *http.Request, aside bool) (*http.Response, error) {
	dc, err := d.get(ctx)
	if err != nil {
		return nil, err
	}
	deadline, timed := ctx.Deadline()
	if err := dc.conn.SetDeadline(deadline); err != nil {
		dc.conn.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = dc.conn.SetDeadline(aLongTimeAgo) })
	var resp *http.Response
	if aside {
		resp, err = dc.roundTripAside(req)
	} else if err = dc.send(req); err == nil {
		resp, err = dc.receive(req)
	}
	if err != nil {
		stop()
		dc.conn.Close()
		cerr := ctx.Err()
		if cerr == nil && timed && errors.Is(err, os.ErrDeadlineExceeded) {
			// The connection's deadline is ctx's, and may pass first.
			cerr = context.DeadlineExceeded
		}
		if cerr != nil {
			return nil, fmt.Errorf("%w (%v)", cerr, err)
		}
		return nil, err
	}
	resp.Body = &directBody{body: resp.Body, d: d, dc: dc, stop: stop, close: resp.Close}
	return resp, nil
}

// earlyAnswerWait is how long a call that has its answer waits for the
// rest of its request body to go out before it stops writing and drops
// the connection; net/http's transport waits as long.
const earlyAnswerWait = 50 * time.Millisecond

// roundTripAside writes req from a goroutine of its own while the answer
// is read, as net/http's transport does: a function may answer before it
// read a large body (a 413, or a 202 at once) and never read the rest.
// It returns once that goroutine is done with req's body.
func (dc *directConn) roundTripAside(req *http.Request) (*http.Response, error) {
	sent := make(chan error, 1)
	go func() { sent <- dc.send(req) }()
	resp, err := dc.receive(req)
	if err != nil {
		_ = dc.conn.SetDeadline(aLongTimeAgo)
		<-sent
		return nil, err
	}
	wait := time.NewTimer(earlyAnswerWait)
	defer wait.Stop()
	select {
	case err := <-sent:
		// A request that did not go out whole leaves the connection in
		// no state for another.
		resp.Close = resp.Close || err != nil
	case <-wait.C:
		_ = dc.conn.SetWriteDeadline(aLongTimeAgo)
		<-sent
		resp.Close = true
	}
	return resp, nil
}

// send writes req.
func (dc *directConn) send(req *http.Request) error {
	if err := req.Write(dc.bw); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	if err := dc.bw.Flush(); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	return nil
}

// receive reads the answer's header, skipping interim (1xx) answers as
// net/http does.
func (dc *directConn) receive(req *http.Request) (*http.Response, error) {
	for interim := 0; ; interim++ {
		// What br holds already was read under the cap, or is the answer.
		dc.in.n = maxAnswerHeader
		resp, err := readAnswer(dc.br, req)
		dc.in.n = -1
		if err != nil {
			return nil, fmt.Errorf("read answer: %w", err)
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			resp.Body.Close()
			return nil, errors.New("read answer: the server switched protocols, which a POST of an event never asks for")
		case resp.StatusCode >= 200:
			return resp, nil
		case interim == maxInterim:
			return nil, fmt.Errorf("read answer: more than %d interim (1xx) answers", maxInterim)
		}
	}
}

// get takes an idle connection, or dials one. An idle connection with
// bytes the peer sent unasked is dropped, as net/http does.
func (d *direct) get(ctx context.Context) (*directConn, error) {
	d.mu.Lock()
	for n := len(d.idle); n > 0; n = len(d.idle) {
		dc := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		if dc.br.Buffered() == 0 && (time.Since(dc.idleSince) < staleAfter || dc.alive()) {
			return dc, nil
		}
		dc.conn.Close()
		d.mu.Lock()
	}
	d.mu.Unlock()
	conn, err := d.dial(ctx, "tcp", d.addr)
	if err != nil {
		return nil, err
	}
	in := &capReader{r: conn, n: -1}
	return &directConn{conn: conn, in: in, br: bufio.NewReaderSize(in, directIO), bw: bufio.NewWriterSize(conn, directIO)}, nil
}

// maxAnswerHeader bounds an answer's header, as net/http's transport does
// (MaxResponseHeaderBytes), so a broken peer cannot make the runner hold
// an endless header.
const maxAnswerHeader = 1 << 20

// errHeaderTooLarge is an answer whose header passed maxAnswerHeader.
var errHeaderTooLarge = fmt.Errorf("the answer's header is larger than %d bytes", maxAnswerHeader)

// capReader reads from r, at most n more bytes while n is not negative.
type capReader struct {
	r io.Reader
	n int64
}

// Read reads from r within the cap.
func (c *capReader) Read(p []byte) (int, error) {
	if c.n < 0 {
		return c.r.Read(p)
	}
	if c.n == 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// alive reports whether an idle connection can take a request: the peer
// neither closed it nor sent anything unasked.
func (dc *directConn) alive() bool {
	if usable, ok := peekIdle(dc.conn); ok {
		return usable
	}
	return dc.aliveAfterRead()
}

// aliveAfterRead is alive for a connection peekIdle cannot look at: a
// read with a deadline a millisecond away. A deadline already passed would
// fail the read before it looks at the socket.
func (dc *directConn) aliveAfterRead() bool {
	if dc.conn.SetReadDeadline(time.Now().Add(time.Millisecond)) != nil {
		return false
	}
	_, err := dc.br.Peek(1)
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// idleTimeout is how long an idle connection is kept, as net/http's
// transport keeps them for the client (IdleConnTimeout): calls take the
// connection used last, so those left at the bottom of the pool after a
// burst would otherwise stay open until the peer closes them.
const idleTimeout = 90 * time.Second

// put returns a connection to the pool, or closes it when the pool is
// full, and closes those idle for longer than idleTimeout.
func (d *direct) put(dc *directConn) {
	now := time.Now()
	dc.idleSince = now
	var expired []*directConn
	d.mu.Lock()
	for len(d.idle) > 0 && now.Sub(d.idle[0].idleSince) > idleTimeout {
		expired = append(expired, d.idle[0])
		d.idle = append(d.idle[:0], d.idle[1:]...)
	}
	if len(d.idle) < d.maxIdle {
		d.idle = append(d.idle, dc)
		dc = nil
	}
	d.mu.Unlock()
	if dc != nil {
		expired = append(expired, dc)
	}
	for _, dc := range expired {
		dc.conn.Close()
	}
}

// closeIdle closes the idle connections.
func (d *direct) closeIdle() {
	d.mu.Lock()
	idle := d.idle
	d.idle = nil
	d.mu.Unlock()
	for _, dc := range idle {
		dc.conn.Close()
	}
}

// directBody is an answer's body on a borrowed connection: closing it
// gives the connection back when the body was read to its end, the answer
// did not ask to close, and the call's context did not end; otherwise the
// connection is closed.
type directBody struct {
	body   io.ReadCloser
	d      *direct
	dc     *directConn
	stop   func() bool
	close  bool
	eof    bool
	failed bool
}

// Read reads the body, noting its end or a failure.
func (b *directBody) Read(p []byte) (int, error) {
	if b.dc == nil {
		return 0, errors.New("read on a closed answer body")
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.failed = true
	}
	return n, err
}

// Close gives the connection back or closes it.
func (b *directBody) Close() error {
	dc := b.dc
	if dc == nil {
		return nil
	}
	b.dc = nil
	if !b.eof && !b.failed {
		// A body read exactly to its length has not said EOF yet.
		var one [1]byte
		n, err := b.body.Read(one[:])
		b.eof = n == 0 && err == io.EOF
	}
	if b.stop() && b.eof && !b.close {
		b.d.put(dc)
		return nil
	}
	return dc.conn.Close()
}
