// Package scaling_test drives several runner processes on one JetStream
// consumer with the Kubernetes HPA's formula fed by the runners' exported
// monovtx_backlog_seconds, the way Knative's HPA class would: load comes,
// replicas are added within the bounds, the backlog drains, replicas are
// removed with SIGTERM, and no message is lost or left unacked.
package scaling_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/procstat"
	"github.com/monovertex/monovertex/internal/testutil"
)

const (
	minScale      = 1
	maxScale      = 4
	targetSeconds = 3.0
	// The HPA acts only when the ratio is off by more than its tolerance.
	tolerance = 0.1
	// Scale-down waits this long with a lower recommendation (the HPA's
	// stabilization window, shortened for the test).
	stabilization = 3 * time.Second
	perMessage    = 4 * time.Millisecond
)

// slowFunction is a CloudEvents function (binary mode) that echoes each
// event after perMessage, so one replica calling it with concurrency 1 has a
// bounded rate and more replicas drain faster.
func slowFunction(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		time.Sleep(perMessage)
		for k, v := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "ce-") || strings.EqualFold(k, "Content-Type") {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

type replica struct {
	p     *testutil.Process
	index int
}

type cluster struct {
	t        *testing.T
	env      map[string]string
	mu       sync.Mutex
	replicas []*replica
	next     int
	stopped  []*replica
}

func (c *cluster) scaleTo(n int) {
	for len(c.replicas) < n {
		env := map[string]string{"MV_REPLICA": strconv.Itoa(c.next)}
		for k, v := range c.env {
			env[k] = v
		}
		p := testutil.StartRunner(c.t, env)
		p.WaitReady(60 * time.Second)
		c.replicas = append(c.replicas, &replica{p: p, index: c.next})
		c.next++
	}
	for len(c.replicas) > n {
		r := c.replicas[len(c.replicas)-1]
		c.replicas = c.replicas[:len(c.replicas)-1]
		r.p.Stop(30 * time.Second) // a scale-down drains like any stop
		c.stopped = append(c.stopped, r)
	}
}

// podMetric reads one pod's monovtx_backlog_seconds; ok is false when the
// pod does not report it (unknown).
func podMetric(r *replica) (float64, bool) {
	fams, err := procstat.Scrape(r.p.AdminURL + "/metrics")
	if err != nil {
		return 0, false
	}
	return procstat.Value(fams, "monovtx_backlog_seconds", nil)
}

// hpa is one step of the HPA's algorithm for a Pods metric with an
// average-value target: desired = ceil(current x average / target), held
// inside the tolerance, clamped to the bounds; pods without a sample are
// left out, and no sample at all means no change.
func hpa(current int, samples []float64) int {
	if len(samples) == 0 {
		return current
	}
	var sum float64
	for _, s := range samples {
		sum += s
	}
	ratio := sum / float64(len(samples)) / targetSeconds
	if math.Abs(ratio-1) <= tolerance {
		return current
	}
	d := int(math.Ceil(float64(current) * ratio))
	return min(max(d, minScale), maxScale)
}

func TestScaleOutAndInOnOneConsumerLosesNothing(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	natstest.CreateStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	natstest.CreateStream(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}, Duplicates: 10 * time.Minute})
	c := &cluster{t: t, env: map[string]string{
		"MV_NAME":                    "scaling",
		"MV_SOURCE":                  "jetstream",
		"MV_TRANSFORMER":             "cloudevents",
		"MV_TRANSFORMER_URL":         slowFunction(t),
		"MV_TRANSFORMER_CONCURRENCY": "1",
		"MV_SINK":                    "jetstream",
		"MV_JETSTREAM_URL":           srv.URL(),
		"MV_JETSTREAM_STREAM":        "IN",
		"MV_JETSTREAM_CONSUMER":      "workers",
		"MV_JETSTREAM_SUBJECT":       "out.all",
		"MV_READ_BATCH_SIZE":         "25",
		"MV_INFLIGHT_BATCHES":        "2",
		"MV_READ_TIMEOUT":            "100ms",
		"MV_PENDING_INTERVAL":        "250ms",
		"MV_LOOKBACK_SECONDS":        "3",
		"MV_SCALE_TARGET_SECONDS":    fmt.Sprint(targetSeconds),
		"MV_MIN_SCALE":               strconv.Itoa(minScale),
		"MV_MAX_SCALE":               strconv.Itoa(maxScale),
		"MV_SHUTDOWN_TIMEOUT":        "20s",
	}}
	c.scaleTo(minScale)

	const waves, perWave = 2, 3000
	total := 0
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for wave := 0; wave < waves; wave++ {
		for i := 0; i < perWave; i++ {
			if _, err := js.Publish(ctx, "in.load", []byte(fmt.Sprintf("w%d-%d", wave, i))); err != nil {
				t.Fatal(err)
			}
		}
		total += perWave
		loaded := time.Now()
		peak, drainedAt, lowSince := len(c.replicas), time.Time{}, time.Time{}
		// The control loop: one HPA step a second, bounded in count.
		for step := 0; step < 120; step++ {
			time.Sleep(time.Second)
			var samples []float64
			for _, r := range c.replicas {
				if v, ok := podMetric(r); ok {
					samples = append(samples, v)
				}
			}
			pending, ackPending := natstest.ConsumerState(t, js, "IN", "workers")
			want := hpa(len(c.replicas), samples)
			t.Logf("wave %d t=%4.1fs replicas=%d backlog_seconds=%v pending=%d ack_pending=%d -> desired %d",
				wave, time.Since(loaded).Seconds(), len(c.replicas), samples, pending, ackPending, want)
			if pending+ackPending == 0 && drainedAt.IsZero() {
				drainedAt = time.Now()
			}
			switch {
			case want > len(c.replicas):
				c.scaleTo(want)
				lowSince = time.Time{}
				peak = max(peak, want)
			case want < len(c.replicas):
				if lowSince.IsZero() {
					lowSince = time.Now()
				} else if time.Since(lowSince) >= stabilization {
					c.scaleTo(want)
					lowSince = time.Time{}
				}
			default:
				lowSince = time.Time{}
			}
			if !drainedAt.IsZero() && len(c.replicas) == minScale {
				break
			}
		}
		if drainedAt.IsZero() {
			t.Fatalf("wave %d: the backlog never drained", wave)
		}
		if len(c.replicas) != minScale {
			t.Fatalf("wave %d: %d replicas after the load, want scale-in to %d", wave, len(c.replicas), minScale)
		}
		if peak < 2 || peak > maxScale {
			t.Fatalf("wave %d: peak replicas %d, want scale-out within 2..%d", wave, peak, maxScale)
		}
		// One replica alone would need perWave x perMessage; report the
		// drain time beside the target rather than assert a speed.
		t.Logf("wave %d: %d messages drained in %.1fs with up to %d replicas (one replica alone: about %.0fs; target %.0fs)",
			wave, perWave, drainedAt.Sub(loaded).Seconds(), peak, (perWave * perMessage).Seconds(), targetSeconds)
	}
	c.scaleTo(0)

	out := natstest.ReadAll(t, js, "OUT")
	seen := map[string]int{}
	for _, m := range out {
		seen[string(m.Data())]++
	}
	lost := 0
	for wave := 0; wave < waves; wave++ {
		for i := 0; i < perWave; i++ {
			if seen[fmt.Sprintf("w%d-%d", wave, i)] == 0 {
				lost++
			}
		}
	}
	pending, ackPending := natstest.ConsumerState(t, js, "IN", "workers")
	if lost != 0 || len(seen) != total || pending != 0 || ackPending != 0 {
		t.Fatalf("lost %d of %d; %d distinct outputs; consumer pending %d, ack pending %d", lost, total, len(seen), pending, ackPending)
	}
	t.Logf("%d messages through %d runner processes (%d stopped by scale-in SIGTERM): 0 lost, %d stored outputs for %d distinct",
		total, c.next, len(c.stopped), len(out), len(seen))
}
