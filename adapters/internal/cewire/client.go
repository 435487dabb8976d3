package cewire

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/payloadpool"
	"github.com/monovertex/monovertex/runner"
)

// Client posts events to one URL over kept-alive connections. The CloudEvents
// transformer and sink share it, so both follow the same delivery rules.
type Client struct {
	url      string
	mode     Mode
	timeout  time.Duration
	maxReply int64
	// token: see ClientOptions.Token.
	token TokenSource
	// retryAfterMax: see ClientOptions.RetryAfterMax.
	retryAfterMax time.Duration
	budget        *Budget
	header        http.Header
	http          *http.Client
	// direct, when set, carries the posts instead of http's transport
	// (see direct).
	direct *direct
	// variable names the setting the URL comes from, for the log and
	// for Ready.
	variable string
	// audienceVar and tokenPathVar are ClientOptions'.
	audienceVar, tokenPathVar string
	log                       *zap.SugaredLogger
	// https is set for an https:// URL: its calls trace whether they got
	// a connection, so a handshake that fails or gets no answer is told
	// from a call the peer took.
	https bool
	// away is why the last call that settled it never reached a peer that
	// takes events (nil while the peer answers): see Ready.
	away atomic.Pointer[string]
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// URL is where events are posted.
	URL string
	// Mode is the content mode (binary unless set).
	Mode Mode
	// Timeout bounds each call, reply included; 0 means none.
	Timeout time.Duration
	// Concurrency is how many calls the caller keeps in flight; the
	// transport keeps as many idle connections so none is re-dialled.
	Concurrency int
	// H2C talks HTTP/2 without TLS (prior knowledge) to http:// URLs.
	H2C bool
	// MaxReply bounds the reply body that is read; a larger one is an error
	// (ErrReplyTooLarge) and is read no further than MaxReply+1 bytes.
	MaxReply int64
	// Budget, when set, bounds the reply bytes held at once by every call
	// of every client that shares it; Response.Lease holds a reply's share.
	Budget *Budget
	// Header is added to every request (such as Prefer: reply).
	Header http.Header
	// Connection takes every dial's outcome for the monovtx_connection_*
	// metrics (an HTTP peer's connections are pooled, so up and failed are
	// what a client can tell; a pooled connection's loss is not); nil
	// reports nothing.
	Connection runner.Connection
	// RetryAfterMax bounds the wait a 429 or 503 answer's Retry-After
	// asks for before the message's retry (Knative's retryAfterMax); 0
	// ignores Retry-After, as Knative's PT0S does.
	RetryAfterMax time.Duration
	// Trust, when set, is what https:// receivers are verified against
	// (K_CA_CERTS and the system's CAs); nil: the system's.
	Trust *Trust
	// Token, when set, gives the OIDC token sent as Authorization: Bearer
	// with every request (Knative Eventing's authentication-oidc).
	Token TokenSource
	// Variable names the setting URL comes from (MV_TRANSFORMER_URL,
	// K_SINK, ...), for the log line that says the peer is away.
	Variable string
	// AudienceVar and TokenPathVar name the settings of the URL's OIDC
	// audience and token file, for the hint of a 401 answer: K_AUDIENCE
	// and MV_OIDC_TOKEN_PATH when empty.
	AudienceVar, TokenPathVar string
	// Log takes that line; nil logs nothing.
	Log *zap.SugaredLogger
}

