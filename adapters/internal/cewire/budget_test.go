package cewire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// endless is a reply body that never ends, counting what was read of it.
type endless struct{ read int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.read += int64(len(p))
	return len(p), nil
}

func TestReadLimitedNeverReadsPastTheLimit(t *testing.T) {
	cases := []struct {
		name  string
		size  int64 // -1: endless
		limit int64
		err   error
	}{
		{"empty", 0, 10, nil},
		{"below the limit", 9, 10, nil},
		{"exactly the limit", 10, 10, nil},
		{"one byte over", 11, 10, ErrReplyTooLarge},
		{"several chunks", 3 << 20, 4 << 20, nil},
		{"endless, small limit", -1, 1000, ErrReplyTooLarge},
		{"endless, limit of many chunks", -1, 5 << 20, ErrReplyTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := NewBudget(3*c.limit + 1)
			lease := b.Lease()
			var r io.Reader
			src := &endless{}
			if c.size >= 0 {
				r = io.LimitReader(src, c.size)
			} else {
				r = src
			}
			body, _, err := readLimited(context.Background(), r, -1, c.limit, lease)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if src.read > c.limit+1 {
				t.Fatalf("read %d bytes of a body with a limit of %d", src.read, c.limit)
			}
			if err == nil {
				if int64(len(body)) != c.size {
					t.Fatalf("body of %d bytes, want %d", len(body), c.size)
				}
				if lease.Held() < int64(len(body)) {
					t.Fatalf("lease holds %d bytes for a body of %d", lease.Held(), len(body))
				}
			}
			lease.Release()
			if b.Used() != 0 {
				t.Fatalf("budget still holds %d bytes after release", b.Used())
			}
		})
	}
}

func TestReadLimitedWithAContentLengthChargesItOnce(t *testing.T) {
	b := NewBudget(2000)
	l := b.Lease()
	body, _, err := readLimited(context.Background(), strings.NewReader("hello"), 5, 10, l)
	// The body and the copy decoding it as one event makes.
	if err != nil || string(body) != "hello" || l.Held() != 2*5+EventOverhead {
		t.Fatalf("body %q, err %v, held %d", body, err, l.Held())
	}
	l.Release()
	if _, _, err := readLimited(context.Background(), strings.NewReader("hel"), 5, 10, b.Lease()); err == nil {
		t.Fatal("a body shorter than its Content-Length was accepted")
	}
}

func TestLeaseLargerThanTheBudgetFailsAtOnce(t *testing.T) {
	l := NewBudget(100).Lease()
	if err := l.Grow(context.Background(), 101); !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("err %v, want ErrBudgetExceeded", err)
	}
}

func TestEmptyLeaseWaitsForTheBudget(t *testing.T) {
	b := NewBudget(100)
	a := b.Lease()
	if err := a.Grow(context.Background(), 80); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Lease().Grow(context.Background(), 50) }()
	select {
	case err := <-done:
		t.Fatalf("grew past the budget: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	a.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b.Used() != 50 {
		t.Fatalf("used %d, want 50", b.Used())
	}
}

// halves returns a budget of 100 bytes held by two leases of 50 each.
func halves(t *testing.T) (b *Budget, a, c *Lease) {
	t.Helper()
	b = NewBudget(100)
	a, c = b.Lease(), b.Lease()
	for _, l := range []*Lease{a, c} {
		if err := l.Grow(context.Background(), 50); err != nil {
			t.Fatal(err)
		}
	}
	return b, a, c
}

func TestHoldingLeasesDoNotWaitForEachOtherForEver(t *testing.T) {
	_, a, _ := halves(t)
	ctx := context.Background()
	start := time.Now()
	err := a.Grow(ctx, 10)
	if !errors.Is(err, ErrBudgetBusy) {
		t.Fatalf("err %v, want ErrBudgetBusy", err)
	}
	if took := time.Since(start); took < HeldWait || took > HeldWait+time.Second {
		t.Fatalf("gave up after %v, want about %v", took, HeldWait)
	}
}

func TestBudgetHoldsUnderConcurrentReplies(t *testing.T) {
	const limit = 1 << 20
	b := NewBudget(4*limit + 1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := int64(0)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := b.Lease()
			defer l.Release()
			_, _, err := readLimited(context.Background(), io.LimitReader(&endless{}, limit), -1, limit, l)
			if err != nil && !errors.Is(err, ErrBudgetBusy) {
				t.Error(err)
			}
			mu.Lock()
			peak = max(peak, b.Used())
			mu.Unlock()
		}()
	}
	wg.Wait()
	if peak > b.Limit() {
		t.Fatalf("budget used %d bytes, limit %d", peak, b.Limit())
	}
	if b.Used() != 0 {
		t.Fatalf("%d bytes still held", b.Used())
	}
}

func batchBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString("[")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"specversion":"1.0","id":"e","source":"/s","type":"t","data":"x"}`)
	}
	b.WriteString("]")
	return b.Bytes()
}

func TestReadEventsLimitedBoundsTheFanOut(t *testing.T) {
	h := http.Header{"Content-Type": {BatchContentType}}
	cases := []struct {
		name      string
		body      []byte
		maxEvents int
		budget    int64
		events    int
		err       error
	}{
		{"within the bound", batchBody(10), 10, 1 << 20, 10, nil},
		{"one past the bound", batchBody(11), 10, 1 << 20, 0, ErrTooManyEvents},
		{"no bound", batchBody(1000), 0, 4 << 20, 1000, nil},
		{"null is no event", []byte("null"), 10, 1 << 20, 0, nil},
		{"empty batch", []byte("[]"), 10, 1 << 20, 0, nil},
		{"decoded events past the budget", batchBody(100), 1000, 50 * EventOverhead, 0, ErrBudgetExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := NewBudget(c.budget)
			l := b.Lease()
			evs, err := ReadEventsLimited(context.Background(), h, c.body, c.maxEvents, l)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if len(evs) != c.events {
				t.Fatalf("%d events, want %d", len(evs), c.events)
			}
			if err == nil && c.events > 0 && l.Held() < int64(c.events)*EventOverhead {
				t.Fatalf("lease holds %d bytes for %d events", l.Held(), c.events)
			}
			l.Release()
		})
	}
}

func TestReadEventsBatchIsStillStrict(t *testing.T) {
	h := http.Header{"Content-Type": {BatchContentType}}
	for _, body := range []string{`{"specversion":"1.0"}`, `[1]`, `[{"specversion":"1.0","id":"e","source":"/s","type":"t"}`, `"x"`} {
		if _, err := ReadEvents(h, []byte(body)); err == nil || !strings.Contains(err.Error(), "batch") {
			t.Errorf("%s: err %v, want a malformed batch error", body, err)
		}
	}
}

func TestRepliesThatAllWaitGiveWayAtOnce(t *testing.T) {
	b, a, c := halves(t)
	ctx := context.Background()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- a.Grow(ctx, 30) }()
	time.Sleep(50 * time.Millisecond) // a waits for c
	err := c.Grow(ctx, 30)
	if !errors.Is(err, ErrBudgetBusy) {
		t.Fatalf("the last reply to wait got %v, want ErrBudgetBusy", err)
	}
	c.Release()
	if err := <-done; err != nil {
		t.Fatalf("the reply that waited first got %v", err)
	}
	if took := time.Since(start); took > HeldWait/2 {
		t.Fatalf("took %v to resolve", took)
	}
	a.Release()
	if b.Used() != 0 {
		t.Fatalf("%d bytes held", b.Used())
	}
}
