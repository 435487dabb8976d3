package config

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/ratelimit"
)

func (r *RateLimit) validate() error {
	itoa := strconv.Itoa
	switch {
	case r.Max < 0:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_MAX", Value: itoa(r.Max), Reason: "must be 0 (no limit) or a positive number of messages per second"}
	case r.Min < 0:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_MIN", Value: itoa(r.Min), Reason: "must be 0 or more messages per second"}
	case r.Max > 0 && r.Min > r.Max:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_MIN", Value: itoa(r.Min), Reason: "must not be above MV_RATE_LIMIT_MAX=" + itoa(r.Max)}
	case r.RampUp <= 0:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_RAMP_UP", Value: r.RampUp.String(), Reason: "must be a positive duration such as 1s"}
	case r.Threshold < 0 || r.Threshold > 100:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_THRESHOLD_PERCENT", Value: itoa(r.Threshold), Reason: "must be between 0 and 100"}
	case r.RampDownPercent < 0 || r.RampDownPercent > 100:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_RAMP_DOWN_PERCENT", Value: itoa(r.RampDownPercent), Reason: "must be between 0 and 100"}
	case r.Cooldown < 0:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_COOLDOWN", Value: r.Cooldown.String(), Reason: "must be 0 or a positive duration"}
	case r.TTL < time.Second:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_TTL", Value: r.TTL.String(), Reason: "must be at least 1s"}
	}
	switch ratelimit.Mode(r.Mode) {
	case ratelimit.Scheduled, ratelimit.Relaxed, ratelimit.OnlyIfUsed, ratelimit.GoBackN:
	default:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_MODE", Value: r.Mode, Reason: "must be scheduled, relaxed, onlyIfUsed or goBackN"}
	}
	switch r.Store {
	case "memory":
		if r.RedisURL != "" {
			return &runner.ConfigError{Var: "MV_RATE_LIMIT_REDIS_URL", Value: redact(r.RedisURL), Reason: "is set but MV_RATE_LIMIT_STORE is memory; set MV_RATE_LIMIT_STORE=redis to share the limit"}
		}
	case "redis":
		if err := ratelimit.ValidateRedisURL(r.RedisURL); err != nil {
			return &runner.ConfigError{Var: "MV_RATE_LIMIT_REDIS_URL", Value: redact(r.RedisURL), Reason: err.Error() + " (needed by MV_RATE_LIMIT_STORE=redis)"}
		}
	default:
		return &runner.ConfigError{Var: "MV_RATE_LIMIT_STORE", Value: r.Store, Reason: "must be memory or redis"}
	}
	return nil
}

// ReadCallsPerSecond turns the limit in messages into Numaflow's read
// calls per second: max and min divided by the read batch size, rounded
// up, as numaflow-core's RateLimitConfig does for a source.
func (c *Config) ReadCallsPerSecond() (maxCalls, minCalls int) {
	b := c.ReadBatchSize
	return (c.RateLimit.Max + b - 1) / b, (c.RateLimit.Min + b - 1) / b
}

// NewRateLimiter builds the read rate limiter, or nil when MV_RATE_LIMIT_MAX
// is 0. Its metrics go to reg with labels.
func (c *Config) NewRateLimiter(reg prometheus.Registerer, labels prometheus.Labels, log *zap.SugaredLogger) (*ratelimit.Limiter, error) {
	r := c.RateLimit
	if r.Max == 0 {
		return nil, nil
	}
	maxCalls, minCalls := c.ReadCallsPerSecond()
	cfg := ratelimit.Config{
		Bounds: ratelimit.Bounds{
			Max: maxCalls, Min: minCalls, RampUp: r.RampUp, Mode: ratelimit.Mode(r.Mode),
			ThresholdPercent: r.Threshold, Cooldown: r.Cooldown, RampDownPercent: r.RampDownPercent,
		},
		BatchSize:  c.ReadBatchSize,
		Resume:     r.ResumedRampUp,
		Logger:     log,
		Registerer: reg,
		Labels:     labels,
	}
	if r.Store == "redis" {
		// Numaflow's key prefix for a MonoVertex is "<name>-mv" and its
		// processor ID "<name>-<replica>". Every pod of a Knative revision
		// has the same MV_REPLICA, so the host name (the pod's name) makes
		// the ID unique; a restarted container keeps it, which is what a
		// resumed ramp-up needs.
		host, _ := os.Hostname()
		cfg.ProcessorID = fmt.Sprintf("%s-%d-%s", c.Name, c.Replica, host)
		st, err := ratelimit.NewRedisStore(r.RedisURL, c.Name+"-mv", r.TTL)
		if err != nil {
			return nil, &runner.ConfigError{Var: "MV_RATE_LIMIT_REDIS_URL", Value: redact(r.RedisURL), Reason: err.Error()}
		}
		cfg.Store = st
	}
	return ratelimit.New(cfg)
}

// redact hides a password in a Redis URL before it is printed.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
