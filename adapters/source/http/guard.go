package http

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The $PORT server's connections are guarded below net/http, because what
// a hostile caller costs there is out of a handler's reach: net/http reads
// a whole request head (up to its MaxHeaderBytes) before any handler runs
// and before the token is checked, keeps one goroutine and buffers per
// connection without a bound on connections, and takes a request with both
// Content-Length and Transfer-Encoding (dropping the length) on a
// connection it keeps open.
//
// The guard sits between the listener and net/http. It counts connections
// (MV_HTTP_MAX_CONNECTIONS; one more is answered 503 and closed), and it
// reads each request head itself, into a buffer charged to one budget of
// head bytes shared by all connections, before net/http sees any of it:
//
//   - a head above MV_HTTP_MAX_HEADER_BYTES is answered 431 and closed;
//   - when the shared budget is spent, the connections holding the largest
//     unfinished heads are answered 431 and closed (or the one asking, if
//     it holds the most), and the one asking waits until their buffers are
//     gone (503 if that takes over evictWait), so the bytes counted are the
//     bytes held, and a few small heads always fit beside any number of
//     huge unfinished ones;
//   - a head whose framing is ambiguous (RFC 9112 section 6.3: both
//     Content-Length and Transfer-Encoding, a Transfer-Encoding other than
//     a single chunked, a Content-Length that is repeated or not a number,
//     a folded header line) is answered 400 and closed, so no second
//     request can be smuggled behind it.
//
// Once a head is accepted, the guard passes its body through: exactly
// Content-Length bytes, after which the next head is read again; a chunked
// body's end is not tracked, so the connection is closed after its answer
// (the answer says Connection: close, and ConnState closes it in any
// case), and net/http never reads a head the guard has not seen.
type guard struct {
	maxConns   int
	maxHead    int
	headBudget int64
	log        *zap.SugaredLogger

	mu    sync.Mutex
	conns int
	used  int64                   // head bytes held across connections
	heads map[*guardConn]struct{} // connections reading an unfinished head
	// released is closed (and replaced) when head bytes are given back
	// or a connection is told to leave.
	released chan struct{}
	warns    map[string]*warnState
}

// headBudgetFactor sets the budget of head bytes shared by all connections
// as a multiple of MV_HTTP_MAX_HEADER_BYTES, with headBudgetFloor as its
// least: room for a few of the largest heads at once.
const (
	headBudgetFactor = 16
	headBudgetFloor  = 16 << 20
)

// lingerTime is how long a refused connection is still read from (and the
// bytes dropped) after its answer, so that closing it with unread bytes
// does not reset it before the caller read the answer.
const lingerTime = 500 * time.Millisecond

// headStart is the first size of a head buffer; it doubles as it fills.
const headStart = 1 << 10

func newGuard(maxConns, maxHead int, log *zap.SugaredLogger) *guard {
	return &guard{
		maxConns: maxConns, maxHead: maxHead,
		headBudget: max(int64(headBudgetFactor)*int64(maxHead), headBudgetFloor),
		log:        log,
		heads:      map[*guardConn]struct{}{},
		released:   make(chan struct{}),
		warns:      map[string]*warnState{},
	}
}

// GuardPort puts the HTTP source's connection guard between the $PORT
// server and its listener: the runner calls it before serving.
func (s *Source) GuardPort(srv *http.Server, ln net.Listener) net.Listener {
	// net/http's own head limit is MaxHeaderBytes plus 4 KiB; the guard
	// hands it heads up to maxHead only, so it never answers first.
	srv.MaxHeaderBytes = s.guard.maxHead
	if h := srv.Handler; h != nil {
		srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(r.TransferEncoding) > 0 {
				// The guard does not track a chunked body's end, so the
				// connection ends with this answer; saying so lets the
				// caller open a new one rather than find this one closed.
				w.Header().Set("Connection", "close")
			}
			h.ServeHTTP(w, r)
		})
	}
	hook := srv.ConnState
	srv.ConnState = func(c net.Conn, state http.ConnState) {
		s.guard.connState(c, state)
		if hook != nil {
			hook(c, state)
		}
	}
	return &guardListener{Listener: ln, g: s.guard}
}

// warnState rate-limits one kind of warning.
type warnState struct {
	last   time.Time
	missed int
}

