package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// status fetches a runner's /status through a port-forward.
func status(t *testing.T, base string) runner.Status {
	t.Helper()
	var st runner.Status
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// podUID returns a pod's UID and its runner container's restart count.
func (c *cluster) podUID(ns, pod string) (uid, restarts string) {
	c.t.Helper()
	out := c.run(30*time.Second, "kubectl", "-n", ns, "get", "pod", pod, "-o",
		`jsonpath={.metadata.uid} {.status.containerStatuses[?(@.name=="runner")].restartCount}`)
	f := strings.Fields(out)
	if len(f) != 2 {
		c.t.Fatalf("pod %s: uid and restart count: %q", pod, out)
	}
	return f[0], f[1]
}

// follow streams a container's log until the container ends or the test
// does; the returned function waits for the stream's end and returns it.
func (c *cluster) follow(ns, pod, container string) func(time.Duration) string {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c.t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, c.lookPath("kubectl"), "-n", ns, "logs", "-f", pod, "-c", container)
	cmd.Env = c.env
	var out testutil.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return func(timeout time.Duration) string {
		select {
		case <-done:
		case <-time.After(timeout):
			c.t.Fatalf("the log of %s/%s did not end within %v", pod, container, timeout)
		}
		return out.String()
	}
}

// setPaused patches the example's ConfigMap as docs/operations.md says and
// waits until the runner reports the state, returning how long it took.
func (c *cluster) setPaused(ns, cm, base string, paused bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.run(30*time.Second, "kubectl", "-n", ns, "patch", "configmap", cm, "--type", "merge",
		"-p", fmt.Sprintf(`{"data":{"paused":"%t"}}`, paused))
	// The kubelet refreshes a mounted ConfigMap on its sync period (one
	// minute) plus its cache's TTL; the runner watches the file.
	testutil.WaitFor(c.t, 200*time.Second, fmt.Sprintf("the runner to report paused=%t", paused), func() bool {
		if status(c.t, base).Paused == paused {
			return true
		}
		time.Sleep(2 * time.Second)
		return false
	})
	return time.Since(start).Round(time.Second)
}