// NewClient builds a Client with a transport tuned for many small calls to
// one host.
func NewClient(o ClientOptions) *Client {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.MaxReply <= 0 {
		o.MaxReply = 64 << 20
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if conn := o.Connection; conn != nil {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				conn.Failed(err)
			} else {
				conn.Up()
			}
			return c, err
		}
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dial,
		MaxIdleConns:          o.Concurrency * 2,
		MaxIdleConnsPerHost:   o.Concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Payloads are often already compressed; never pay to gunzip replies.
		DisableCompression: true,
	}
	if o.Trust != nil {
		tr.TLSClientConfig = o.Trust.TLSConfig()
		// A TLSClientConfig of its own turns net/http's HTTP/2 off unless
		// asked for; keep what an https:// receiver got without one.
		tr.ForceAttemptHTTP2 = true
	}
	if o.H2C {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	var d *direct
	if !o.H2C {
		d = newDirect(o.URL, dial, o.Concurrency)
	}
	if o.Log == nil {
		o.Log = zap.NewNop().Sugar()
	}
	if o.Variable == "" {
		o.Variable = "URL"
	}
	if o.AudienceVar == "" {
		o.AudienceVar = "K_AUDIENCE"
	}
	if o.TokenPathVar == "" {
		o.TokenPathVar = "MV_OIDC_TOKEN_PATH"
	}
	return &Client{
		url: o.URL, mode: o.Mode, timeout: o.Timeout, maxReply: o.MaxReply, retryAfterMax: o.RetryAfterMax, token: o.Token, budget: o.Budget, header: o.Header, direct: d,
		variable: o.Variable, audienceVar: o.AudienceVar, tokenPathVar: o.TokenPathVar, log: o.Log, https: strings.HasPrefix(strings.ToLower(o.URL), "https://"),
		http: &http.Client{
			Transport: tr,
			// A redirect is a 3xx answer, which Knative's rules do not retry;
			// following it would hide a misconfigured URL.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// URL is where the client posts.
func (c *Client) URL() string { return c.url }

// Response is an answer whose body was read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Lease holds the body's share of the client's Budget (nil without
	// one); the caller charges what it decodes to it and releases it once
	// done with the reply.
	Lease *Lease
	// Buf is the pooled buffer a large body was read into (nil otherwise),
	// for the caller to release once nothing reads the body or what was
	// decoded from it without a copy.
	Buf *payloadpool.Buffer
}

// Post sends ev and reads the answer. With readBody false, or for an answer
// outside 2xx, the body is discarded (up to a bound, so the connection can
// be reused) but for its start. A transport
// failure is a *TransportError; any HTTP answer, whatever its status, is a
// Response.
func (c *Client) Post(ctx context.Context, ev *event.Event, readBody bool) (*Response, error) {
	var bodies bodyWatch
	resp, err := c.post(ctx, ev, readBody, &bodies)
	if werr := bodies.wait(bodyCloseWait); werr != nil && err == nil {
		resp.Lease.Release()
		resp.Buf.Release()
		return nil, &TransportError{URL: c.url, Err: werr}
	}
	return resp, err
}

// bodyCloseWait bounds how long Post waits, after the answer, for the
// transport to close the request body. net/http may go on writing a body
// after an early answer (for at most 50 ms before it drops the
// connection, in Go's HTTP/1 transport); until it closes the body, the
// event's data (a message's payload, which the engine may reuse once the
// call returned) may still be read.
const bodyCloseWait = 10 * time.Second

// bodyWatch counts the request bodies the transport has not closed yet:
// the one Post sets, and any GetBody makes for a retry once it is read
// (the client makes one for a 307 or 308 before it learns it will not
// follow the redirect, and never closes it).
type bodyWatch struct {
	open atomic.Int32
	mu   sync.Mutex
	done chan struct{} // made by a waiter, closed when open reaches 0
}

// watch wraps the body of req, and any body its GetBody makes.
func (w *bodyWatch) watch(req *http.Request) {
	if req.Body == nil || req.Body == http.NoBody {
		return
	}
	w.open.Add(1)
	body := &watchedBody{ReadCloser: req.Body, w: w}
	body.state.Store(bodyOpen)
	req.Body = body
	if get := req.GetBody; get != nil {
		req.GetBody = func() (io.ReadCloser, error) {
			rc, err := get()
			if err != nil || rc == nil || rc == http.NoBody {
				return rc, err
			}
			return &watchedBody{ReadCloser: rc, w: w}, nil
		}
	}
}

func (w *bodyWatch) closed() {
	if w.open.Add(-1) != 0 {
		return
	}
	w.mu.Lock()
	if w.done != nil {
		close(w.done)
		w.done = nil
	}
	w.mu.Unlock()
}

// wait returns once every watched body is closed, or an error after d.
func (w *bodyWatch) wait(d time.Duration) error {
	if w.open.Load() == 0 {
		return nil
	}
	w.mu.Lock()
	if w.open.Load() == 0 {
		w.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	w.done = done
	w.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("the request body was still being sent %v after the answer", d)
	}
}

// States of a watchedBody.
const (
	bodyUnread int32 = iota // not counted yet (made by GetBody, never read)
	bodyOpen                // counted in open
	bodyClosed
)

// watchedBody is a request body whose Close returns only once no Read is
// under way, and after which Read reads nothing: HTTP/2's transport closes
// a body from a goroutine of its own while another may be reading it
// (clientStream.closeReqBodyLocked), and the watch must not report the
// event's data free while a Read still copies from it.
type watchedBody struct {
	io.ReadCloser
	w *bodyWatch
	// mu is held across each Read and Close; the underlying reader is the
	// event's data in memory, so a Read never blocks for long.
	mu    sync.Mutex
	state atomic.Int32
}

// errBodyClosed is what a Read after Close returns.
var errBodyClosed = errors.New("cewire: request body read after the transport closed it")

func (b *watchedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state.Load() {
	case bodyClosed:
		return 0, errBodyClosed
	case bodyUnread:
		b.state.Store(bodyOpen)
		b.w.open.Add(1)
	}
	return b.ReadCloser.Read(p)
}

func (b *watchedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.ReadCloser.Close()
	if b.state.Swap(bodyClosed) == bodyOpen {
		b.w.closed()
	}
	return err
}

func (c *Client) post(ctx context.Context, ev *event.Event, readBody bool, bodies *bodyWatch) (*Response, error) {
	caller := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var conn *connTrace
	if c.https {
		conn = &connTrace{}
		ctx = httptrace.WithClientTrace(ctx, conn.trace())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("build request to %s: %w", c.url, err)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.token != nil {
		tok, err := c.token.Token(ctx)
		if err != nil {
			reason := "cannot get its OIDC token: " + err.Error()
			if caller.Err() == nil {
				c.markAway(reason)
			}
			return nil, &TransportError{URL: c.url, Err: err, away: reason}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if err := WriteRequest(ctx, req, ev, c.mode); err != nil {
		return nil, err
	}
	traceHeaders(req.Header, ev)
	var resp *http.Response
	if c.direct != nil {
		// do returns only once nothing reads the body (a small one is
		// written whole before the answer is read; a larger one, or one of
		// unknown length, is written aside and waited for): it needs
		// neither a copy nor a watch.
		hasBody := req.Body != nil && req.Body != http.NoBody
		resp, err = c.direct.do(ctx, req, hasBody && (req.ContentLength <= 0 || req.ContentLength > smallBody))
	} else {
		var owned bool
		if owned, err = ownSmallBody(req); err != nil {
			return nil, err
		}
		if !owned {
			bodies.watch(req)
		}
		resp, err = c.http.Do(req)
	}
	if err != nil {
		te := &TransportError{URL: c.url, Err: err, away: conn.reason(err)}
		// A call its caller gave up on (a shutdown) says nothing of the
		// peer.
		if reason := te.awayReason(); reason != "" && caller.Err() == nil {
			c.markAway(reason)
		}
		return nil, te
	}
	if reason := c.authRefusal(resp.StatusCode); reason != "" {
		c.markAway(reason)
	} else {
		c.markBack()
	}
	defer resp.Body.Close()
	out := &Response{Status: resp.StatusCode, Header: resp.Header}
	if !readBody || resp.StatusCode < 200 || resp.StatusCode > 299 {
		// An answer outside 2xx is never a reply: only its start is read.
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			// Keep the start of an error body for the error message
			// and for a dead letter's knativeerrordata.
			out.Body, _ = io.ReadAll(io.LimitReader(resp.Body, ErrorBodyKept))
		}
		// Drain a little more so the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return out, nil
	}
	if resp.ContentLength > c.maxReply {
		// Closing the body unread drops the connection: nothing of the
		// reply is read.
		return nil, fmt.Errorf("reply from %s announces %d bytes: %w of %d bytes (MV_TRANSFORMER_MAX_REPLY)", c.url, resp.ContentLength, ErrReplyTooLarge, c.maxReply)
	}
	lease := c.budget.Lease()
	body, pooled, err := readLimited(ctx, resp.Body, resp.ContentLength, c.maxReply, lease)
	if err != nil {
		lease.Release()
		switch {
		case errors.Is(err, ErrReplyTooLarge):
			return nil, fmt.Errorf("reply from %s: %w (MV_TRANSFORMER_MAX_REPLY)", c.url, err)
		case errors.Is(err, ErrBudgetExceeded):
			return nil, fmt.Errorf("reply from %s: %w", c.url, err)
		}
		return nil, &TransportError{URL: c.url, Err: fmt.Errorf("read reply: %w", err)}
	}
	out.Body, out.Buf = body, pooled
	out.Lease = lease
	return out, nil
}

// smallBody is the largest request body net/http's transport sends from
// a copy instead of from the event's data under a bodyWatch: copying it
// costs less than the second write system call net/http makes for a body
// it does not know to be in memory (it flushes the headers first), which
// for 1 KiB events was a quarter of the runner's write path. The direct
// path writes a body up to this size before it reads the answer.
const smallBody = 16 << 10

// ownSmallBody gives req a copy of a body of at most smallBody bytes, in a
// form net/http sends with its headers in one write, and reports whether
// it did. Then nothing of the event's data (a message's payload, which the
// engine may reuse once the call returned) is read after Post returns, and
// the body needs no watch.
func ownSmallBody(req *http.Request) (owned bool, err error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.ContentLength > smallBody {
		return false, nil
	}
	body := make([]byte, req.ContentLength)
	_, err = io.ReadFull(req.Body, body)
	req.Body.Close()
	if err != nil {
		return false, fmt.Errorf("copy the request body: %w", err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return true, nil
}

// CloseIdle closes kept-alive connections.
func (c *Client) CloseIdle() {
	c.http.CloseIdleConnections()
	if c.direct != nil {
		c.direct.closeIdle()
	}
}

// TransportError is a call that got no HTTP answer: refused, reset, timed out.
type TransportError struct {
	URL string
	Err error
	// away, when set, says why the call got no connection (a TLS
	// handshake that failed or got no answer), which Err alone may not
	// tell: a call's timeout during the handshake is a bare deadline.
	away string
}

// Error says where the post failed and why.
func (e *TransportError) Error() string { return fmt.Sprintf("post to %s: %v", e.URL, e.Err) }

// Unwrap returns the transport's error.
func (e *TransportError) Unwrap() error { return e.Err }

// Unreachable reports whether the call never reached a peer that takes
// events (the dial failed, or what answered the TLS handshake is no TLS
// server or not one the runner trusts): the whole peer is away or
// misconfigured, not this message's fault.
func (e *TransportError) Unreachable() bool { return e.awayReason() != "" }

func (e *TransportError) awayReason() string {
	if e.away != "" {
		return e.away
	}
	return awayReason(e.Err)
}

// connTrace follows one call's connection: whether it got one, and how
// its TLS handshake went. The transport may call it from its own
// goroutines, also after the call returned (a dial outlives its call).
type connTrace struct {
	mu                     sync.Mutex
	got, tlsStart, tlsDone bool
	tlsErr                 error
}

func (t *connTrace) trace() *httptrace.ClientTrace {
	set := func(f func()) { t.mu.Lock(); f(); t.mu.Unlock() }
	return &httptrace.ClientTrace{
		GotConn:           func(httptrace.GotConnInfo) { set(func() { t.got = true }) },
		TLSHandshakeStart: func() { set(func() { t.tlsStart = true }) },
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			set(func() { t.tlsDone, t.tlsErr = true, err })
		},
	}
}

// reason says why a call that failed with err got no connection because
// of its TLS handshake, or "" (no trace, a connection, or no handshake).
func (t *connTrace) reason(err error) string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.got || !t.tlsStart:
		return ""
	case t.tlsDone && t.tlsErr != nil:
		if r := awayReason(t.tlsErr); r != "" {
			return r
		}
		return "the TLS handshake failed: " + t.tlsErr.Error()
	case !t.tlsDone:
		// A plain HTTP server reads the handshake as the start of a
		// request line and may wait for its end instead of answering.
		return fmt.Sprintf("the server did not answer the TLS handshake (%v): it may speak plain HTTP (use http://, or serve TLS there)", err)
	}
	return ""
}

// awayReason says why err means the call never reached a peer that takes
// events, in words for the log, or "" when it does not mean that.
func awayReason(err error) string {
	var op *net.OpError
	var header tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &header):
		// Go's TLS client reads the first five bytes of the answer as a
		// record header; a plain HTTP server answers the handshake with
		// its 400 status line.
		if bytes.HasPrefix(header.RecordHeader[:], []byte("HTTP/")) {
			return "the server answered plain HTTP to a TLS handshake (use http://, or serve TLS there)"
		}
		return fmt.Sprintf("the server's answer to a TLS handshake is not TLS (it began %q)", header.RecordHeader[:])
	case errors.As(err, &verify):
		return "its TLS certificate is not trusted: " + verify.Err.Error()
	case errors.As(err, &op) && op.Op == "dial":
		return "cannot connect: " + op.Err.Error()
	}
	return ""
}

// authRefusal says, for a 401 or 403 answer, why the receiver refuses the
// runner (Knative's OIDC verifier answers 401 to a missing or invalid
// token, 403 to a subject no EventPolicy allows: pkg/auth/verifier.go),
// and what to set; "" for any other status.
func (c *Client) authRefusal(status int) string {
	audience, path := c.audienceVar, c.tokenPathVar
	switch status {
	case http.StatusUnauthorized:
		if c.token == nil {
			return "answered 401 Unauthorized: it takes only events with an OIDC token, and the runner sends none (set " + audience + " to its audience with K_OIDC_SERVICE_ACCOUNT, or mount a token for it at " + path + ")"
		}
		return "answered 401 Unauthorized: it refused the runner's OIDC token (is " + audience + " its audience, status.address.audience, and the token current?)"
	case http.StatusForbidden:
		return "answered 403 Forbidden: it does not let the runner's identity send (an EventPolicy must name the runner's service account, and its filters take the events)"
	}
	return ""
}

// markAway records that calls do not reach the peer, and says so in the
// log once until the peer answers again (the reason may differ from call
// to call: a plain HTTP server answers some handshakes and waits on
// others).
func (c *Client) markAway(reason string) {
	if old := c.away.Swap(&reason); old == nil {
		c.log.Warnw(fmt.Sprintf("%s %s: %s; its messages are held and retried, and /readyz answers 503 until it answers", c.variable, c.url, reason))
	}
}

// markBack records an HTTP answer from the peer.
func (c *Client) markBack() {
	if c.away.Load() != nil && c.away.Swap(nil) != nil {
		c.log.Infow(fmt.Sprintf("%s %s answers again", c.variable, c.url))
	}
}

// Ready is nil unless the last call that settled it never reached a peer
// that takes events; then it says why, naming the setting.
func (c *Client) Ready(context.Context) error {
	if r := c.away.Load(); r != nil {
		return fmt.Errorf("%s %s: %s", c.variable, c.url, *r)
	}
	return nil
}

// IsUnreachable reports whether err is a TransportError whose dial failed.
func IsUnreachable(err error) bool {
	var te *TransportError
	return errors.As(err, &te) && te.Unreachable()
}

// StatusError is an answer outside 2xx.
type StatusError struct {
	URL    string
	Status int
	// Body is the start of the answer's body as text, for the message.
	Body string
	// Raw is the start of the body as it came (ErrorBodyKept bytes at
	// most), for a dead letter's knativeerrordata.
	Raw []byte
	// RetryAfter is what a 429 or 503 answer's Retry-After header asks
	// for (0 when it asks nothing), not yet bounded.
	RetryAfter time.Duration
}

// Error names the URL, the status and the start of the body.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s answered %d %s", e.URL, e.Status, http.StatusText(e.Status))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// NewStatusError describes a non-2xx response, quoting the start of its body.
func NewStatusError(url string, r *Response) *StatusError {
	b := r.Body
	if len(b) > 200 {
		b = b[:200]
	}
	return &StatusError{URL: url, Status: r.Status, Body: strings.TrimSpace(string(bytes.ToValidUTF8(b, []byte("?")))), Raw: r.Body}
}

// PostError marks an error of Post for the engine: a call that never
// reached a peer that takes events (Unreachable) is runner.Unavailable (the
// peer is away or misconfigured, which says nothing about the message:
// retried without spending MV_RETRY_* steps), another transport
// error is retried as it is, and anything else (an event that cannot be
// sent, a reply above its limits) is runner.Permanent.
func PostError(err error) error {
	var te *TransportError
	switch {
	case IsUnreachable(err):
		return runner.Unavailable(err)
	case errors.As(err, &te):
		return err
	}
	return runner.Permanent(err)
}

// CheckStatus is nil for a 2xx answer and otherwise a *StatusError:
// retried when Knative's delivery rules retry the status, else
// runner.Permanent.
func (c *Client) CheckStatus(r *Response) error {
	switch {
	case r.Status >= 200 && r.Status <= 299:
		return nil
	case r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden:
		// The receiver refuses the runner, not the message: held like an
		// unreachable peer (see authRefusal), never dropped or sent to the
		// fallback sink for it.
		return runner.Unavailable(NewStatusError(c.url, r))
	case RetryableStatus(r.Status):
		se := NewStatusError(c.url, r)
		if r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable {
			se.RetryAfter = parseRetryAfter(r.Header.Get("Retry-After"), time.Now())
			return runner.RetryAfter(se, min(se.RetryAfter, c.retryAfterMax))
		}
		return se
	}
	return runner.Permanent(NewStatusError(c.url, r))
}

// parseRetryAfter reads a Retry-After header as Knative's dispatcher
// does (parseRetryAfterDuration in pkg/kncloudevents/retries.go):
// delay-seconds or an HTTP-date; 0 when absent, unreadable or past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		// Beyond this a wait in seconds would overflow a Duration; no
		// bound a user sets comes near it.
		const most = int64(math.MaxInt64 / int64(time.Second))
		return time.Duration(min(n, most)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// RetryableStatus reports whether Knative's delivery rules retry a status:
// 5xx, 404 (endpoint not ready yet), 408, 409 and 429.
func RetryableStatus(code int) bool {
	return code >= 500 || code == http.StatusNotFound || code == http.StatusRequestTimeout ||
		code == http.StatusConflict || code == http.StatusTooManyRequests
}

// traceHeaders sets the W3C traceparent and tracestate headers from the
// event's distributed-tracing extension, so the receiver's HTTP
// instrumentation (which reads the headers, not the extension, and sees
// ce-traceparent only in binary mode) continues the message's trace.
func traceHeaders(h http.Header, ev *event.Event) {
	ext := extensions(ev)
	if tp, ok := ext[runner.TraceParentHeader].(string); ok && tp != "" {
		h.Set(runner.TraceParentHeader, tp)
		if ts, ok := ext[runner.TraceStateHeader].(string); ok && ts != "" {
			h.Set(runner.TraceStateHeader, ts)
		}
	}
}
