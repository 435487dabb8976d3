package tools

import (
	"strconv"
	"testing"

	"knative.dev/serving/pkg/apis/autoscaling"
)

// httpDefaults are the HTTP source's and the engine's defaults, for the
// settings an example leaves out.
var httpDefaults = map[string]string{
	"MV_HTTP_BUFFER_SIZE": "1000", "MV_HTTP_MAX_BODY": "67108864", "MV_HTTP_MAX_INFLIGHT_BYTES": "268435456",
	"MV_READ_BATCH_SIZE": "500", "MV_INFLIGHT_BATCHES": "4",
}

// TestRequestScaling checks how the Knative Services scale against what
// their runner's source is. A push source (MV_SOURCE=http) scales on
// requests with the KPA class: containerConcurrency at most what one pod
// holds without turning callers away (MV_HTTP_BUFFER_SIZE messages, and
// MV_HTTP_MAX_INFLIGHT_BYTES / MV_HTTP_MAX_BODY largest bodies), and the
// concurrency target the messages a pod works on at once
// (MV_READ_BATCH_SIZE x MV_INFLIGHT_BATCHES), within that limit. A pull
// source under KPA gets no requests, so it must never be allowed to scale
// to zero there: its backlog is in a broker Knative cannot see.
func TestRequestScaling(t *testing.T) {
	root := repoRoot(t)
	push := 0
	for _, s := range exampleServices(t, root) {
		what, env, svc := s.what, s.env, s.svc
		if env == nil {
			continue // not a runner (the example function)
		}
		ann := svc.Spec.Template.Annotations
		class := ann[autoscaling.ClassAnnotationKey]
		kpa := class == "" || class == autoscaling.KPA
		if env["MV_SOURCE"] != "http" {
			if kpa && ann[autoscaling.MinScaleAnnotationKey] != "" && ann[autoscaling.MinScaleAnnotationKey] != "0" {
				continue
			}
			if kpa {
				t.Errorf("%s: a pull source (MV_SOURCE=%s) under the KPA class needs min-scale >= 1: it gets no requests, so KPA would scale it to zero with a backlog waiting", what, env["MV_SOURCE"])
			}
			continue
		}
		push++
		num := func(name string) int64 {
			v := env[name]
			if v == "" {
				v = httpDefaults[name]
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %s=%q: %v", what, name, v, err)
			}
			return n
		}
		if !kpa || ann[autoscaling.MetricAnnotationKey] != autoscaling.Concurrency {
			t.Errorf("%s: an HTTP source scales on requests: want class %s and metric %s, have %q and %q", what, autoscaling.KPA, autoscaling.Concurrency, class, ann[autoscaling.MetricAnnotationKey])
		}
		cc := int64(0)
		if svc.Spec.Template.Spec.ContainerConcurrency != nil {
			cc = *svc.Spec.Template.Spec.ContainerConcurrency
		}
		buffer, bodies := num("MV_HTTP_BUFFER_SIZE"), num("MV_HTTP_MAX_INFLIGHT_BYTES")/num("MV_HTTP_MAX_BODY")
		if cc <= 0 || cc > buffer || cc > bodies {
			t.Errorf("%s: containerConcurrency %d: want 1 to min(MV_HTTP_BUFFER_SIZE %d, MV_HTTP_MAX_INFLIGHT_BYTES / MV_HTTP_MAX_BODY %d), so the queue-proxy holds back what the runner would answer 429 or 503", what, cc, buffer, bodies)
		}
		working := num("MV_READ_BATCH_SIZE") * num("MV_INFLIGHT_BATCHES")
		target, err := strconv.ParseFloat(ann[autoscaling.TargetAnnotationKey], 64)
		if err != nil || int64(target) != min(working, cc) {
			t.Errorf("%s: target %q: want MV_READ_BATCH_SIZE x MV_INFLIGHT_BATCHES = %d (capped at containerConcurrency %d), the messages a pod works on at once", what, ann[autoscaling.TargetAnnotationKey], working, cc)
		}
		if ann[autoscaling.MinScaleAnnotationKey] != env["MV_MIN_SCALE"] || ann[autoscaling.MaxScaleAnnotationKey] != env["MV_MAX_SCALE"] {
			t.Errorf("%s: MV_MIN_SCALE/MV_MAX_SCALE %q/%q differ from min-scale/max-scale %q/%q", what, env["MV_MIN_SCALE"], env["MV_MAX_SCALE"], ann[autoscaling.MinScaleAnnotationKey], ann[autoscaling.MaxScaleAnnotationKey])
		}
	}
	if push == 0 {
		t.Fatal("no example runs the HTTP source as a request-scaled Service")
	}
}