// warn logs a refusal at most once per 10 seconds per kind, with the count
// of the ones not logged since: a caller can make these as fast as it
// likes, and the log must not become the next thing it fills.
func (g *guard) warn(kind, msg string, kv ...any) {
	g.mu.Lock()
	w := g.warns[kind]
	if w == nil {
		w = &warnState{}
		g.warns[kind] = w
	}
	now := time.Now()
	if now.Sub(w.last) < 10*time.Second {
		w.missed++
		g.mu.Unlock()
		return
	}
	missed := w.missed
	w.last, w.missed = now, 0
	g.mu.Unlock()
	g.log.Warnw(msg, append(kv, "same_refusals_not_logged", missed)...)
}

type guardListener struct {
	net.Listener
	g *guard
}

// Accept hands the server the connections within MV_HTTP_MAX_CONNECTIONS,
// and answers the others 503 itself.
func (l *guardListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		g := l.g
		g.mu.Lock()
		admitted := g.conns < g.maxConns
		if admitted {
			g.conns++
		}
		g.mu.Unlock()
		if admitted {
			return &guardConn{Conn: c, g: g}, nil
		}
		g.warn("connections", "http source: MV_HTTP_MAX_CONNECTIONS connections are open; answered a new one 503 and closed it",
			"MV_HTTP_MAX_CONNECTIONS", g.maxConns, "remote", c.RemoteAddr().String())
		go func() {
			// Not read from: the answer is short, the close at once, so a
			// flood of connections costs no lingering goroutines.
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(c, answer(http.StatusServiceUnavailable, "Retry-After: 1\r\n",
				fmt.Sprintf("MV_HTTP_MAX_CONNECTIONS=%d connections are open; retry later", g.maxConns)))
			_ = c.Close()
		}()
	}
}

// answer is a whole HTTP/1.1 response that closes the connection.
func answer(status int, extra, text string) string {
	body := `{"error":` + strconv.Quote(text) + "}\n"
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n%sContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), extra, len(body), body)
}

// connState follows the server's view of a connection: an answer is done
// when it turns idle.
func (g *guard) connState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*guardConn)
	if !ok || state != http.StateIdle {
		return
	}
	g.mu.Lock()
	c.answered++
	raw := c.rawAt != 0 && c.answered >= c.rawAt
	g.mu.Unlock()
	if raw {
		// A chunked body's end was not tracked: what follows it on this
		// connection was never checked, so no further request is read.
		_ = c.Close()
	}
}

// guardConn is one connection seen through the guard.
type guardConn struct {
	net.Conn
	g *guard

	// Owned by the goroutine reading (net/http reads one at a time).
	buf     []byte // read from the connection, buf[:pos] handed on
	pos     int
	ready   int   // buf[pos:ready] may be handed on now
	scanned int   // buf[:scanned] holds no head end
	body    int64 // body bytes to pass through before the next head
	err     error // once set, every read returns it

	// Under g.mu.
	held int64 // head budget charged for buf
	// Requests handed on and answered (the server turned the connection
	// idle): a head read in the background while a request is served
	// belongs to the next one, so these are counts, not a flag.
	handed, answered int
	rawAt            int  // the request whose chunked body passes, by count: close after its answer
	gone             bool // closed, its count given back
	leaving          bool // told to give its head budget to others

	kicked atomic.Bool // evicted: its blocked read is being woken
}

// rawBody marks a body whose end is not tracked (chunked).
const rawBody = int64(1<<63 - 1)

// Close gives the connection's count and head budget back.
func (c *guardConn) Close() error {
	g := c.g
	g.mu.Lock()
	if !c.gone {
		c.gone = true
		g.conns--
		g.used -= c.held
		c.held = 0
		delete(g.heads, c)
		g.notify()
	}
	g.mu.Unlock()
	return c.Conn.Close()
}

// Read hands the server what arrived, a request head only once it is
// whole and its framing is clear.
func (c *guardConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if c.err != nil {
			return 0, c.err
		}
		if c.pos < c.ready {
			n := copy(p, c.buf[c.pos:c.ready])
			c.pos += n
			if c.pos == len(c.buf) {
				c.drop()
			}
			return n, nil
		}
		if c.body > 0 {
			if c.pos < len(c.buf) {
				// Read with the head: the body's first bytes.
				n := min(int64(len(c.buf)-c.pos), c.body)
				c.ready = c.pos + int(n)
				if c.body != rawBody {
					c.body -= n
				}
				continue
			}
			if c.body < int64(len(p)) {
				p = p[:c.body]
			}
			n, err := c.Conn.Read(p)
			if c.body != rawBody {
				c.body -= int64(n)
			}
			return n, err
		}
		if err := c.readHead(p); err != nil {
			return 0, err
		}
	}
}

