package mvconvert

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

// scaleSettings are the scaling numbers derived from spec.replicas and
// spec.scale.
type scaleSettings struct {
	min, max, initial int32
	target            uint32
	fixed             bool
}

func (c *converter) scale() scaleSettings {
	sc := &c.mv.Spec.Scale
	p := "spec.scale"
	var st scaleSettings
	replicas := int32(1)
	if r := c.mv.Spec.Replicas; r != nil {
		if *r < 0 {
			c.fail("spec.replicas", "must not be negative, got %d", *r)
		}
		replicas = *r
	}
	if replicas == 0 {
		c.warn("spec.replicas", "0: a Knative Service keeps at least one pod with these scalers, so the runner is paused instead (the ConfigMap's paused: \"true\"); it reads nothing until you set it to \"false\"")
		c.paused = true
		replicas = 1
	}
	st.target = nf.DefaultTargetProcessingSeconds
	if sc.TargetProcessingSeconds != nil {
		if *sc.TargetProcessingSeconds == 0 {
			c.fail(p+".targetProcessingSeconds", "must be at least 1")
		}
		st.target = *sc.TargetProcessingSeconds
	}
	if sc.Disabled {
		st.fixed = true
		st.min, st.max = replicas, replicas
		for _, f := range []struct {
			path string
			set  bool
		}{{p + ".min", sc.Min != nil}, {p + ".max", sc.Max != nil}, {p + ".cron", sc.Cron != nil}} {
			if f.set {
				c.warn(f.path, "ignored: scale.disabled is true, so the Service runs exactly spec.replicas (%d) pods, as Numaflow does", replicas)
			}
		}
		return st
	}
	st.min = 1
	if sc.Min != nil {
		switch {
		case *sc.Min < 0:
			c.fail(p+".min", "must not be negative, got %d", *sc.Min)
		case *sc.Min == 0:
			c.warn(p+".min", "0 raised to 1 (no scale to zero): %s", whyZero)
		default:
			st.min = *sc.Min
		}
	}
	st.max = nf.DefaultMaxReplicas
	if sc.Max != nil {
		if *sc.Max < 1 {
			c.fail(p+".max", "must be at least 1, got %d", *sc.Max)
		}
		st.max = *sc.Max
	}
	if st.min > st.max {
		c.fail(p+".min", "%d is more than max (%d)", st.min, st.max)
	}
	if c.mv.Spec.Replicas != nil {
		st.initial = min(max(replicas, st.min), st.max)
	}
	if sc.ZeroReplicaSleepSeconds != nil {
		c.warn(p+".zeroReplicaSleepSeconds", "dropped: the Service never scales to zero (see scale.min)")
	}
	if sc.TargetBufferAvailability != nil {
		c.warn(p+".targetBufferAvailability", "dropped: it is for a pipeline's buffered vertices; Numaflow ignores it for a MonoVertex too")
	}
	if sc.LookbackSeconds != nil {
		lb := *sc.LookbackSeconds
		if lb == 0 {
			c.fail(p+".lookbackSeconds", "must be at least 1")
		}
		if lb > nf.MaxLookbackSeconds {
			c.warn(p+".lookbackSeconds", "%d lowered to %d, as Numaflow caps it", lb, nf.MaxLookbackSeconds)
			lb = nf.MaxLookbackSeconds
		}
		c.setEnv("MV_LOOKBACK_SECONDS", strconv.FormatUint(uint64(lb), 10), p+".lookbackSeconds")
	}
	if sc.ScaleUpCooldownSeconds != nil {
		c.setEnv("MV_SCALE_UP_COOLDOWN_SECONDS", strconv.FormatUint(uint64(*sc.ScaleUpCooldownSeconds), 10), p+".scaleUpCooldownSeconds")
	}
	if sc.ScaleDownCooldownSeconds != nil {
		c.setEnv("MV_SCALE_DOWN_COOLDOWN_SECONDS", strconv.FormatUint(uint64(*sc.ScaleDownCooldownSeconds), 10), p+".scaleDownCooldownSeconds")
	}
	up, down := perScale(sc.ReplicasPerScaleUp, sc.DeprecatedReplicasPerScale), perScale(sc.ReplicasPerScaleDown, sc.DeprecatedReplicasPerScale)
	if up != nil {
		c.setEnv("MV_SCALE_REPLICAS_PER_UP", strconv.FormatUint(uint64(*up), 10), p+".replicasPerScaleUp")
	}
	if down != nil {
		c.setEnv("MV_SCALE_REPLICAS_PER_DOWN", strconv.FormatUint(uint64(*down), 10), p+".replicasPerScaleDown")
	}
	if sc.DeprecatedReplicasPerScale != nil {
		c.warn(p+".replicasPerScale", "deprecated by Numaflow: carried as replicasPerScaleUp and replicasPerScaleDown where those are not set")
	}
	if sc.Cron != nil {
		c.checkCron(p+".cron", sc.Cron)
	}
	return st
}