// TestPullRunnerExample: deploy/pull-runner/ (a Numaflow user-defined
// source, transformer and sink as sidecars of the runner, scaled by the HPA
// class). The Service holds its min-scale pod with no requests at all;
// pausing through the ConfigMap stops reading in the same pod (same UID, no
// restart) and resuming starts it again; deleting the pod mid-stream
// drains it within the grace period: every message it read was written and
// acked, counted at the sink container.
func TestPullRunnerExample(t *testing.T) {
	c := newCluster(t)
	const ns = "default"
	c.deleteAtEnd("deploy/pull-runner/")
	t.Logf("ko apply -f deploy/pull-runner/:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "deploy/pull-runner/"))
	c.waitReady(ns, "pull-runner")
	pod := c.pod(ns, "serving.knative.dev/service=pull-runner", "runner", "udsource", "udtransformer", "udsink", "queue-proxy")

	// Knative's HPA class turns the bounds into the HPA's.
	hpa := c.run(30*time.Second, "kubectl", "-n", ns, "get", "hpa", "-l", "serving.knative.dev/service=pull-runner",
		"-o", `jsonpath={range .items[*]}{.spec.minReplicas} {.spec.maxReplicas}{"\n"}{end}`)
	t.Logf("HPA min/max replicas: %s", strings.TrimSpace(hpa))
	if strings.TrimSpace(hpa) != "1 10" {
		t.Fatalf("HPA bounds %q, want \"1 10\" (min-scale 1, max-scale 10)", hpa)
	}

	base := c.portForward(ns, pod, 2469)
	first := status(t, base)
	var st runner.Status
	testutil.WaitFor(t, 120*time.Second, "1,000 messages written by the udsink sidecar", func() bool {
		st = status(t, base)
		if st.Totals.Written < first.Totals.Written+1000 {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	// The example transformer drops every 10th message and fans some out
	// (cmd/example-udtransformer): written differs from read by design.
	t.Logf("flowing: read %d, written %d, acked %d, fallback %d, dropped by the transformer %d, by the sink %d, sink errors %d, transformer errors %d, pending %d",
		st.Totals.Read, st.Totals.Written, st.Totals.Acked, st.Totals.FallbackWritten, st.Totals.TransformerDropped, st.Totals.SinkDropped,
		st.Totals.SinkErrors, st.Totals.TransformerErrors, st.Pending)
	if st.Totals.Acked > st.Totals.Written+st.Totals.FallbackWritten+st.Totals.Dropped {
		t.Fatalf("acked %d > written %d + fallback %d + dropped %d: something unwritten was acked",
			st.Totals.Acked, st.Totals.Written, st.Totals.FallbackWritten, st.Totals.Dropped)
	}
	if st.Totals.SinkDropped != 0 || st.Totals.SinkErrors != 0 || st.Totals.TransformerErrors != 0 {
		t.Fatalf("sink dropped %d, sink errors %d, transformer errors %d: want none", st.Totals.SinkDropped, st.Totals.SinkErrors, st.Totals.TransformerErrors)
	}

	// Pause and resume through the ConfigMap: the same pod throughout.
	uid0, restarts0 := c.podUID(ns, pod)
	took := c.setPaused(ns, "pull-runner-config", base, true)
	// In-flight messages finish; then nothing more is read.
	testutil.WaitFor(t, 60*time.Second, "in-flight messages finished while paused", func() bool {
		st = status(t, base)
		if st.Totals.Read != st.Totals.Acked+st.Totals.Nacked {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	time.Sleep(5 * time.Second)
	later := status(t, base)
	t.Logf("paused after %v: state %s, read %d then %d 5 s later, acked %d", took, later.State, st.Totals.Read, later.Totals.Read, later.Totals.Acked)
	if later.Totals.Read != st.Totals.Read || later.State != "paused" {
		t.Fatalf("paused, yet read %d -> %d (state %s)", st.Totals.Read, later.Totals.Read, later.State)
	}
	took = c.setPaused(ns, "pull-runner-config", base, false)
	testutil.WaitFor(t, 60*time.Second, "reading again after the resume", func() bool {
		if status(t, base).Totals.Written < later.Totals.Written+500 {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	uid1, restarts1 := c.podUID(ns, pod)
	t.Logf("resumed after %v; pod UID before pause %s, after resume %s; runner restarts %s -> %s", took, uid0, uid1, restarts0, restarts1)
	if uid0 != uid1 || restarts0 != restarts1 {
		t.Fatalf("pause/resume recreated or restarted the pod: UID %s -> %s, restarts %s -> %s", uid0, uid1, restarts0, restarts1)
	}
	if n := c.runningPods(ns, "serving.knative.dev/service=pull-runner"); n != 1 {
		t.Fatalf("%d running pods, want the min-scale 1", n)
	}

	// Delete the pod mid-stream: it drains within the grace period.
	runnerLog := c.follow(ns, pod, "runner")
	sinkLog := c.follow(ns, pod, "udsink")
	before := status(t, base)
	start := time.Now()
	c.run(3*time.Minute, "kubectl", "-n", ns, "delete", "pod", pod, "--wait=true", "--timeout=150s")
	deleted := time.Since(start).Round(100 * time.Millisecond)
	stop := testutil.StopLine(t, runnerLog(60*time.Second))
	written, bad := sinkTotal(t, sinkLog(60*time.Second))
	t.Logf("deleted mid-stream (read %d when deleted) in %v (grace period 60 s): runner stopped with read %d, written %d, fallback %d, acked %d, nacked %d, dropped (by the transformer) %d; udsink wrote %d messages (%d not what the source made); lost %d",
		before.Totals.Read, deleted, stop.Read, stop.Written, stop.FallbackWritten, stop.Acked, stop.Nacked, stop.Dropped, written, bad, stop.Read-stop.Acked-stop.Nacked)
	switch {
	case stop.Read < before.Totals.Read:
		t.Fatalf("the stop line reads %d, fewer than the %d read before the delete", stop.Read, before.Totals.Read)
	case stop.Read != stop.Acked+stop.Nacked:
		t.Fatalf("read %d, acked %d, nacked %d: the drain left %d unfinished", stop.Read, stop.Acked, stop.Nacked, stop.Read-stop.Acked-stop.Nacked)
	case written != stop.Written || bad != 0:
		t.Fatalf("the udsink wrote %d messages (%d not what the source made), the runner counted %d written", written, bad, stop.Written)
	case stop.Acked > stop.Written+stop.FallbackWritten:
		t.Fatalf("acked %d > written %d + fallback %d", stop.Acked, stop.Written, stop.FallbackWritten)
	}
	// min-scale brings a new pod.
	next := c.pod(ns, "serving.knative.dev/service=pull-runner", "runner")
	if next == pod {
		t.Fatalf("the deleted pod %s is still the running one", pod)
	}
}

// runningPods counts the running pods the selector matches.
func (c *cluster) runningPods(ns, selector string) int {
	c.t.Helper()
	out := c.run(30*time.Second, "kubectl", "-n", ns, "get", "pods", "-l", selector,
		"--field-selector=status.phase=Running", "-o", `jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}`)
	return len(strings.Fields(out))
}

var sinkStopped = regexp.MustCompile(`stopped: wrote ([0-9]+) messages, ([0-9]+) of them not what example-udsource makes`)

// sinkTotal reads example-udsink's exit line: the messages it wrote, and
// those not what the source made. Its per-message lines cannot be counted
// once the kubelet has rotated the container's log.
func sinkTotal(t *testing.T, out string) (written, bad int64) {
	t.Helper()
	m := sinkStopped.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("no exit line in the udsink's log:\n%s", testutil.Tail(out, 2000))
	}
	written, _ = strconv.ParseInt(m[len(m)-1][1], 10, 64)
	bad, _ = strconv.ParseInt(m[len(m)-1][2], 10, 64)
	return written, bad
}

// TestPullRunnerKedaExample: deploy/pull-runner-keda/ applied as it is.
// This cluster has no KEDA or autoscaler-keda: Serving's HPA autoscaler
// takes the revision and holds min-scale, so what is shown is the pod and
// its flow (counted), not KEDA's scaling.
func TestPullRunnerKedaExample(t *testing.T) {
	c := newCluster(t)
	const ns, ksvc = "default", "pull-runner-keda"
	c.deleteAtEnd("deploy/pull-runner-keda/")
	t.Logf("ko apply -f deploy/pull-runner-keda/:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "deploy/pull-runner-keda/"))
	c.waitReady(ns, ksvc)
	pod := c.pod(ns, "serving.knative.dev/service="+ksvc, "runner", "udsource", "udtransformer", "udsink", "queue-proxy")
	base := c.portForward(ns, pod, 2469)
	var st runner.Status
	testutil.WaitFor(t, 120*time.Second, "10,000 messages acked", func() bool {
		st = status(t, base)
		if st.Totals.Acked < 10_000 {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	t.Logf("%s: read %d, written %d, acked %d, dropped by the transformer %d, sink errors %d, sink dropped %d",
		ksvc, st.Totals.Read, st.Totals.Written, st.Totals.Acked, st.Totals.TransformerDropped, st.Totals.SinkErrors, st.Totals.SinkDropped)
	if st.Totals.SinkDropped != 0 || st.Totals.SinkErrors != 0 || st.Totals.Acked > st.Totals.Written+st.Totals.TransformerDropped {
		t.Fatalf("sink dropped %d, errors %d; acked %d > written %d + dropped by the transformer %d",
			st.Totals.SinkDropped, st.Totals.SinkErrors, st.Totals.Acked, st.Totals.Written, st.Totals.TransformerDropped)
	}
}
