package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/monovertex/monovertex/config"
)

func TestRateLimitErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		env           map[string]string
		key, contains string
	}{
		{map[string]string{"MV_RATE_LIMIT_MAX": "-1"}, "MV_RATE_LIMIT_MAX", "0 (no limit)"},
		{map[string]string{"MV_RATE_LIMIT_MAX": "100", "MV_RATE_LIMIT_MIN": "200"}, "MV_RATE_LIMIT_MIN", "not be above MV_RATE_LIMIT_MAX=100"},
		{map[string]string{"MV_RATE_LIMIT_RAMP_UP": "0s"}, "MV_RATE_LIMIT_RAMP_UP", "positive duration"},
		{map[string]string{"MV_RATE_LIMIT_MODE": "eager"}, "MV_RATE_LIMIT_MODE", "scheduled, relaxed, onlyIfUsed or goBackN"},
		{map[string]string{"MV_RATE_LIMIT_THRESHOLD_PERCENT": "101"}, "MV_RATE_LIMIT_THRESHOLD_PERCENT", "between 0 and 100"},
		{map[string]string{"MV_RATE_LIMIT_RAMP_DOWN_PERCENT": "-5"}, "MV_RATE_LIMIT_RAMP_DOWN_PERCENT", "between 0 and 100"},
		{map[string]string{"MV_RATE_LIMIT_COOLDOWN": "-1s"}, "MV_RATE_LIMIT_COOLDOWN", "0 or a positive"},
		{map[string]string{"MV_RATE_LIMIT_TTL": "500ms"}, "MV_RATE_LIMIT_TTL", "at least 1s"},
		{map[string]string{"MV_RATE_LIMIT_STORE": "etcd"}, "MV_RATE_LIMIT_STORE", "memory or redis"},
		{map[string]string{"MV_RATE_LIMIT_STORE": "redis"}, "MV_RATE_LIMIT_REDIS_URL", "redis:// or rediss://"},
		{map[string]string{"MV_RATE_LIMIT_STORE": "redis", "MV_RATE_LIMIT_REDIS_URL": "http://redis:6379"}, "MV_RATE_LIMIT_REDIS_URL", "redis:// or rediss://"},
		{map[string]string{"MV_RATE_LIMIT_REDIS_URL": "redis://redis:6379/0"}, "MV_RATE_LIMIT_REDIS_URL", "MV_RATE_LIMIT_STORE is memory"},
		{map[string]string{"MV_SCALE_UP_COOLDOWN_SECONDS": "-1"}, "MV_SCALE_UP_COOLDOWN_SECONDS", "0 or more"},
		{map[string]string{"MV_SCALE_DOWN_COOLDOWN_SECONDS": "-3"}, "MV_SCALE_DOWN_COOLDOWN_SECONDS", "0 or more"},
		{map[string]string{"MV_SCALE_REPLICAS_PER_UP": "0"}, "MV_SCALE_REPLICAS_PER_UP", "1 or more"},
		{map[string]string{"MV_SCALE_REPLICAS_PER_DOWN": "0"}, "MV_SCALE_REPLICAS_PER_DOWN", "1 or more"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			wantRefused(t, tc.env, tc.key, tc.env[tc.key], tc.contains)
		})
	}
}

func TestRedisURLPasswordIsNotPrinted(t *testing.T) {
	t.Setenv("MV_RATE_LIMIT_REDIS_URL", "redis://user:s3cret@redis:6379/0")
	_, err := config.Load()
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v: want an error that hides the password", err)
	}
}

func TestRateLimitCountsReadCallsLikeNumaflow(t *testing.T) {
	c := load(t, map[string]string{"MV_READ_BATCH_SIZE": "100", "MV_RATE_LIMIT_MAX": "1050", "MV_RATE_LIMIT_MIN": "10"})
	// numaflow-core: max.div_ceil(batch), min.div_ceil(batch).
	if maxCalls, minCalls := c.ReadCallsPerSecond(); maxCalls != 11 || minCalls != 1 {
		t.Fatalf("read calls per second = %d, %d; want 11, 1", maxCalls, minCalls)
	}
	l, err := c.NewRateLimiter(prometheus.NewRegistry(), nil, nil)
	if err != nil || l == nil {
		t.Fatalf("NewRateLimiter = %v, %v", l, err)
	}
	if st := l.Status(); st.Store != "memory" || st.LimitPerSecond != 100 {
		t.Fatalf("status %+v, want memory at the minimum: 1 read call x 100", st)
	}
}

func TestNoRateLimitByDefault(t *testing.T) {
	c := load(t, nil)
	if l, err := c.NewRateLimiter(prometheus.NewRegistry(), nil, nil); l != nil || err != nil {
		t.Fatalf("NewRateLimiter = %v, %v; want none without MV_RATE_LIMIT_MAX", l, err)
	}
	o := c.RunnerOptions()
	if o.Scaling.UpCooldown != 90*time.Second || o.Scaling.DownCooldown != 90*time.Second || o.Scaling.PerUp != 2 || o.Scaling.PerDown != 2 {
		t.Fatalf("scaling %+v, want Numaflow's defaults: 90s cooldowns, 2 replicas per step", o.Scaling)
	}
}

func TestScaleFieldsReachTheEngine(t *testing.T) {
	c := load(t, map[string]string{
		"MV_SCALE_UP_COOLDOWN_SECONDS": "30", "MV_SCALE_DOWN_COOLDOWN_SECONDS": "0",
		"MV_SCALE_REPLICAS_PER_UP": "5", "MV_SCALE_REPLICAS_PER_DOWN": "1",
	})
	if s := c.RunnerOptions().Scaling; s.UpCooldown != 30*time.Second || s.DownCooldown != 0 || s.PerUp != 5 || s.PerDown != 1 {
		t.Fatalf("scaling %+v", s)
	}
}
