package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publisher publishes messages with a reply subject of its own and matches
// the stream's acks to them: what nats.go's PublishMsgAsync does, with one
// map entry, timer and channel per Write instead of per message, and the
// common ack parsed without reflection (both were a quarter of the runner's
// CPU at 1 KiB). It keeps nats.go's limits: at most max publishes await
// their ack (more wait up to timeout for room), an ack not in within
// timeout fails its message, a reconnect fails every publish awaiting its
// ack, and an ack is an error unless the stream named itself in it.
type publisher struct {
	nc      *nats.Conn
	prefix  string // the reply subjects' prefix: <inbox prefix>.<random>.
	sub     *nats.Subscription
	timeout time.Duration
	max     int

	mu      sync.Mutex
	next    uint64
	writes  map[uint64]*pubWrite
	pending int           // published, awaiting their ack
	room    chan struct{} // closed when pending drops below max, for writers waiting for room
	idle    chan struct{} // closed when pending reaches 0, for Close
	closed  bool
	status  chan nats.Status // the connection's state changes, until drain
}

// pubWrite is one Write's publishes: the state of each message, and how
// many of those published still await their ack.
type pubWrite struct {
	errs      []error
	state     []pubState
	left      int
	published bool          // every message was published or failed
	done      chan struct{} // closed when published and left is 0
}

type pubState uint8

const (
	pubUnsent pubState = iota
	pubWaiting
	pubAcked
	pubFailed
)

// Errors a publish fails with besides the stream's own.
var (
	errAckTimeout   = errors.New("no ack from the stream within MV_JETSTREAM_PUBLISH_TIMEOUT")
	errNoResponders = errors.New("no stream captures the subject (the server answered no responders)")
	errInvalidAck   = errors.New("invalid JetStream publish ack")
	errStalled      = errors.New("MV_JETSTREAM_PUBLISH_MAX_PENDING publishes awaited their ack for MV_JETSTREAM_PUBLISH_TIMEOUT")
	errClosed       = errors.New("sink closed")
)

// maxAckSize bounds an ack body that is decoded as JSON: a stream's ack is
// about 100 bytes, its error under 1 KiB.
const maxAckSize = 16 << 10

// newPublisher subscribes to reply subjects under a new inbox of nc (its
// inbox prefix and a random token).
func newPublisher(nc *nats.Conn, max int, timeout time.Duration) (*publisher, error) {
	p := &publisher{nc: nc, prefix: nc.NewInbox() + ".", timeout: timeout, max: max, writes: map[uint64]*pubWrite{}}
	// nats.go's default pending limits for the subscription (512k acks,
	// 64 MiB) are far above max acks awaited: a peer flooding the inbox is
	// dropped there, and a legitimate ack never is.
	sub, err := nc.Subscribe(p.prefix+"*.*", p.onAck)
	if err != nil {
		return nil, fmt.Errorf("subscribe to publish acks: %w", err)
	}
	p.sub = sub
	status := nc.StatusChanged(nats.RECONNECTING, nats.CLOSED)
	p.status = status
	go func() {
		for s := range status {
			// The connection that carried the publishes is gone: their
			// acks may never come. A retry is deduplicated by Nats-Msg-Id.
			p.failAll(nats.ErrDisconnected)
			if s == nats.CLOSED {
				return
			}
		}
	}()
	return p, nil
}

// noRespondersRetries and noRespondersWait are nats.go's
// DefaultPubRetryAttempts and DefaultPubRetryWait: a stream whose leader
// is being elected answers "no responders" for a moment.
const (
	noRespondersRetries = 2
	noRespondersWait    = 250 * time.Millisecond
)