func perScale(v, deprecated *uint32) *uint32 {
	if v != nil {
		return v
	}
	return deprecated
}

func (c *converter) checkCron(p string, cr *nf.CronScheduling) {
	if cr.Timezone != "" {
		if _, err := time.LoadLocation(cr.Timezone); err != nil {
			c.fail(p+".timezone", "%q is not an IANA time zone", cr.Timezone)
		}
	}
	if len(cr.Schedules) == 0 {
		c.fail(p+".schedules", "required: at least one schedule")
	}
	for i, s := range cr.Schedules {
		sp := fmt.Sprintf("%s.schedules[%d]", p, i)
		if _, err := kedaCron(s.Start); err != nil {
			c.fail(sp+".start", "%v", err)
		}
		if _, err := kedaCron(s.End); err != nil {
			c.fail(sp+".end", "%v", err)
		}
		if s.Start == s.End {
			c.fail(sp+".end", "must differ from start")
		}
		if s.Min == nil || *s.Min < 0 {
			c.fail(sp+".min", "required, at least 0")
		}
		if s.Max == nil || *s.Max < *s.Min {
			c.fail(sp+".max", "required, at least min")
		}
		if c.opts.Scaler != ScalerKEDA {
			continue
		}
		// KEDA's cron trigger raises the floor to min in the window; the
		// HPA takes the largest of its triggers, so nothing lowers the
		// ceiling for a window, and a replica count above it would break
		// what the window promises (a downstream kept below a load).
		switch maxR := c.mv.Spec.Scale.GetMaxReplicas(); {
		case *s.Max < maxR:
			c.fail(sp+".max", "%d is below spec.scale.max (%d): KEDA's cron trigger raises the floor to min in the window, but nothing in Knative or KEDA lowers the ceiling for a window, so the Service could scale past %d; set it to %d, or set spec.scale.max to %d for all hours", *s.Max, maxR, *s.Max, maxR, *s.Max)
		case *s.Max > maxR:
			c.warn(sp+".max", "%d is above spec.scale.max (%d): the ceiling stays max-scale (%d) in the window too, as KEDA's maxReplicaCount is one for all hours; raise spec.scale.max to %d to allow it", *s.Max, maxR, maxR, *s.Max)
		}
	}
	if c.opts.Scaler != ScalerKEDA {
		c.warn(p, "not carried with the HPA class, which has no time-based trigger: the windows' min and max are not applied, the rest of spec.scale is; convert with --scaler keda for a KEDA cron trigger per schedule")
	}
}

// kedaCron turns Numaflow's six-field cron (with seconds) into KEDA's
// five fields; a window must start on a whole minute.
func kedaCron(s string) (string, error) {
	f := strings.Fields(s)
	if len(f) != 6 {
		return "", fmt.Errorf("%q: want Numaflow's six fields (second minute hour day-of-month month day-of-week)", s)
	}
	if f[0] != "0" {
		return "", fmt.Errorf("%q: KEDA's cron scaler works in whole minutes; the seconds field must be 0", s)
	}
	return strings.Join(f[1:], " "), nil
}

// scalerAnnotations wires the Service to the autoscaler.
func (c *converter) scalerAnnotations(st scaleSettings) map[string]string {
	anns := map[string]string{
		"autoscaling.knative.dev/min-scale": strconv.Itoa(int(st.min)),
		"autoscaling.knative.dev/max-scale": strconv.Itoa(int(st.max)),
		"prometheus.io/scrape":              "true",
		"prometheus.io/port":                strconv.Itoa(adminPort),
		"prometheus.io/path":                "/metrics",
	}
	if st.initial > 0 {
		anns["autoscaling.knative.dev/initial-scale"] = strconv.Itoa(int(st.initial))
	}
	if st.fixed {
		// min = max: Knative's default autoscaler holds the count and
		// needs no metric.
		return anns
	}
	target := strconv.FormatUint(uint64(st.target), 10)
	anns["autoscaling.knative.dev/class"] = "hpa.autoscaling.knative.dev"
	anns["autoscaling.knative.dev/metric"] = backlogMetric
	anns["autoscaling.knative.dev/target"] = target
	sc := &c.mv.Spec.Scale
	if c.opts.Scaler == ScalerHPA {
		if sc.ScaleUpCooldownSeconds != nil || sc.ScaleDownCooldownSeconds != nil {
			w := sc.GetScaleDownCooldownSeconds()
			if sc.ScaleDownCooldownSeconds == nil {
				w = sc.GetScaleUpCooldownSeconds()
			}
			w = min(max(w, 6), 3600)
			anns["autoscaling.knative.dev/window"] = strconv.Itoa(w) + "s"
			c.warn("spec.scale", "the HPA class has one stabilization window for both directions (autoscaling.knative.dev/window: %ds, Knative's bounds 6s to 1h); --scaler keda carries each cooldown", w)
		}
		if sc.ReplicasPerScaleUp != nil || sc.ReplicasPerScaleDown != nil || sc.DeprecatedReplicasPerScale != nil {
			c.warn("spec.scale", "replicasPerScaleUp/Down not carried: Knative's HPA class sets no scaling policies; --scaler keda does")
		}
		return anns
	}
	query := kedaQuery(c.mv.Name, target)
	anns["autoscaling.knative.dev/metric-type"] = "Value"
	anns["autoscaling.knative.dev/prometheus-address"] = c.opts.PrometheusAddress
	anns["autoscaling.knative.dev/prometheus-query"] = query
	so, err := json.Marshal(c.scaledObject(st, query, target))
	if err != nil {
		panic(err)
	}
	anns["autoscaling.knative.dev/scaled-object-override"] = string(so)
	return anns
}

