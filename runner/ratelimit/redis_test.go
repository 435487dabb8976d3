package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/monovertex/monovertex/internal/redistest"
	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner/ratelimit"
)

// replica is one limiter joined to the shared pool, as one runner would be.
type replica struct {
	l   *ratelimit.Limiter
	reg *prometheus.Registry
}

func newReplica(t *testing.T, url, prefix, id string, b ratelimit.Bounds, resume bool) *replica {
	t.Helper()
	st, err := ratelimit.NewRedisStore(url, prefix, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	l, err := ratelimit.New(ratelimit.Config{Bounds: b, BatchSize: 100, Store: st, ProcessorID: id, Resume: resume, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return &replica{l: l, reg: reg}
}

// joinAll makes every replica take its first token at once, as replicas
// starting together do, so they register and agree together.
func joinAll(t *testing.T, rs []*replica) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !r.l.Acquire(ctx) {
				t.Errorf("replica %d did not join the pool within 20s", i)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// startPool starts n replicas of the MonoVertex name (IDs name-0, name-1,
// ...) on the store at url and waits until each sees all n.
func startPool(t *testing.T, url, name string, n int, b ratelimit.Bounds) []*replica {
	t.Helper()
	var rs []*replica
	for i := range n {
		rs = append(rs, newReplica(t, url, name+"-mv", fmt.Sprintf("%s-%d", name, i), b, false))
	}
	joinAll(t, rs)
	testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("%d replicas agree on %d", n, n), func() bool { return allSee(rs, n) })
	return rs
}

func replicasSeen(rs []*replica) []int {
	var out []int
	for _, r := range rs {
		out = append(out, r.l.Status().Replicas)
	}
	return out
}

func allSee(rs []*replica, n int) bool {
	for _, got := range replicasSeen(rs) {
		if got != n {
			return false
		}
	}
	return true
}

func TestRedisReplicasShareTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	b := ratelimit.Bounds{Max: 30, Min: 30, RampUp: time.Second}
	rs := startPool(t, srv.URL(), "share", 3, b)
	for i, r := range rs {
		if got := r.l.Status().LimitPerSecond; got != 10*100 {
			t.Fatalf("replica %d: limit %d messages/s, want a third of 30 read calls x 100 = 1000", i, got)
		}
		if got := value(t, r.reg, "monovtx_rate_limit_replicas"); got != 3 {
			t.Fatalf("replica %d: monovtx_rate_limit_replicas = %v, want 3", i, got)
		}
	}

	// What Numaflow's scripts keep in Redis: the three heartbeats.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if n, err := c.ZCard(context.Background(), "share-mv:heartbeats").Result(); err != nil || n != 3 {
		t.Fatalf("share-mv:heartbeats has %d members (%v), want 3", n, err)
	}

	// One leaves cleanly: the other two take its share.
	if err := rs[2].l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rest := rs[:2]
	testutil.WaitFor(t, 5*time.Second, "the two left agree on 2", func() bool { return allSee(rest, 2) })
	for _, r := range rest {
		r.l.Close(context.Background())
	}
}

func TestRedisStaleReplicaIsDroppedAfterTheTTL(t *testing.T) {
	srv := redistest.Start(t)
	b := ratelimit.Bounds{Max: 20, Min: 20, RampUp: time.Second}
	rs := startPool(t, srv.URL(), "stale", 2, b)
	// The second one dies without deregistering (kill -9): the survivor
	// must drop it once its heartbeat is older than the 2s TTL.
	stopHeartbeat(t, rs[1])
	testutil.WaitFor(t, 6*time.Second, "the survivor alone", func() bool { return allSee(rs[:1], 1) })
	rs[0].l.Close(context.Background())
}

// stopHeartbeat closes a replica's connection to the store without
// deregistering it, as a process killed with -9 leaves it.
func stopHeartbeat(t *testing.T, r *replica) {
	t.Helper()
	// Close with an expired context: the deregistration cannot be sent.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.l.Close(ctx)
}

func TestRedisRestartKeepsTheShareAndRejoins(t *testing.T) {
	srv := redistest.Start(t)
	b := ratelimit.Bounds{Max: 40, Min: 40, RampUp: time.Second}
	rs := startPool(t, srv.URL(), "restart", 2, b)

	srv.Stop()
	testutil.WaitFor(t, 5*time.Second, "store errors counted", func() bool {
		return value(t, rs[0].reg, "monovtx_rate_limit_store_errors_total") > 0
	})
	// While Redis is away each keeps its last agreed share and reads on.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for i, r := range rs {
		if !r.l.Acquire(ctx) {
			t.Fatalf("replica %d could not read while the store was away", i)
		}
		if st := r.l.Status(); st.Replicas != 2 || st.LimitPerSecond != 20*100 {
			t.Fatalf("replica %d while the store is away: %+v, want 2 replicas and 2000 messages/s", i, st)
		}
	}

	srv.Restart(0)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	testutil.WaitFor(t, 5*time.Second, "both heartbeats back in the empty server", func() bool {
		n, err := c.ZCard(context.Background(), "restart-mv:heartbeats").Result()
		return err == nil && n == 2
	})
	testutil.WaitFor(t, 2*time.Second, "still two replicas", func() bool { return allSee(rs, 2) })
	for _, r := range rs {
		r.l.Close(context.Background())
	}
}

func TestRedisResumedRampUpStartsWhereItLeft(t *testing.T) {
	srv := redistest.Start(t)
	b := ratelimit.Bounds{Max: 50, Min: 5, RampUp: 45 * time.Second, Mode: ratelimit.Scheduled}
	first := newReplica(t, srv.URL(), "resume-mv", "resume-0", b, true)
	joinAll(t, []*replica{first})
	time.Sleep(2100 * time.Millisecond)
	first.l.Acquire(context.Background()) // refills: the pool has grown past min
	grown := first.l.Status().LimitPerSecond
	if grown <= 5*100 {
		t.Fatalf("after 2s of a scheduled ramp the limit is %d, want above the minimum 500", grown)
	}
	if err := first.l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	again := newReplica(t, srv.URL(), "resume-mv", "resume-0", b, true)
	joinAll(t, []*replica{again})
	if got := again.l.Status().LimitPerSecond; got < grown {
		t.Fatalf("resumed limit %d, want at least the %d it left with", got, grown)
	}
	again.l.Close(context.Background())

	fresh := newReplica(t, srv.URL(), "resume-mv", "resume-0", b, false)
	joinAll(t, []*replica{fresh})
	if got := fresh.l.Status().LimitPerSecond; got != 5*100 && got != 6*100 {
		t.Fatalf("without resumedRampUp the limit starts at %d, want the minimum (500, or 600 after one refill)", got)
	}
	fresh.l.Close(context.Background())
}

// value is the registry's one sample of the gauge or counter name.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}