// drop frees the buffer once everything in it was handed on.
func (c *guardConn) drop() {
	c.buf, c.pos, c.ready, c.scanned = nil, 0, 0, 0
	c.release()
}

// readHead reads until buf holds a whole head, then checks its framing
// and marks it ready. scratch is the caller's buffer: an idle connection
// holds no buffer of its own until its next request's first bytes.
func (c *guardConn) readHead(scratch []byte) error {
	if c.pos > 0 {
		n := copy(c.buf, c.buf[c.pos:])
		c.buf, c.pos, c.ready, c.scanned = c.buf[:n], 0, 0, 0
	}
	for {
		if end := headEnd(c.buf, c.scanned); end > 0 {
			return c.frame(end)
		}
		c.scanned = max(0, len(c.buf)-3)
		if len(c.buf) > c.g.maxHead {
			return c.refuse(http.StatusRequestHeaderFieldsTooLarge, "headers", fmt.Sprintf("the request head is above MV_HTTP_MAX_HEADER_BYTES=%d bytes", c.g.maxHead))
		}
		if c.kicked.Load() {
			return c.evicted()
		}
		if c.buf == nil {
			n, err := c.Conn.Read(scratch)
			if n > 0 {
				if err := c.grow(max(headStart, n)); err != nil {
					return err
				}
				c.buf = append(c.buf, scratch[:n]...)
				continue
			}
			return err
		}
		if len(c.buf) == cap(c.buf) {
			if err := c.grow(min(2*cap(c.buf), c.g.maxHead+1)); err != nil {
				return err
			}
		}
		n, err := c.Conn.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		if c.kicked.Load() {
			return c.evicted()
		}
		if err != nil && n == 0 {
			// A timeout keeps what arrived: net/http's aborted
			// background read is followed by a read that goes on.
			return err
		}
	}
}

// grow makes buf's capacity size, charging the head budget. When the
// budget is spent, the connections holding the largest unfinished heads
// are told to leave, and this one waits until they gave their bytes back
// (their buffers gone, not only their share); it is refused itself if it
// holds the most, or if they are not gone within evictWait.
func (c *guardConn) grow(size int) error {
	g := c.g
	n := int64(size - cap(c.buf))
	timer := time.NewTimer(evictWait)
	defer timer.Stop()
	g.mu.Lock()
	for g.used+n > g.headBudget {
		if c.leaving {
			g.mu.Unlock()
			return c.evicted()
		}
		var freeing int64
		var top *guardConn
		for h := range g.heads {
			switch {
			case h.leaving:
				freeing += h.held
			case h != c && (top == nil || h.held > top.held):
				top = h
			}
		}
		if g.used-freeing+n > g.headBudget {
			if top == nil || top.held < c.held+n {
				used := g.used
				g.mu.Unlock()
				return c.refuse(http.StatusRequestHeaderFieldsTooLarge, "head budget",
					fmt.Sprintf("request heads of all connections hold %d bytes, the most they may; this one is the largest", used))
			}
			top.leaving = true
			top.kicked.Store(true)
			// Wakes its blocked read, which then answers and gives its
			// bytes back on its own goroutine.
			_ = top.Conn.SetReadDeadline(time.Now())
			g.notify() // a leaving one may be waiting here itself
			continue
		}
		wait := g.released
		g.mu.Unlock()
		select {
		case <-wait:
		case <-timer.C:
			return c.refuse(http.StatusServiceUnavailable, "head budget",
				"request heads of all connections hold the most they may; retry later")
		}
		g.mu.Lock()
	}
	g.used += n
	c.held += n
	g.heads[c] = struct{}{}
	g.mu.Unlock()
	grown := make([]byte, len(c.buf), size)
	copy(grown, c.buf)
	c.buf = grown
	return nil
}

// evictWait is the longest a head waits for the connections told to leave
// to give their bytes back.
const evictWait = 2 * time.Second

// notify wakes the heads waiting for budget. g.mu is held.
func (g *guard) notify() {
	close(g.released)
	g.released = make(chan struct{})
}

