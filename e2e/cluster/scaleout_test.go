package cluster_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sample is one point of a replica curve.
type sample struct {
	at             time.Duration
	ready, desired int
	actual         string
	answered       int64
}

// scaleState reads the Knative PodAutoscaler's desired and actual scale and
// counts the ready, not terminating pods of a Service.
func (c *cluster) scaleState(ns, ksvc string) (ready int, desired, actual string) {
	out, _ := c.try(20*time.Second, "kubectl", "-n", ns, "get", "podautoscaler", "-l", "serving.knative.dev/service="+ksvc,
		"-o", `jsonpath={range .items[*]}{.status.desiredScale} {.status.actualScale}{"\n"}{end}`)
	if f := strings.Fields(out); len(f) == 2 {
		desired, actual = f[0], f[1]
	}
	out, _ = c.try(20*time.Second, "kubectl", "-n", ns, "get", "pods", "-l", "serving.knative.dev/service="+ksvc,
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[1] == "True" { // no deletionTimestamp
			ready++
		}
	}
	return ready, desired, actual
}

// podNames lists the names of a Service's pods.
func (c *cluster) podNames(ns, ksvc string) []string {
	out, _ := c.try(20*time.Second, "kubectl", "-n", ns, "get", "pods", "-l", "serving.knative.dev/service="+ksvc,
		"-o", `jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}`)
	return strings.Fields(out)
}

var loadValue = regexp.MustCompile(`^sink id="[^"]*" .*value="(load-[0-9]+-[0-9]+)"`)