// publish publishes msgs and waits for their acks, for timeout at most,
// and publishes again, twice at most, those answered "no responders". It
// returns each message's error, nil for one the stream stored.
func (p *publisher) publish(ctx context.Context, msgs []*nats.Msg) []error {
	errs := p.publishOnce(ctx, msgs)
	for range noRespondersRetries {
		var again []int
		for i, err := range errs {
			if errors.Is(err, errNoResponders) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		t := time.NewTimer(noRespondersWait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errs
		}
		retry := make([]*nats.Msg, len(again))
		for j, i := range again {
			retry[j] = msgs[i]
		}
		for j, err := range p.publishOnce(ctx, retry) {
			errs[again[j]] = err
		}
	}
	return errs
}

// publishOnce publishes msgs and waits for their acks, for timeout at most.
func (p *publisher) publishOnce(ctx context.Context, msgs []*nats.Msg) []error {
	w := &pubWrite{errs: make([]error, len(msgs)), state: make([]pubState, len(msgs)), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		for i := range w.errs {
			w.errs[i] = errClosed
		}
		return w.errs
	}
	id := p.next
	p.next++
	p.writes[id] = w
	p.mu.Unlock()

	// Every reply subject of the write in one string: <prefix><id>.<i>.
	var sb strings.Builder
	head := p.prefix + strconv.FormatUint(id, 36) + "."
	sb.Grow(len(msgs) * (len(head) + 6))
	ends := make([]int, len(msgs))
	for i := range msgs {
		sb.WriteString(head)
		sb.WriteString(strconv.Itoa(i))
		ends[i] = sb.Len()
	}
	replies := sb.String()

	var stop error // why the rest of the messages are not published
	for i := 0; i < len(msgs); {
		n, err := p.reserve(ctx, w, i, len(msgs)-i)
		if err != nil {
			stop = err
			break
		}
		for ; n > 0; n, i = n-1, i+1 {
			start := 0
			if i > 0 {
				start = ends[i-1]
			}
			m := msgs[i]
			m.Reply = replies[start:ends[i]]
			if err := p.nc.PublishMsg(m); err != nil {
				p.settle(w, i, err)
			}
		}
	}
	p.mu.Lock()
	for i, s := range w.state {
		if s == pubUnsent {
			w.state[i], w.errs[i] = pubFailed, stop
		}
	}
	w.published = true
	if w.left == 0 {
		close(w.done)
	}
	p.mu.Unlock()
	// Each ack has the whole timeout from the last publish, however long
	// the write waited for room.
	deadline := time.NewTimer(p.timeout)
	defer deadline.Stop()

	var why error
	select {
	case <-w.done:
	case <-deadline.C:
		why = errAckTimeout
	case <-ctx.Done():
		why = ctx.Err()
	}
	p.mu.Lock()
	delete(p.writes, id)
	if why != nil {
		for i, s := range w.state {
			if s == pubWaiting {
				w.state[i], w.errs[i] = pubFailed, why
				p.release()
			}
		}
		w.left = 0
	}
	p.mu.Unlock()
	return w.errs
}

// reserve waits for room for up to n more publishes of w, starting at
// message from, and marks that many waiting. It returns how many. Room
// that does not come within the publish timeout fails the rest.
func (p *publisher) reserve(ctx context.Context, w *pubWrite, from, n int) (int, error) {
	var stall *time.Timer
	defer func() {
		if stall != nil {
			stall.Stop()
		}
	}()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return 0, errClosed
		}
		if free := p.max - p.pending; free > 0 {
			n = min(n, free)
			p.pending += n
			w.left += n
			for i := from; i < from+n; i++ {
				w.state[i] = pubWaiting
			}
			p.mu.Unlock()
			return n, nil
		}
		if p.room == nil {
			p.room = make(chan struct{})
		}
		room := p.room
		p.mu.Unlock()
		if stall == nil {
			stall = time.NewTimer(p.timeout)
		}
		select {
		case <-room:
		case <-stall.C:
			return 0, errStalled
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// release gives back one publish's room; p.mu is held.
func (p *publisher) release() {
	p.pending--
	if p.room != nil && p.pending < p.max {
		close(p.room)
		p.room = nil
	}
	if p.idle != nil && p.pending == 0 {
		close(p.idle)
		p.idle = nil
	}
}

// settle records the outcome of message i of w, unless it has one.
func (p *publisher) settle(w *pubWrite, i int, err error) {
	p.mu.Lock()
	p.settleLocked(w, i, err)
	p.mu.Unlock()
}

func (p *publisher) settleLocked(w *pubWrite, i int, err error) {
	if w.state[i] != pubWaiting {
		return // answered twice, or after its write gave up on it
	}
	if err != nil {
		w.state[i], w.errs[i] = pubFailed, err
	} else {
		w.state[i] = pubAcked
	}
	w.left--
	p.release()
	if w.published && w.left == 0 {
		close(w.done)
	}
}

// onAck takes a message on a reply subject: <prefix><write>.<index>.
// Anything that names no publish awaiting its ack is dropped.
func (p *publisher) onAck(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, p.prefix)
	if !ok {
		return
	}
	ws, is, ok := strings.Cut(rest, ".")
	if !ok {
		return
	}
	id, err1 := strconv.ParseUint(ws, 36, 64)
	i, err2 := strconv.Atoi(is)
	if err1 != nil || err2 != nil || i < 0 {
		return
	}
	err := ackError(m)
	p.mu.Lock()
	if w := p.writes[id]; w != nil && i < len(w.state) {
		p.settleLocked(w, i, err)
	}
	p.mu.Unlock()
}

// failAll fails every publish awaiting its ack with err.
func (p *publisher) failAll(err error) {
	p.mu.Lock()
	for _, w := range p.writes {
		for i := range w.state {
			p.settleLocked(w, i, err)
		}
	}
	p.mu.Unlock()
}

// drain waits, bounded by ctx, until no publish awaits its ack, then stops
// taking new ones and unsubscribes.
func (p *publisher) drain(ctx context.Context) error {
	p.mu.Lock()
	var idle chan struct{}
	if p.pending > 0 {
		if p.idle == nil {
			p.idle = make(chan struct{})
		}
		idle = p.idle
	}
	p.mu.Unlock()
	var err error
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			p.mu.Lock()
			err = fmt.Errorf("%d publishes unacknowledged at close: %w", p.pending, ctx.Err())
			p.mu.Unlock()
		}
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.failAll(errClosed)
	_ = p.sub.Unsubscribe()
	p.nc.RemoveStatusListener(p.status) // closes it: the listener ends
	return err
}

