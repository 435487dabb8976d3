// Package cewiretest has the test fixtures that the CloudEvents sink's and
// transformer's tests share.
package cewiretest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RedirectingReceiver starts a receiver on loopback that answers every
// post with 301 Moved Permanently (a permanent answer under Knative's
// delivery rules) and counts the posts. It stops when the test ends.
func RedirectingReceiver(t testing.TB) (url string, posts *atomic.Int64) {
	posts = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Redirect(w, r, "/elsewhere", http.StatusMovedPermanently)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, posts
}

// InflightProbe is a receiver's handler that holds every request until
// limit requests are in flight at once (or 10 s pass), records the peak,
// and answers 202 Accepted: it shows that a poster uses its whole
// concurrency and never more.
type InflightProbe struct {
	limit    int64
	inflight atomic.Int64
	peak     atomic.Int64
	reached  chan struct{}
	once     sync.Once
}

// NewInflightProbe returns a probe for a concurrency of limit.
func NewInflightProbe(limit int) *InflightProbe {
	return &InflightProbe{limit: int64(limit), reached: make(chan struct{})}
}

// ServeHTTP holds the request as described on InflightProbe.
func (p *InflightProbe) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := p.inflight.Add(1)
	defer p.inflight.Add(-1)
	for cur := p.peak.Load(); n > cur && !p.peak.CompareAndSwap(cur, n); cur = p.peak.Load() {
	}
	if n == p.limit {
		p.once.Do(func() { close(p.reached) })
	}
	select {
	case <-p.reached:
	case <-time.After(10 * time.Second):
	}
	w.WriteHeader(http.StatusAccepted)
}

// Check fails t unless limit requests were in flight at once and never
// more; what names the requests in the message (deliveries, calls).
func (p *InflightProbe) Check(t testing.TB, what string) {
	t.Helper()
	select {
	case <-p.reached:
	default:
		t.Fatalf("never had %d %s in flight (peak %d)", p.limit, what, p.peak.Load())
	}
	if peak := p.peak.Load(); peak > p.limit {
		t.Fatalf("peak %d %s in flight, limit %d", peak, what, p.limit)
	}
}
