package runner

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// loadSignals are what the engine measures of its load for scaling:
// its processing rate, the consumer group's where the source can tell,
// the source's pending count, and the governor that steadies the replica
// recommendation.
type loadSignals struct {
	rate          *rateCounter
	groupProgress progressSamples
	pending       atomic.Int64
	// pendingAvg is monovtx_pending{period}; only the pending loop uses it.
	pendingAvg *pendingWindow
	gov        scaleGovernor
}

// Scaling holds the bounds and target of the replica recommendation.
type Scaling struct {
	// TargetSeconds is how long the backlog may take to drain at the
	// current rate (Numaflow's targetProcessingSeconds).
	TargetSeconds float64
	// Min and Max mirror Knative's min-scale and max-scale; Max 0 is unbounded.
	Min, Max int
	// UpCooldown and DownCooldown are how long after a change of the
	// recommendation it may not rise, or fall, again (Numaflow's
	// scaleUpCooldownSeconds and scaleDownCooldownSeconds).
	UpCooldown, DownCooldown time.Duration
	// PerUp and PerDown are the most replicas one change adds or removes
	// (replicasPerScaleUp, replicasPerScaleDown); 0 is no limit.
	PerUp, PerDown int
}

// scaleGovernor moves the recommendation the way Numaflow's autoscaler
// moves a MonoVertex's replicas (pkg/reconciler/monovertex/scaling):
// towards the formula's value by at most PerUp or PerDown per step, and not
// within the cooldown after the last step. The recommendation stands for
// the replica count, as if the autoscaler followed it.
type scaleGovernor struct {
	mu      sync.Mutex
	set     bool
	current int
	changed time.Time
}

// next returns the recommendation at now for the formula's value want;
// holdUp keeps it from rising (reading is held at a shared rate limit,
// where more replicas read no more).
func (g *scaleGovernor) next(want int, now time.Time, sc Scaling, holdUp bool) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if want < 0 {
		return -1
	}
	if !g.set {
		g.set, g.current, g.changed = true, want, now
		return want
	}
	since := now.Sub(g.changed)
	next := g.current
	switch {
	case want > g.current:
		if holdUp || since < sc.UpCooldown {
			return g.current
		}
		next = want
		if sc.PerUp > 0 {
			next = min(want, g.current+sc.PerUp)
		}
	case want < g.current:
		if since < sc.DownCooldown {
			return g.current
		}
		next = want
		if sc.PerDown > 0 {
			next = max(want, g.current-sc.PerDown)
		}
	default:
		return g.current
	}
	g.current, g.changed = next, now
	return next
}

// ScaleSignals are the scaling inputs and the recommendation, as /status
// and the metrics report them.
type ScaleSignals struct {
	// Pending is the source's backlog, -1 when unknown.
	Pending int64 `json:"pending"`
	// Rate is this replica's acked inputs per second over the lookback.
	Rate float64 `json:"rate"`
	// GroupRate is the rate of every replica together, -1 when the source
	// cannot tell.
	GroupRate float64 `json:"group_rate"`
	// BacklogSeconds is Pending / GroupRate: how long the backlog takes to
	// drain at the current total rate; -1 when unknown.
	BacklogSeconds float64 `json:"backlog_seconds"`
	// DesiredReplicas is Numaflow's formula, clamped to the bounds and
	// moved by the step limits and cooldowns; -1 means no recommendation
	// (pending unknown, or no rate measured yet).
	DesiredReplicas int `json:"desired_replicas"`
}

// progressSamples keeps (time, group processed count) pairs over the lookback.
type progressSamples struct {
	mu      sync.Mutex
	samples []progressSample
}

type progressSample struct {
	at    time.Time
	count int64
}

func (p *progressSamples) add(at time.Time, count int64, window time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples = append(p.samples, progressSample{at, count})
	// Keep one sample older than the window, so the rate spans all of it.
	cut := 0
	for cut+1 < len(p.samples) && at.Sub(p.samples[cut+1].at) >= window {
		cut++
	}
	p.samples = p.samples[cut:]
}

// rate is the group's messages per second between the oldest and newest
// sample, or -1 with fewer than two samples.
func (p *progressSamples) rate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) < 2 {
		return -1
	}
	first, last := p.samples[0], p.samples[len(p.samples)-1]
	d := last.at.Sub(first.at).Seconds()
	if d <= 0 || last.count < first.count {
		return -1
	}
	return float64(last.count-first.count) / d
}