// TestHTTPIngestScalesOut: deploy/http-ingest/ under load through the
// ingress. Knative's autoscaler (KPA, concurrency target 200 per pod) takes
// it above one pod and within max-scale 10, and back down once the load
// stops; every post answered 2xx was written, a post sent once was written
// exactly once by exactly one pod, and a post answered otherwise (429
// while a pod's buffer is full, 503 from the proxies) is sent again by the
// client, as the example's docs tell users to do: that one may be written
// twice (at least once), and is counted apart.
func TestHTTPIngestScalesOut(t *testing.T) {
	c := newCluster(t)
	const ns, ksvc = "default", "http-ingest"
	c.cleanupKsvc(ns, ksvc)
	t.Logf("ko apply -f deploy/http-ingest/:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "deploy/http-ingest/"))
	c.waitReady(ns, ksvc)
	c.waitRoute(ns, ksvc)
	ingress := c.getenv("MONOVERTEX_CLUSTER_INGRESS")

	// Each pod's runner log, followed from the moment the pod is seen to
	// its end: pods scaled away take their logs with them.
	var (
		mu      sync.Mutex
		follows = map[string]func(time.Duration) string{}
	)
	watch := func() {
		for _, p := range c.podNames(ns, ksvc) {
			mu.Lock()
			if follows[p] == nil {
				follows[p] = c.follow(ns, p, "runner")
			}
			mu.Unlock()
		}
	}

	const workers = 400
	var (
		answered, retried, failed atomic.Int64
		accepted                  sync.Map // body -> true, answered 2xx
		resent                    sync.Map // body -> true, sent again after a 429/503
		stop                      atomic.Bool
		wg                        sync.WaitGroup
	)
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
	post := func(body string) (int, error) {
		req, err := http.NewRequest(http.MethodPost, ingress+"/", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Host = ksvc + "." + ns + ".example.com"
		req.Header.Set("Content-Type", "text/plain")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() && i < 100_000; i++ {
				body := fmt.Sprintf("load-%d-%d", w, i)
				for try := 0; ; try++ {
					code, err := post(body)
					if err == nil && code/100 == 2 {
						answered.Add(1)
						accepted.Store(body, true)
						break
					}
					if try == 50 || (err == nil && code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable) {
						// Neither written-and-answered nor refused before
						// it was read: the test cannot tell, and fails.
						failed.Add(1)
						t.Errorf("post %s: %d %v", body, code, err)
						return
					}
					retried.Add(1)
					resent.Store(body, true)
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}

	// The curve: every 2 s under load until a second pod has been ready
	// for 30 s (at most 4 minutes), then without load until one pod is
	// left or none (at most 5 minutes).
	var curve []sample
	peak := 0
	var outAt time.Duration
	record := func() {
		ready, desired, actual := c.scaleState(ns, ksvc)
		s := sample{at: time.Since(start).Round(time.Second), ready: ready, actual: actual, answered: answered.Load()}
		fmt.Sscan(desired, &s.desired)
		curve = append(curve, s)
		peak = max(peak, ready)
		if ready > 1 && outAt == 0 {
			outAt = s.at
		}
	}
	for time.Since(start) < 4*time.Minute && (outAt == 0 || time.Since(start) < outAt+30*time.Second) && failed.Load() == 0 {
		watch()
		record()
		time.Sleep(2 * time.Second)
	}
	stop.Store(true)
	wg.Wait()
	loadEnd := time.Since(start).Round(time.Second)
	for time.Since(start) < loadEnd+5*time.Minute {
		record()
		if curve[len(curve)-1].ready <= 1 {
			break
		}
		time.Sleep(3 * time.Second)
	}
	var b strings.Builder
	for _, s := range curve {
		fmt.Fprintf(&b, "  t=%4ds ready=%d desired=%d actual=%s answered=%d\n", int(s.at.Seconds()), s.ready, s.desired, s.actual, s.answered)
	}
	t.Logf("replica curve (load of %d clients until t=%ds):\n%s", workers, int(loadEnd.Seconds()), b.String())

	// Count: the log lines of every pod that ran.
	time.Sleep(2 * time.Second)
	seen := map[string]int{}
	mu.Lock()
	for p, f := range follows {
		var out string
		if ready, _, _ := c.scaleState(ns, ksvc); ready > 0 && contains(c.podNames(ns, ksvc), p) {
			// still running: what it printed so far is all it wrote for the load
			out = c.run(60*time.Second, "kubectl", "-n", ns, "logs", p, "-c", "runner", "--tail=-1")
		} else {
			out = f(60 * time.Second)
		}
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if m := loadValue.FindStringSubmatch(l); m != nil {
				seen[m[1]]++
				n++
			}
		}
		t.Logf("pod %s wrote %d load posts", p, n)
		if n > 0 && !strings.Contains(out, "runner started") {
			// kubectl logs shows the current file only: lines before a
			// rotation are not counted, and this pod's count is short.
			t.Errorf("pod %s: its log lacks the runner's start line (rotated by the kubelet?); its count is incomplete", p)
		}
	}
	mu.Unlock()
	var acceptedN, missing, dup, dupResent, unanswered int
	accepted.Range(func(k, _ any) bool {
		acceptedN++
		if seen[k.(string)] == 0 {
			missing++
		}
		return true
	})
	for v, n := range seen {
		if _, again := resent.Load(v); n > 1 && again {
			// At least once: a 503 from the proxies in front of the pod
			// can come after the runner wrote the post, and the client
			// sends it again.
			dupResent++
		} else if n > 1 {
			dup++
		}
		if _, ok := accepted.Load(v); !ok {
			unanswered++
		}
	}
	t.Logf("posts answered 2xx %d (retried after 429/503: %d), written %d distinct; missing %d, written twice %d (and %d more that the client sent twice), written but not answered 2xx %d; peak %d ready pods (max-scale 10), out at t=%v",
		acceptedN, retried.Load(), len(seen), missing, dup, dupResent, unanswered, peak, outAt)
	switch {
	case failed.Load() != 0:
		t.Fatalf("%d posts failed", failed.Load())
	case missing != 0 || dup != 0:
		t.Fatalf("%d answered posts not written, %d sent once and written twice", missing, dup)
	case unanswered != 0:
		t.Fatalf("%d posts written but never answered 2xx", unanswered)
	case peak < 2:
		t.Fatalf("never above one ready pod under %d clients", workers)
	case peak > 10:
		t.Fatalf("%d ready pods, above max-scale 10", peak)
	case curve[len(curve)-1].ready >= peak:
		t.Fatalf("still %d ready pods 5 minutes after the load", curve[len(curve)-1].ready)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