// ackError returns nil for an ack that stored the message (or found it
// stored: a duplicate), else why it was not.
func ackError(m *nats.Msg) error {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return errNoResponders
		}
		return fmt.Errorf("%w: empty, status %q", errInvalidAck, m.Header.Get("Status"))
	}
	if plainPubAck(m.Data) {
		return nil
	}
	if len(m.Data) > maxAckSize {
		return fmt.Errorf("%w: %d bytes", errInvalidAck, len(m.Data))
	}
	// The fields of nats.go's PubAck that can be checked: a seq or
	// duplicate of the wrong type makes the ack invalid, as there.
	var pa struct {
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
		Domain    string              `json:"domain"`
		Error     *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &pa); err != nil {
		return fmt.Errorf("%w: %v", errInvalidAck, err)
	}
	if pa.Error != nil {
		return pa.Error
	}
	if pa.Stream == "" {
		return fmt.Errorf("%w: names no stream", errInvalidAck)
	}
	return nil
}

// plainPubAck reports whether b is exactly the ack a stream sends for a
// stored message, {"stream":"NAME","seq":N} with ,"duplicate":true before
// the brace for one it already had. Anything else (a domain, an error,
// spaces) goes to encoding/json: this is the fast path, not a parser.
func plainPubAck(b []byte) bool {
	rest, ok := bytes.CutPrefix(b, []byte(`{"stream":"`))
	if !ok {
		return false
	}
	q := bytes.IndexByte(rest, '"')
	if q <= 0 {
		return false
	}
	for _, c := range rest[:q] {
		// A stream name is printable ASCII without escapes.
		if c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	rest, ok = bytes.CutPrefix(rest[q+1:], []byte(`,"seq":`))
	if !ok {
		return false
	}
	d := 0
	for d < len(rest) && rest[d] >= '0' && rest[d] <= '9' {
		d++
	}
	if d == 0 || (d > 1 && rest[0] == '0') {
		return false
	}
	if d > 20 || (d == 20 && string(rest[:d]) > "18446744073709551615") {
		return false // not a uint64: encoding/json refuses it
	}
	rest = rest[d:]
	return string(rest) == "}" || string(rest) == `,"duplicate":true}`
}
