package mvconvert

import (
	"strconv"
	"time"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

// backoffEnv is the runner's retry strategy derived from a Numaflow one.
func (c *converter) checkRetry(p string, r *nf.RetryStrategy) {
	if r == nil {
		return
	}
	if b := r.BackOff; b != nil {
		bp := p + ".backoff"
		c.nonNegative(bp+".interval", b.Interval)
		c.nonNegative(bp+".cap", b.Cap)
		if b.Steps != nil && *b.Steps == 0 {
			c.fail(bp+".steps", "must be at least 1 (Numaflow refuses 0 too)")
		}
		if b.Factor != nil && *b.Factor < 1 {
			c.fail(bp+".factor", "must be at least 1, got %g", *b.Factor)
		}
		if b.Cap != nil {
			interval := time.Millisecond
			if b.Interval != nil {
				interval = b.Interval.Duration
			}
			if b.Cap.Duration < interval {
				c.fail(bp+".cap", "%s is less than the interval %s", b.Cap.Duration, interval)
			}
		}
		if b.Jitter != nil && (*b.Jitter < 0 || *b.Jitter >= 1) {
			c.fail(bp+".jitter", "must be at least 0 and less than 1, got %g", *b.Jitter)
		}
	}
	if r.OnFailure != nil {
		switch *r.OnFailure {
		case nf.OnFailureRetry, nf.OnFailureFallback, nf.OnFailureDrop:
		default:
			c.fail(p+".onFailure", "%q: want retry, fallback or drop", *r.OnFailure)
		}
	}
}

// stageRetry converts a transformer's or UDF's own retry strategy into its
// MV_TRANSFORMER_* or MV_UDF_* variables (prefix), all of them, with
// numaflow-core's defaults for what the strategy leaves out (RetryConfig's
// default in config/components/sink.rs: 1ms, factor 1, no cap, no jitter,
// 65535 steps, onFailure retry), not the sink's: numaflow-core gives a
// stage strategy nothing of the sink's. As there, onFailure retry takes
// 65535 steps whatever steps says, and once they are spent the input goes
// back to the source (shared/retry.rs, RetryStep::Nack).
func (c *converter) stageRetry(p, prefix string, r *nf.RetryStrategy) {
	if r == nil {
		return
	}
	c.checkRetry(p, r)
	onFailure := nf.OnFailureRetry
	if r.OnFailure != nil {
		onFailure = *r.OnFailure
	}
	if onFailure == nf.OnFailureFallback {
		c.fail(p+".onFailure", "fallback is for sinks; Numaflow refuses it for a transformer or UDF too")
	}
	interval, steps, factor, capDur, jitter := "1ms", uint32(65535), 1.0, "0s", 0.0
	bp := p + ".backoff"
	if b := r.BackOff; b != nil {
		if b.Interval != nil {
			interval = dur(b.Interval)
		}
		if b.Factor != nil {
			factor = *b.Factor
		}
		if b.Cap != nil {
			capDur = dur(b.Cap)
		}
		if b.Jitter != nil {
			jitter = *b.Jitter
		}
		if b.Steps != nil {
			switch n := *b.Steps & 0xffff; {
			case onFailure == nf.OnFailureRetry:
				c.warn(bp+".steps", "ignored with onFailure retry, as Numaflow ignores it: 65535 tries, then the input goes back to the source")
			case n == 0:
				c.fail(bp+".steps", "%d is 0 retries in Numaflow, which keeps steps in 16 bits; use 1 to 65535", *b.Steps)
			default:
				if n != *b.Steps {
					c.warn(bp+".steps", "%d is %d retries, as Numaflow keeps steps in 16 bits", *b.Steps, n)
				}
				steps = n
			}
		}
	}
	c.setEnv(prefix+"RETRY_INTERVAL", interval, bp+".interval")
	c.setEnv(prefix+"RETRY_STEPS", strconv.FormatUint(uint64(steps), 10), bp+".steps")
	c.setEnv(prefix+"RETRY_FACTOR", strconv.FormatFloat(factor, 'g', -1, 64), bp+".factor")
	c.setEnv(prefix+"RETRY_CAP", capDur, bp+".cap")
	c.setEnv(prefix+"RETRY_JITTER", strconv.FormatFloat(jitter, 'g', -1, 64), bp+".jitter")
	c.setEnv(prefix+"ON_FAILURE", string(onFailure), p+".onFailure")
}

func (c *converter) retry() {
	p := "spec.sink.retryStrategy"
	r := c.mv.Spec.Sink.RetryStrategy
	c.checkRetry(p, &r)
	if b := r.BackOff; b != nil {
		bp := p + ".backoff"
		if b.Interval != nil {
			c.setEnv("MV_RETRY_INTERVAL", dur(b.Interval), bp+".interval")
		}
		if b.Factor != nil {
			c.setEnv("MV_RETRY_FACTOR", strconv.FormatFloat(*b.Factor, 'g', -1, 64), bp+".factor")
		}
		if b.Cap != nil {
			c.setEnv("MV_RETRY_CAP", dur(b.Cap), bp+".cap")
		}
		if b.Jitter != nil {
			c.setEnv("MV_RETRY_JITTER", strconv.FormatFloat(*b.Jitter, 'g', -1, 64), bp+".jitter")
		}
	}
	if r.OnFailure != nil {
		if *r.OnFailure == nf.OnFailureFallback && c.mv.Spec.Sink.Fallback == nil {
			c.fail(p+".onFailure", "fallback needs a fallback sink (spec.sink.fallback)")
		}
		c.setEnv("MV_ON_FAILURE", string(*r.OnFailure), p+".onFailure")
	}
	c.retrySteps(p, r)
}

// retrySteps sets MV_RETRY_STEPS as numaflow-core counts a sink's retries:
// with onFailure retry it ignores steps and retries on; with fallback or
// drop it takes steps in 16 bits (steps as u16), 65535 when unset, so a
// sink that keeps failing reaches the fallback or the drop.
func (c *converter) retrySteps(p string, r nf.RetryStrategy) {
	var steps *uint32
	if r.BackOff != nil {
		steps = r.BackOff.Steps
	}
	sp := p + ".backoff.steps"
	if r.OnFailure == nil || *r.OnFailure == nf.OnFailureRetry {
		if steps != nil {
			c.warn(sp, "ignored with onFailure retry, as Numaflow ignores it (it retries 65535 times, the runner for ever)")
		}
		return
	}
	n := uint32(65535) // numaflow-core's DEFAULT_MAX_SINK_RETRY_ATTEMPTS
	if steps != nil {
		n = *steps & 0xffff
		switch {
		case n == 0:
			c.fail(sp, "%d is 0 retries in Numaflow, which keeps steps in 16 bits; use 1 to 65535", *steps)
		case n != *steps:
			c.warn(sp, "%d is %d retries, as Numaflow keeps steps in 16 bits", *steps, n)
		}
	}
	c.setEnv("MV_RETRY_STEPS", strconv.FormatUint(uint64(n), 10), sp)
	// A transformer or UDF without its own retry strategy is retried for
	// ever in Numaflow, whatever the sink's steps.
	src := c.mv.Spec.Source
	if t := src.UDTransformer; t != nil && t.RetryStrategy == nil || c.mv.Spec.UDF != nil && c.mv.Spec.UDF.RetryStrategy == nil {
		c.setEnv("MV_STAGE_RETRY_STEPS", "unlimited", sp)
	}
}