// ScaleSignals computes the scaling inputs and the recommendation now.
func (e *Engine) ScaleSignals() ScaleSignals {
	s := ScaleSignals{
		Pending:   e.load.pending.Load(),
		Rate:      e.load.rate.perSecond(time.Now(), e.opts.Lookback),
		GroupRate: e.load.groupProgress.rate(),
	}
	s.BacklogSeconds = -1
	if s.Pending >= 0 && s.GroupRate > 0 {
		s.BacklogSeconds = float64(s.Pending) / s.GroupRate
	} else if s.Pending == 0 {
		s.BacklogSeconds = 0
	}
	holdUp := false
	if l := e.opts.RateLimiter; l != nil {
		st := l.Status()
		holdUp = st.Store != "memory" && st.Throttled
	}
	s.DesiredReplicas = e.load.gov.next(desiredReplicas(s.Pending, s.Rate, e.opts.Scaling), time.Now(), e.opts.Scaling, holdUp)
	return s
}

// desiredReplicas is Numaflow's source formula,
//
//	desired = pending / totalRate / targetSeconds x readyReplicas,
//
// computed per replica as pending / (ownRate x targetSeconds), which is the
// same when the replicas share the work evenly and needs no replica count.
// It avoids Numaflow's known mistakes: unknown pending or no measured rate
// yet give no recommendation (-1) instead of zero, and the result is never
// below one while messages are pending or being processed.
func desiredReplicas(pending int64, rate float64, sc Scaling) int {
	if pending < 0 {
		return -1
	}
	var d int
	switch {
	case pending == 0:
		d = 0
	case rate <= 0:
		return -1
	default:
		d = int(math.Ceil(float64(pending) / rate / sc.TargetSeconds))
	}
	if d < 1 && (pending > 0 || rate > 0) {
		d = 1
	}
	if d < sc.Min {
		d = sc.Min
	}
	if sc.Max > 0 && d > sc.Max {
		d = sc.Max
	}
	return d
}

// scalingCollector exports the scale signals at scrape time. It leaves out
// a value that is unknown rather than exporting a number an autoscaler
// would act on: an HPA with no sample keeps the current replica count.
type scalingCollector struct {
	e                                             *Engine
	rate, groupRate, backlog, desired, targetDesc *prometheus.Desc
}

func newScalingCollector(e *Engine, labels prometheus.Labels) *scalingCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, labels) }
	return &scalingCollector{
		e:          e,
		rate:       d("monovtx_processing_rate", "This replica's acked input messages per second over MV_LOOKBACK_SECONDS."),
		groupRate:  d("monovtx_group_processing_rate", "Messages per second finished by all replicas sharing the source, where the source can tell."),
		backlog:    d("monovtx_backlog_seconds", "Pending / group processing rate: seconds the backlog takes to drain at the current total rate. Absent when unknown."),
		desired:    d("monovtx_desired_replicas", "Replicas Numaflow's formula recommends, clamped to MV_MIN_SCALE..MV_MAX_SCALE. Absent when there is no recommendation."),
		targetDesc: d("monovtx_scale_target_seconds", "MV_SCALE_TARGET_SECONDS: the backlog drain time the autoscaler aims at."),
	}
}

// Describe sends the descriptors.
func (c *scalingCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rate, c.groupRate, c.backlog, c.desired, c.targetDesc} {
		ch <- d
	}
}

// Collect sends the current values, leaving out unknown ones.
func (c *scalingCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.ScaleSignals()
	ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, s.Rate)
	ch <- prometheus.MustNewConstMetric(c.targetDesc, prometheus.GaugeValue, c.e.opts.Scaling.TargetSeconds)
	if s.GroupRate >= 0 {
		ch <- prometheus.MustNewConstMetric(c.groupRate, prometheus.GaugeValue, s.GroupRate)
	}
	if s.BacklogSeconds >= 0 {
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, s.BacklogSeconds)
	}
	if s.DesiredReplicas >= 0 {
		ch <- prometheus.MustNewConstMetric(c.desired, prometheus.GaugeValue, float64(s.DesiredReplicas))
	}
}