// release gives back the head budget of c's buffer, which is gone.
func (c *guardConn) release() {
	g := c.g
	g.mu.Lock()
	g.used -= c.held
	c.held = 0
	delete(g.heads, c)
	g.notify()
	g.mu.Unlock()
}

// evicted answers a connection whose head budget another one took.
func (c *guardConn) evicted() error {
	return c.refuse(http.StatusRequestHeaderFieldsTooLarge, "evicted",
		"request heads of all connections held the most they may, and this unfinished one was the largest")
}

// headEnd returns the length of the head at the start of b (through its
// blank line), or 0 while it is unfinished; from is where to search from.
// Lines may end in LF alone, as net/http reads them; empty lines before
// the request line belong to the head (net/http drops or refuses them).
func headEnd(b []byte, from int) int {
	start := 0
	for start < len(b) && (b[start] == '\r' || b[start] == '\n') {
		start++
	}
	from = max(from, start)
	for i := from; i < len(b); i++ {
		if b[i] != '\n' || i == start {
			continue
		}
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
	}
	return 0
}

// framing reads the body framing of a whole request head: the body's
// length, rawBody for chunked, or why the framing is ambiguous.
func framing(head []byte) (int64, string) {
	var lengths, codings [][]byte
	var version []byte
	first := true
	for _, line := range bytes.Split(head, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			continue
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			return 0, "a carriage return inside a header line"
		}
		if first {
			first = false
			if i := bytes.LastIndexByte(line, ' '); i >= 0 {
				version = line[i+1:]
			}
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return 0, "a folded header line (RFC 9112 section 5.2)"
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue // net/http refuses it
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			lengths = append(lengths, value)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			codings = append(codings, value)
		}
	}
	body := int64(0)
	switch {
	case len(codings) > 0 && len(lengths) > 0:
		return 0, "the request has both Content-Length and Transfer-Encoding (RFC 9112 section 6.3)"
	case len(codings) > 1 || len(codings) == 1 && !bytes.EqualFold(codings[0], []byte("chunked")):
		return 0, "Transfer-Encoding must be chunked alone"
	case len(codings) == 1 && string(version) != "HTTP/1.1":
		// net/http ignores Transfer-Encoding before HTTP/1.1 and would
		// read the chunks as the next request.
		return 0, "Transfer-Encoding needs HTTP/1.1"
	case len(codings) == 1:
		body = rawBody
	case len(lengths) > 1:
		return 0, "the request has more than one Content-Length"
	case len(lengths) == 1:
		n, err := strconv.ParseInt(string(lengths[0]), 10, 64)
		if err != nil || n < 0 || lengths[0][0] < '0' || lengths[0][0] > '9' {
			return 0, "Content-Length must be a number of bytes"
		}
		body = n
	}
	return body, ""
}

// frame checks the framing of the head buf[:end] and sets how much body
// follows it, or refuses the request.
func (c *guardConn) frame(end int) error {
	body, refusal := framing(c.buf[:end])
	if refusal != "" {
		return c.refuse(http.StatusBadRequest, "framing", refusal)
	}
	g := c.g
	g.mu.Lock()
	if c.leaving {
		// Told to give its bytes to others while its head completed.
		g.mu.Unlock()
		return c.evicted()
	}
	delete(g.heads, c)
	c.handed++
	if body == rawBody {
		c.rawAt = c.handed
	}
	g.mu.Unlock()
	c.ready, c.body = end, body
	return nil
}

// refuse answers status with text itself and closes the connection. A
// request of the connection still being served (a pipelined head read in
// the background) would have its answer interleaved, so then the
// connection is closed without one.
func (c *guardConn) refuse(status int, kind, text string) error {
	c.err = io.EOF
	g := c.g
	g.mu.Lock()
	busy := c.handed > c.answered
	g.mu.Unlock()
	g.warn(kind, "http source: refused a request before reading it", "status", status, "reason", text, "remote", c.RemoteAddr().String())
	// Free the head before lingering: under a flood, many refused
	// connections linger at once, and their heads must not add up.
	c.buf = nil
	c.release()
	if !busy {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := io.WriteString(c.Conn, answer(status, "", text)); err == nil {
			if tc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
				_ = tc.CloseWrite()
			}
			_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
			_, _ = io.Copy(io.Discard, io.LimitReader(c.Conn, 1<<20))
		}
	}
	_ = c.Close()
	return c.err
}
