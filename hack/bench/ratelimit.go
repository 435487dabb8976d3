package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/monovertex/monovertex/hack/bench/internal/wait"
)

// The rate limit scenarios read an unthrottled generator into a blackhole
// with MV_RATE_LIMIT_MAX set, so the limit and nothing else holds the read
// rate; their figure is the read rate over the limit, and the baseline is
// the same processes without a limit, measured in the same run.
const (
	// rateLimitMax is the total limit, in messages per second: 60 read
	// calls of 500, 20 for each of three replicas, well under what one
	// runner reads unthrottled on the 2-core reference machine.
	rateLimitMax   = 30_000
	rateLimitBatch = 500
	rateLimitRamp  = 2 * time.Second
)

// rateLimitFamilies are the scenarios of Numaflow's limits.rateLimit.
func rateLimitFamilies() []*family {
	return []*family{
		{
			name: "ratelimit-memory-x1", sizes: []int{KiB},
			needs:    []string{"MV_SOURCE=generator", "MV_SINK=blackhole"},
			baseline: "the same runner without a limit",
			what:     fmt.Sprintf("one runner, MV_RATE_LIMIT_MAX=%d (per replica), ramp-up %s; figure: read rate / max after the ramp-up", rateLimitMax, rateLimitRamp),
			sides: func(h *harness, sc scenario, rec *record) ([]side, func(), error) {
				return h.sidesRateLimit(sc, rec, 1, false)
			},
		},
		{
			name: "ratelimit-redis-x3", sizes: []int{KiB},
			needs:    []string{"MV_SOURCE=generator", "MV_SINK=blackhole"},
			baseline: "the same three runners without a limit",
			what:     fmt.Sprintf("three runner processes sharing MV_RATE_LIMIT_MAX=%d through one redis-server; figure: the three read rates summed / max", rateLimitMax),
			sides: func(h *harness, sc scenario, rec *record) ([]side, func(), error) {
				return h.sidesRateLimit(sc, rec, 3, true)
			},
		},
	}
}

func (h *harness) sidesRateLimit(sc scenario, rec *record, replicas int, redis bool) ([]side, func(), error) {
	runnerRecord(rec, sc, rateLimitBatch, "")
	rec.RSSBoundMB = nil
	rec.Replicas = replicas
	rec.RateLimitMsgsPerSec = num(rateLimitMax)
	cleanup := func() {}
	limit := map[string]string{
		"MV_RATE_LIMIT_MAX":     strconv.Itoa(rateLimitMax),
		"MV_RATE_LIMIT_RAMP_UP": rateLimitRamp.String(),
	}
	if redis {
		srv, addr, err := h.startRedis(sc)
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { srv.stop(5 * time.Second) }
		limit["MV_RATE_LIMIT_STORE"] = "redis"
		limit["MV_RATE_LIMIT_REDIS_URL"] = "redis://" + addr + "/0"
		rec.Notes = append(rec.Notes, "one redis-server (Debian package) on loopback, no persistence")
	}
	round := 0
	return []side{
		{"runner", func(ctx context.Context, sc scenario) (sideResult, error) {
			// A key prefix (MV_NAME) per round keeps the rounds apart in Redis.
			round++
			env := merge(generatorEnv(sc.size), map[string]string{"MV_SINK": "blackhole", "MV_NAME": fmt.Sprintf("bench-rl-%d", round)}, limit)
			return h.runReplicas(ctx, sc, replicas, env, true)
		}},
		{"baseline", func(ctx context.Context, sc scenario) (sideResult, error) {
			env := merge(generatorEnv(sc.size), map[string]string{"MV_SINK": "blackhole"})
			return h.runReplicas(ctx, sc, replicas, env, false)
		}},
	}, cleanup, nil
}

// runReplicas starts n runners with env, waits past the ramp-up, and
// measures the read rate of all of them together over whole seconds.
func (h *harness) runReplicas(ctx context.Context, sc scenario, n int, env map[string]string, limited bool) (sideResult, error) {
	r := nanResult()
	var admins []string
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop(15 * time.Second)
		}
	}()
	for i := range n {
		e, admin, err := h.runnerEnv(rateLimitBatch, merge(env, map[string]string{"MV_REPLICA": strconv.Itoa(i)}))
		if err != nil {
			return r, err
		}
		p, err := h.startRunner(sc, e, admin)
		if err != nil {
			return r, err
		}
		procs, admins = append(procs, p), append(admins, admin)
	}
	// Past the ramp-up (and, with Redis, the second replicas wait after
	// agreeing), with the configured warm-up on top.
	if !wait.Sleep(ctx, rateLimitRamp+2*time.Second+h.warmup) {
		return r, ctx.Err()
	}
	// The limit refills at the top of every wall-clock second, so the
	// window runs from the middle of one second to the middle of another:
	// a whole number of refills, none cut in two.
	window := max(5*time.Second, h.duration.Round(time.Second))
	read := func() ([]int64, time.Time, error) {
		var each []int64
		for _, a := range admins {
			s, err := snapshot(ctx, a)
			if err != nil {
				return nil, time.Time{}, err
			}
			if s.status.State != "running" {
				return nil, time.Time{}, fmt.Errorf("a runner is %q, not running", s.status.State)
			}
			each = append(each, s.status.Totals["read"])
		}
		return each, time.Now(), nil
	}
	if !wait.Sleep(ctx, untilHalfSecond()) {
		return r, ctx.Err()
	}
	n0, t0, err := read()
	if err != nil {
		return r, err
	}
	end := t0.Truncate(time.Second).Add(500 * time.Millisecond).Add(window)
	if !wait.Sleep(ctx, time.Until(end)) {
		return r, ctx.Err()
	}
	n1, t1, err := read()
	if err != nil {
		return r, err
	}
	secs := t1.Sub(t0).Round(time.Second).Seconds()
	var total int64
	var split []string
	for i := range n1 {
		total += n1[i] - n0[i]
		split = append(split, fmt.Sprintf("%.0f", float64(n1[i]-n0[i])/secs))
	}
	r.rate = float64(total) / secs
	if limited {
		r.notes = append(r.notes, fmt.Sprintf("window %.0fs from mid-second to mid-second; msgs/s per runner: %s", secs, strings.Join(split, " + ")))
	}
	return r, nil
}

// untilHalfSecond is the wait until the next wall-clock x.5s.
func untilHalfSecond() time.Duration {
	now := time.Now()
	next := now.Truncate(time.Second).Add(500 * time.Millisecond)
	if !next.After(now) {
		next = next.Add(time.Second)
	}
	return next.Sub(now)
}

// startRedis starts redis-server on a free loopback port and returns its
// address.
func (h *harness) startRedis(sc scenario) (*proc, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", fmt.Errorf("redis-server is not installed (apt-get install redis-server): %w", err)
	}
	return h.startListening("redis-"+sc.id(), bin, func(port int) []string {
		return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}
	}, nil)
}
