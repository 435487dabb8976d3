package cewire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// Budget bounds the reply bytes held in memory at once by every call that
// shares it, so concurrent replies cannot add up to more than one limit.
type Budget struct {
	limit int64

	mu             sync.Mutex
	used           int64
	holders        int           // leases that hold bytes
	holdersWaiting int           // leases holding bytes that wait for more
	waiters        int           // acquires waiting on freed
	freed          chan struct{} // closed and replaced when bytes are released or a holder stops waiting, if anyone waits
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, freed: make(chan struct{})}
}

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used is the number of bytes held right now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// ErrBudgetExceeded means one reply needs more than the whole budget: it can
// never be read, however long it waits.
var ErrBudgetExceeded = errors.New("reply needs more memory than the whole reply budget")

// ErrBudgetBusy means the bytes a reply needs were held by other replies
// for longer than a reply that already holds bytes may wait; retrying later
// can succeed.
var ErrBudgetBusy = errors.New("reply budget held by other replies")

// errDeadlock means every reply holding bytes would wait for more.
var errDeadlock = errors.New("every reply holding part of the budget waits for more")

// acquire takes n bytes, waiting until they are free or ctx ends. A
// caller that holds nothing (holding false) also waits while callers that
// hold bytes wait for more, so freed bytes go to replies already under way
// before new ones start.
func (b *Budget) acquire(ctx context.Context, n int64, holding bool) error {
	if n > b.limit {
		return ErrBudgetExceeded
	}
	waiting := false
	defer func() {
		if waiting {
			b.mu.Lock()
			b.holdersWaiting--
			b.wake()
			b.mu.Unlock()
		}
	}()
	for {
		b.mu.Lock()
		if b.used+n <= b.limit && (holding || b.holdersWaiting == 0) {
			b.used += n
			if !holding {
				b.holders++
			}
			b.mu.Unlock()
			return nil
		}
		if holding && !waiting {
			if b.holdersWaiting+1 >= b.holders {
				// Every other reply that holds bytes waits too: nothing
				// will be freed, so this one gives way at once.
				b.mu.Unlock()
				return errDeadlock
			}
			waiting = true
			b.holdersWaiting++
		}
		freed := b.freed
		b.waiters++
		b.mu.Unlock()
		var err error
		select {
		case <-freed:
		case <-ctx.Done():
			err = ctx.Err()
		}
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// wake lets every waiting acquire look again; with none waiting it does
// nothing, so a release costs no new channel (one allocation per reply).
// The caller holds mu.
func (b *Budget) wake() {
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
}

// release gives n bytes back; emptied says the lease now holds nothing.
func (b *Budget) release(n int64, emptied bool) {
	b.mu.Lock()
	b.used -= n
	if emptied {
		b.holders--
	}
	b.wake()
	b.mu.Unlock()
}

// HeldWait is the longest a reply that already holds bytes waits for more.
// Two replies that each hold part of the budget and wait for the rest would
// otherwise wait for each other until their timeouts; past this wait the
// call fails as a retryable error and frees what it held.
const HeldWait = 2 * time.Second

// Lease is the share of a Budget one reply holds. A nil Lease (no budget)
// grants everything. A Lease is used by one goroutine.
type Lease struct {
	b    *Budget
	held int64
	// prepaid is held but not yet spent: Grow takes from it first.
	prepaid int64
}

// Lease starts an empty lease on b; a nil budget gives a nil lease.
func (b *Budget) Lease() *Lease {
	if b == nil {
		return nil
	}
	return &Lease{b: b}
}

// Grow adds n bytes to the lease, taking what was prepaid first. A lease
// that holds nothing waits as long as ctx allows; one that holds bytes
// waits at most HeldWait, so replies cannot wait for each other for ever.
// A reply larger than the whole budget fails at once with
// ErrBudgetExceeded.
func (l *Lease) Grow(ctx context.Context, n int64) error {
	if l == nil || n <= 0 {
		return nil
	}
	if p := min(n, l.prepaid); p > 0 {
		l.prepaid -= p
		n -= p
		if n == 0 {
			return nil
		}
	}
	if l.held+n > l.b.limit {
		return fmt.Errorf("%w (%d bytes)", ErrBudgetExceeded, l.b.limit)
	}
	wctx := ctx
	if l.held > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, HeldWait)
		defer cancel()
	}
	if err := l.b.acquire(wctx, n, l.held > 0); err != nil {
		switch {
		case errors.Is(err, errDeadlock):
			return fmt.Errorf("%w: %v; this one, holding %d bytes, gives way", ErrBudgetBusy, err, l.held)
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("%w for %v while this reply held %d bytes", ErrBudgetBusy, HeldWait, l.held)
		}
		return err
	}
	l.held += n
	return nil
}

