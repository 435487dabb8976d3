package mvconvert

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

func (c *converter) limits() {
	l := c.mv.Spec.Limits
	if l == nil {
		return
	}
	p := "spec.limits"
	if l.ReadBatchSize != nil {
		if *l.ReadBatchSize == 0 {
			c.fail(p+".readBatchSize", "must be at least 1")
		}
		c.setEnv("MV_READ_BATCH_SIZE", strconv.FormatUint(*l.ReadBatchSize, 10), p+".readBatchSize")
	}
	c.setPositiveDuration("MV_READ_TIMEOUT", p+".readTimeout", l.ReadTimeout)
	if l.Concurrency != nil {
		if *l.Concurrency == 0 {
			c.fail(p+".concurrency", "must be at least 1")
		}
		c.setEnv("MV_CONCURRENCY", strconv.FormatUint(*l.Concurrency, 10), p+".concurrency")
	}
	if r := l.RateLimit; r != nil {
		c.rateLimit(p+".rateLimit", r)
	}
}

func (c *converter) rateLimit(p string, r *nf.RateLimit) {
	if r.Max == nil {
		c.fail(p+".max", "required: the most messages read per second")
	}
	if *r.Max == 0 {
		c.fail(p+".max", "must be at least 1")
	}
	c.setEnv("MV_RATE_LIMIT_MAX", strconv.FormatUint(*r.Max, 10), p+".max")
	if r.Min != nil {
		if *r.Min > *r.Max {
			c.fail(p+".min", "%d is more than max (%d)", *r.Min, *r.Max)
		}
		c.setEnv("MV_RATE_LIMIT_MIN", strconv.FormatUint(*r.Min, 10), p+".min")
	}
	if r.RampUpDuration != nil {
		c.nonNegative(p+".rampUpDuration", r.RampUpDuration)
		c.setEnv("MV_RATE_LIMIT_RAMP_UP", dur(r.RampUpDuration), p+".rampUpDuration")
	}
	if s := r.RateLimiterStore; s != nil {
		sp := p + ".store"
		switch {
		case s.RateLimiterRedisStore != nil && s.RateLimiterInMemoryStore != nil:
			c.fail(sp+".inMemoryStore", "a second store next to redisStore: set one")
		case s.RateLimiterInMemoryStore != nil:
			c.setEnv("MV_RATE_LIMIT_STORE", "memory", sp+".inMemoryStore")
		case s.RateLimiterRedisStore != nil:
			c.redisStore(sp+".redisStore", s.RateLimiterRedisStore)
		default:
			c.fail(sp, "no store: set redisStore or inMemoryStore")
		}
	}
	if m := r.RateLimiterModes; m != nil {
		mp := p + ".modes"
		var set []string
		for _, k := range []struct {
			name string
			on   bool
		}{{"scheduled", m.RateLimiterScheduled != nil}, {"relaxed", m.RateLimiterRelaxed != nil}, {"onlyIfUsed", m.RateLimiterOnlyIfUsed != nil}, {"goBackN", m.RateLimiterGoBackN != nil}} {
			if k.on {
				set = append(set, k.name)
			}
		}
		switch len(set) {
		case 0:
			c.fail(mp, "no mode: set one of scheduled, relaxed, onlyIfUsed or goBackN")
		case 1:
		default:
			c.fail(mp+"."+set[1], "a second mode next to %s: set one", set[0])
		}
		c.setEnv("MV_RATE_LIMIT_MODE", set[0], mp+"."+set[0])
		percent := func(path string, v *uint32, env string) {
			if v == nil {
				return
			}
			if *v > 100 {
				c.fail(path, "must be 0 to 100, got %d", *v)
			}
			c.setEnv(env, strconv.FormatUint(uint64(*v), 10), path)
		}
		if o := m.RateLimiterOnlyIfUsed; o != nil {
			percent(mp+".onlyIfUsed.thresholdPercentage", o.ThresholdPercentage, "MV_RATE_LIMIT_THRESHOLD_PERCENT")
		}
		if g := m.RateLimiterGoBackN; g != nil {
			gp := mp + ".goBackN"
			if g.CoolDownPeriod != nil {
				c.nonNegative(gp+".coolDownPeriod", g.CoolDownPeriod)
				c.setEnv("MV_RATE_LIMIT_COOLDOWN", dur(g.CoolDownPeriod), gp+".coolDownPeriod")
			}
			percent(gp+".rampDownPercentage", g.RampDownPercentage, "MV_RATE_LIMIT_RAMP_DOWN_PERCENT")
			percent(gp+".thresholdPercentage", g.ThresholdPercentage, "MV_RATE_LIMIT_THRESHOLD_PERCENT")
		}
	}
	if r.ResumedRampUp != nil {
		c.setEnv("MV_RATE_LIMIT_RESUMED_RAMP_UP", strconv.FormatBool(*r.ResumedRampUp), p+".resumedRampUp")
	}
	if r.TTL != nil {
		c.nonNegative(p+".ttl", r.TTL)
		c.setEnv("MV_RATE_LIMIT_TTL", dur(r.TTL), p+".ttl")
	}
}