// kedaQuery is P / R for the mono vertex: the backlog in seconds at the
// current total rate (see docs/knative.md, "Scaling on Knative").
func kedaQuery(name, target string) string {
	sel := fmt.Sprintf("{mvtx_name=%q}", name)
	return fmt.Sprintf("(max(monovtx_pending_raw%s >= 0) / (sum(monovtx_processing_rate%s) > 0)) or max(monovtx_pending_raw%s == 0) or vector(%s)", sel, sel, sel, target)
}

// ScaledObject is the part of a KEDA ScaledObject (keda.sh/v1alpha1) the
// converter writes into autoscaling.knative.dev/scaled-object-override:
// Knative's autoscaler-keda extension takes it as the revision's
// ScaledObject and fills in the name, the target Deployment and
// maxReplicaCount.
type ScaledObject struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Spec       ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec is KEDA's ScaledObject spec, as far as it is written.
type ScaledObjectSpec struct {
	MinReplicaCount *int32             `json:"minReplicaCount,omitempty"`
	MaxReplicaCount *int32             `json:"maxReplicaCount,omitempty"`
	Advanced        *KEDAAdvanced      `json:"advanced,omitempty"`
	Triggers        []KEDAScaleTrigger `json:"triggers"`
}

// KEDAAdvanced is KEDA's advanced section.
type KEDAAdvanced struct {
	HorizontalPodAutoscalerConfig *KEDAHPAConfig `json:"horizontalPodAutoscalerConfig"`
}

// KEDAHPAConfig carries the HPA behavior KEDA gives the HPA it creates.
type KEDAHPAConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

// KEDAScaleTrigger is one KEDA trigger.
type KEDAScaleTrigger struct {
	Type       string            `json:"type"`
	MetricType string            `json:"metricType,omitempty"`
	Metadata   map[string]string `json:"metadata"`
}

func (c *converter) scaledObject(st scaleSettings, query, target string) ScaledObject {
	sc := &c.mv.Spec.Scale
	rules := func(cooldown, step int, down bool) *autoscalingv2.HPAScalingRules {
		r := &autoscalingv2.HPAScalingRules{}
		period := int32(min(max(cooldown, 1), 1800))
		if down {
			w := int32(min(cooldown, 3600))
			r.StabilizationWindowSeconds = &w
		} else {
			w := int32(0)
			r.StabilizationWindowSeconds = &w
		}
		if step == 0 {
			p := autoscalingv2.DisabledPolicySelect
			r.SelectPolicy = &p
			return r
		}
		p := autoscalingv2.MaxChangePolicySelect
		r.SelectPolicy = &p
		r.Policies = []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: int32(step), PeriodSeconds: period}}
		return r
	}
	minR, maxR := st.min, st.max
	so := ScaledObject{APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject", Spec: ScaledObjectSpec{
		MinReplicaCount: &minR,
		MaxReplicaCount: &maxR,
		Advanced: &KEDAAdvanced{HorizontalPodAutoscalerConfig: &KEDAHPAConfig{Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp:   rules(sc.GetScaleUpCooldownSeconds(), sc.GetReplicasPerScaleUp(), false),
			ScaleDown: rules(sc.GetScaleDownCooldownSeconds(), sc.GetReplicasPerScaleDown(), true),
		}}},
		Triggers: []KEDAScaleTrigger{{Type: "prometheus", MetricType: "Value", Metadata: map[string]string{
			"serverAddress": c.opts.PrometheusAddress, "query": query, "threshold": target,
		}}},
	}}
	if cr := sc.Cron; cr != nil {
		tz := cr.Timezone
		if tz == "" {
			tz = "UTC"
		}
		for _, s := range cr.Schedules {
			start, _ := kedaCron(s.Start)
			end, _ := kedaCron(s.End)
			so.Spec.Triggers = append(so.Spec.Triggers, KEDAScaleTrigger{Type: "cron", Metadata: map[string]string{
				"timezone": tz, "start": start, "end": end, "desiredReplicas": strconv.Itoa(int(*s.Min)),
			}})
		}
	}
	return so
}