// prepay grows the lease by now+later bytes in one step, later being what
// the next Grow calls take first, so a reply takes what it will need at
// once, while it holds nothing.
func (l *Lease) prepay(ctx context.Context, now, later int64) error {
	if err := l.Grow(ctx, now+later); err != nil {
		return err
	}
	if l != nil {
		l.prepaid += later
	}
	return nil
}

// Shrink gives n bytes back to the budget.
func (l *Lease) Shrink(n int64) {
	if l == nil {
		return
	}
	n = min(n, l.held)
	if n <= 0 {
		return
	}
	l.held -= n
	l.prepaid = min(l.prepaid, l.held)
	l.b.release(n, l.held == 0)
}

// Held is the number of bytes the lease holds.
func (l *Lease) Held() int64 {
	if l == nil {
		return 0
	}
	return l.held
}

// Release gives every byte of the lease back.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.Shrink(l.held)
}

// ErrReplyTooLarge means a reply body is longer than the limit; the body was
// read up to the limit and no further.
var ErrReplyTooLarge = errors.New("reply larger than the limit")

// chunk sizes of readLimited: small replies stay small, large ones are
// charged to the lease in steps of at most maxChunk.
const (
	firstChunk = 4 << 10
	maxChunk   = 1 << 20
)

// readLimited reads r to its end, never more than limit+1 bytes, charging
// every buffer to lease before it is filled. A body longer than limit is
// ErrReplyTooLarge. The chunks are joined at the end, so the peak charge is
// about twice the body; the chunks' charge is given back once joined. On an
// error the caller releases the lease.
//
// A body of known length (contentLength >= 0, at most limit) is charged at
// once, with what decoding it as one event takes, while the lease holds
// nothing, and read into one buffer of that size: no join, and no waiting
// while holding part of the budget. Past payloadpool.MinSize that buffer is
// pooled and returned too, for the caller to release once nothing reads
// the body.
func readLimited(ctx context.Context, r io.Reader, contentLength, limit int64, lease *Lease) ([]byte, *payloadpool.Buffer, error) {
	r = io.LimitReader(r, limit+1)
	if contentLength >= 0 && contentLength <= limit {
		// The body, and the copy of it decoding makes, up front.
		if err := lease.prepay(ctx, contentLength, contentLength+EventOverhead); err != nil {
			return nil, nil, err
		}
		// A large body goes into a pooled buffer, not cleared: every
		// byte is read into it before anything reads it.
		var pooled *payloadpool.Buffer
		var body []byte
		if contentLength > payloadpool.MinSize {
			pooled = payloadpool.Get(int(contentLength))
			body = pooled.B
		} else {
			body = make([]byte, contentLength)
		}
		got, err := io.ReadFull(r, body)
		if err != nil && (err != io.EOF || contentLength > 0) {
			pooled.Release()
			return nil, nil, fmt.Errorf("body shorter than its Content-Length of %d: %d bytes: %w", contentLength, got, err)
		}
		return body, pooled, nil
	}
	var chunks [][]byte
	var total, charged int64
	size := int64(firstChunk)
	for total <= limit {
		n := min(size, limit+1-total)
		if err := lease.Grow(ctx, n); err != nil {
			return nil, nil, err
		}
		charged += n
		c := make([]byte, n)
		got, err := io.ReadFull(r, c)
		chunks = append(chunks, c[:got])
		total += int64(got)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		size = min(size*2, maxChunk)
	}
	if total > limit {
		return nil, nil, fmt.Errorf("%w of %d bytes", ErrReplyTooLarge, limit)
	}
	if len(chunks) == 1 {
		return chunks[0], nil, nil
	}
	if err := lease.Grow(ctx, total); err != nil {
		return nil, nil, err
	}
	body := make([]byte, 0, total)
	for _, c := range chunks {
		body = append(body, c...)
	}
	lease.Shrink(charged)
	return body, nil, nil
}