func (c *converter) redisStore(p string, r *nf.RateLimiterRedisStore) {
	switch strings.ToLower(r.Mode) {
	case "single":
	case "sentinel":
		c.fail(p+".sentinel", "Redis Sentinel is not supported: %s", whySentinel)
	default:
		c.fail(p+".mode", "%q: want single (sentinel is not supported)", r.Mode)
	}
	if r.Sentinel != nil {
		c.fail(p+".sentinel", "set with mode single: remove it, or use url")
	}
	if r.URL == nil || *r.URL == "" {
		c.fail(p+".url", "required in mode single: redis://host:6379/0 or rediss://...")
	}
	u, err := url.Parse(*r.URL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		c.fail(p+".url", "want redis://host:port[/db] or rediss://..., got %q", *r.URL)
	}
	if r.DB != nil {
		db := strconv.Itoa(int(*r.DB))
		switch strings.Trim(u.Path, "/") {
		case "":
			u.Path = "/" + db
		case db:
		default:
			c.fail(p+".db", "%s differs from the database in url (%s)", db, u.Path)
		}
	}
	c.setEnv("MV_RATE_LIMIT_STORE", "redis", p)
	c.setEnv("MV_RATE_LIMIT_REDIS_URL", u.String(), p+".url")
}

func (c *converter) bypass() {
	b := c.mv.Spec.Bypass
	if b == nil {
		return
	}
	s := c.mv.Spec.Sink
	for _, t := range []struct {
		path, env string
		fc        *nf.ForwardConditions
		present   bool
	}{
		{"spec.bypass.sink", "MV_BYPASS_SINK", b.Sink, true},
		{"spec.bypass.fallback", "MV_BYPASS_FALLBACK", b.Fallback, s.Fallback != nil},
		{"spec.bypass.onSuccess", "MV_BYPASS_ON_SUCCESS", b.OnSuccess, s.OnSuccess != nil},
	} {
		if t.fc == nil {
			continue
		}
		if !t.present {
			c.fail(t.path, "bypass to a sink that is not configured (spec.sink.%s)", strings.TrimPrefix(t.path, "spec.bypass."))
		}
		op := "or"
		if t.fc.Tags.Operator != nil {
			op = string(*t.fc.Tags.Operator)
		}
		if op != "or" && op != "and" && op != "not" {
			c.fail(t.path+".tags.operator", "%q: want and, or or not", op)
		}
		if len(t.fc.Tags.Values) == 0 {
			c.fail(t.path+".tags.values", "required: at least one tag")
		}
		for i, v := range t.fc.Tags.Values {
			if v == "" || strings.Contains(v, ",") {
				c.fail(fmt.Sprintf("%s.tags.values[%d]", t.path, i), "%q: a tag must be non-empty and without commas", v)
			}
		}
		c.setEnv(t.env, op+":"+strings.Join(t.fc.Tags.Values, ","), t.path)
	}
}

func (c *converter) lifecycle() {
	switch ph := c.mv.Spec.Lifecycle.DesiredPhase; ph {
	case "", nf.PhaseRunning:
	case nf.PhasePaused:
		c.paused = true
	default:
		c.fail("spec.lifecycle.desiredPhase", "%q: want Running or Paused", ph)
	}
}
