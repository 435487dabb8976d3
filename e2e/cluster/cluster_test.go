// Package cluster_test runs the deploy/ examples on a real single-node
// Kubernetes with Knative, the one hack/cluster/up.sh starts on this
// machine, with the commands a user types: ko apply, kn service create,
// kubectl. It needs the cluster's env file:
//
//	bash hack/cluster/up.sh     # last line: the env file
//	MONOVERTEX_CLUSTER_ENV=/var/cache/monovertex-cluster/state/env go test -v ./e2e/cluster/
//
// Without MONOVERTEX_CLUSTER_ENV every test skips: starting the cluster
// takes minutes (tens of minutes cold) and root, which a unit-test run must
// not do behind the user's back; CI runs up.sh first and sets the variable.
package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// EnvVar names the variable holding the path of up.sh's env file.
const EnvVar = "MONOVERTEX_CLUSTER_ENV"

// cluster is what a test needs to act as a user of the cluster.
type cluster struct {
	t    *testing.T
	env  []string // the process environment after `. <env file>`
	root string   // the repository root, where the user runs ko
}

// newCluster skips the test unless the env file is given, and loads it the
// way a user's shell does.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	path := os.Getenv(EnvVar)
	if path == "" {
		t.Skipf("no cluster: run `bash hack/cluster/up.sh` and set %s to the env file it prints", EnvVar)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s=%s: %v", EnvVar, path, err)
	}
	// Sourcing it in bash gives exactly the environment the README's
	// commands run in (PATH extended, not replaced).
	out, err := exec.Command("bash", "-c", `set -e; . "$0"; env -0`, path).Output()
	if err != nil {
		t.Fatalf("sourcing %s: %v", path, err)
	}
	c := &cluster{t: t, root: testutil.ModuleRoot(t)}
	for _, kv := range strings.Split(string(out), "\x00") {
		if kv != "" {
			c.env = append(c.env, kv)
		}
	}
	if _, err := c.try(30*time.Second, "kubectl", "get", "--raw", "/readyz"); err != nil {
		t.Fatalf("the cluster of %s does not answer: %v", path, err)
	}
	return c
}

// lookPath finds name in the PATH of the cluster's environment, as the
// user's shell would after sourcing the env file: exec.Command looks in
// this process's PATH, which would miss the built ko, kn and kubectl (or
// find another kubectl first).
func (c *cluster) lookPath(name string) string {
	for _, kv := range c.env {
		if dirs, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(dirs) {
				p := filepath.Join(d, name)
				if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
					return p
				}
			}
		}
	}
	return name
}

// try runs a command from the repository root with the cluster's
// environment and returns its stdout; stderr goes into the error.
func (c *cluster) try(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.lookPath(name), args...)
	cmd.Dir = c.root
	cmd.Env = c.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, testutil.Tail(stderr.String(), 4000))
	}
	return string(out), nil
}

// run is try that fails the test.
func (c *cluster) run(timeout time.Duration, name string, args ...string) string {
	c.t.Helper()
	out, err := c.try(timeout, name, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// waitReady waits for Knative Services to be Ready and logs how long.
func (c *cluster) waitReady(ns string, ksvcs ...string) {
	c.t.Helper()
	start := time.Now()
	args := []string{"-n", ns, "wait", "--for=condition=Ready", "--timeout=400s"}
	for _, k := range ksvcs {
		args = append(args, "ksvc/"+k)
	}
	if _, err := c.try(410*time.Second, "kubectl", args...); err != nil {
		c.dump(ns)
		c.t.Fatal(err)
	}
	c.t.Logf("Ready after %v: ksvc %s", time.Since(start).Round(100*time.Millisecond), strings.Join(ksvcs, ", "))
}

// waitRoute waits until the ingress routes a Service's host to its pods:
// GET /health through it answers 200. Ready on the ksvc comes from the
// Knative Ingress's status, which Traefik sets a throttle interval after it
// hands the route to its router, not once the router serves it; before
// that the ingress answers 404 for the host.
func (c *cluster) waitRoute(ns, ksvc string) {
	c.t.Helper()
	ingress, host := c.getenv("MONOVERTEX_CLUSTER_INGRESS"), ksvc+"."+ns+".example.com"
	client := http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	var last string
	for time.Since(start) < 90*time.Second {
		req, err := http.NewRequest(http.MethodGet, ingress+"/health", nil)
		if err != nil {
			c.t.Fatal(err)
		}
		req.Host = host
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.t.Logf("%s routed by the ingress after %v", host, time.Since(start).Round(100*time.Millisecond))
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(500 * time.Millisecond)
	}
	c.t.Fatalf("the ingress did not route %s within 90 s (GET /health: %s)", host, last)
}

// dump logs what a failing wait leaves to look at.
func (c *cluster) dump(ns string) {
	out, _ := c.try(30*time.Second, "kubectl", "-n", ns, "get", "ksvc,revision,pods", "-o", "wide")
	c.t.Log(out)
	out, _ = c.try(30*time.Second, "kubectl", "-n", ns, "get", "ksvc", "-o", "jsonpath={range .items[*]}{.metadata.name}: {.status.conditions}{\"\\n\"}{end}")
	c.t.Log(out)
	out, _ = c.try(30*time.Second, "kubectl", "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
	c.t.Log(testutil.Tail(out, 6000))
}

// runnerPod returns the name of the one running pod of a Knative Service and
// logs its containers, which must include the runner and queue-proxy.
func (c *cluster) runnerPod(ns, ksvc string) string {
	c.t.Helper()
	return c.pod(ns, "serving.knative.dev/service="+ksvc, "runner", "queue-proxy")
}

// pod returns the name of the one running pod the label selector matches,
// logs its containers and checks that they include want.
func (c *cluster) pod(ns, selector string, want ...string) string {
	c.t.Helper()
	var name, containers string
	testutil.WaitFor(c.t, 180*time.Second, "one running pod of "+selector, func() bool {
		out, err := c.try(30*time.Second, "kubectl", "-n", ns, "get", "pods", "-l", selector,
			"--field-selector=status.phase=Running", "-o", `jsonpath={range .items[*]}{.metadata.name} {range .spec.containers[*]}{.name},{end}{"\n"}{end}`)
		f := strings.Fields(out)
		if err != nil || len(f) != 2 {
			time.Sleep(time.Second)
			return false
		}
		name, containers = f[0], strings.TrimSuffix(f[1], ",")
		return true
	})
	c.t.Logf("pod %s: containers %s", name, containers)
	for _, w := range want {
		if !strings.Contains(","+containers+",", ","+w+",") {
			c.t.Fatalf("pod %s has containers %s, want %s among them", name, containers, w)
		}
	}
	return name
}

// portForward forwards a free loopback port to the pod's port and returns
// its base URL.
func (c *cluster) portForward(ns, pod string, port int) string {
	c.t.Helper()
	local := testutil.FreePort(c.t)
	cmd := exec.Command(c.lookPath("kubectl"), "-n", ns, "port-forward", "--address", "127.0.0.1", "pod/"+pod, fmt.Sprintf("%d:%d", local, port))
	cmd.Dir = c.root
	cmd.Env = c.env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "Forwarding from") {
				ready <- true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	// kubectl prints "Forwarding from ..." once it listens.
	testutil.Receive(c.t, ready, 30*time.Second, nil)
	return fmt.Sprintf("http://127.0.0.1:%d", local)
}

// totals are the runner's counters the tests compare.
type totals struct{ read, written, acked, nacked, errors int64 }

// metrics reads the runner's Prometheus counters (sums over labels).
func metrics(t *testing.T, base string) totals {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := f[0]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err == nil {
			sum[name] += v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return totals{
		read:    int64(sum["monovtx_read_total"]),
		written: int64(sum["monovtx_sink_write_total"]),
		acked:   int64(sum["monovtx_ack_total"]),
		nacked:  int64(sum["monovtx_nack_total"]),
		errors: int64(sum["monovtx_sink_write_errors_total"] + sum["monovtx_transformer_errors_total"] +
			sum["monovtx_fallback_sink_write_errors_total"]),
	}
}

var sinkLine = regexp.MustCompile(`^sink id="[^"]*" .*value="([^"]*)"`)

// checkFlow follows a running runner pod with the log sink through the
// function: its counters grow, nothing fails, and the log sink printed
// each written message once, upper-cased by the function.
func (c *cluster) checkFlow(ns, ksvc string) {
	c.t.Helper()
	pod := c.runnerPod(ns, ksvc)
	base := c.portForward(ns, pod, 2469)
	first := metrics(c.t, base)
	var second totals
	testutil.WaitFor(c.t, 120*time.Second, "messages written through the function", func() bool {
		second = metrics(c.t, base)
		if second.written < first.written+200 {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	logs := c.run(60*time.Second, "kubectl", "-n", ns, "logs", pod, "-c", "runner")
	third := metrics(c.t, base)
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.HasPrefix(l, "sink ") {
			m := sinkLine.FindStringSubmatch(l)
			if m == nil {
				c.t.Fatalf("log sink line %q: no value", l)
			}
			if m[1] != strings.ToUpper(m[1]) {
				c.t.Fatalf("log sink line %q: value not upper-cased by the function", l)
			}
			lines = append(lines, l)
		}
	}
	printed := int64(testutil.LogSinkIDs(c.t, strings.Join(lines, "\n")))
	c.t.Logf("%s: read %d, written %d, acked %d, nacked %d, errors %d (%d while starting, retried); log sink lines %d (written before/after the log read: %d/%d)",
		ksvc, third.read, third.written, third.acked, third.nacked, third.errors, first.errors, printed, second.written, third.written)
	switch {
	case third.errors != first.errors || third.nacked != 0:
		// Calls that failed while the function's first pod was starting
		// (the two Services are applied together) are retried, not lost;
		// once both are Ready, none may fail.
		c.t.Fatalf("errors %d (%d once both were Ready), nacked %d: want none once Ready", third.errors, third.errors-first.errors, third.nacked)
	case third.acked > third.written:
		c.t.Fatalf("acked %d > written %d: something unwritten was acked", third.acked, third.written)
	case printed < second.written || printed > third.written:
		c.t.Fatalf("log sink printed %d lines, want between %d and %d (written before and after reading the log)",
			printed, second.written, third.written)
	}
}

// cleanupKsvc deletes Knative Services at the end of a test and waits for
// their pods to go, so the next test starts on an empty namespace.
func (c *cluster) cleanupKsvc(ns string, ksvcs ...string) {
	c.t.Cleanup(func() {
		args := append([]string{"-n", ns, "delete", "ksvc", "--ignore-not-found", "--wait=true", "--timeout=120s"}, ksvcs...)
		if _, err := c.try(130*time.Second, "kubectl", args...); err != nil {
			c.t.Log(err)
		}
	})
}

// deleteAtEnd deletes what the files or directories describe when the
// test ends, waiting for it to go, so the next test starts on an empty
// cluster.
func (c *cluster) deleteAtEnd(files ...string) {
	c.t.Cleanup(func() {
		for _, f := range files {
			if _, err := c.try(3*time.Minute, "kubectl", "delete", "-f", f, "--ignore-not-found", "--wait=true", "--timeout=150s"); err != nil {
				c.t.Log(err)
			}
		}
	})
}

// TestFunctionExample: `ko apply -f deploy/function/` as the README says;
// both Services become Ready and the runner's messages flow through the
// function into the log sink, counted.
func TestFunctionExample(t *testing.T) {
	c := newCluster(t)
	c.cleanupKsvc("default", "example-function", "function-runner")
	out := c.run(15*time.Minute, "ko", "apply", "-f", "deploy/function/")
	t.Logf("ko apply -f deploy/function/:\n%s", out)
	c.waitReady("default", "example-function", "function-runner")
	c.checkFlow("default", "function-runner")
}

// TestKnServiceCreate: the function deployed as the README says, `kn service
// create example-function --image $(ko build ./cmd/example-function)`, and
// the runner of deploy/function/ calling it by its cluster-local URL.
func TestKnServiceCreate(t *testing.T) {
	c := newCluster(t)
	c.cleanupKsvc("default", "example-function", "function-runner")
	img := strings.TrimSpace(c.run(15*time.Minute, "ko", "build", "./cmd/example-function"))
	t.Logf("ko build ./cmd/example-function: %s", img)
	out := c.run(6*time.Minute, "kn", "service", "create", "example-function", "--image", img)
	t.Logf("kn service create:\n%s", testutil.Tail(out, 2000))
	c.waitReady("default", "example-function")
	// The runner alone: the function-runner document of deploy/function/.
	runner := filepath.Join(t.TempDir(), "runner.yaml")
	if err := os.WriteFile(runner, []byte(document(t, filepath.Join(c.root, "deploy/function/function.yaml"), "function-runner")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("ko apply -f (the function-runner Service of deploy/function/):\n%s", c.run(15*time.Minute, "ko", "apply", "-f", runner))
	c.waitReady("default", "function-runner")
	c.checkFlow("default", "function-runner")
}

// document returns the YAML document of file whose metadata.name is name.
func document(t *testing.T, file, name string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if regexp.MustCompile(`(?m)^metadata:\n  name: ` + regexp.QuoteMeta(name) + `\n`).MatchString(doc) {
			return doc
		}
	}
	t.Fatalf("%s has no document named %s", file, name)
	return ""
}

// TestContainerSourceExample: deploy/containersource/ (runner -> Broker via
// K_SINK -> Trigger -> event-display). The only change to the example is
// event-display's image, which cannot be pulled here: the cluster builds
// the same program from knative.dev/eventing. Every event the runner wrote
// before a given moment reaches the subscriber (counted by ID).
func TestContainerSourceExample(t *testing.T) {
	c := newCluster(t)
	display := c.getenv("MONOVERTEX_CLUSTER_EVENT_DISPLAY")
	dir := t.TempDir()
	for _, f := range []string{"containersource.yaml", "monitoring.yaml"} {
		b, err := os.ReadFile(filepath.Join(c.root, "deploy/containersource", f))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "gcr.io/knative-releases/knative.dev/eventing/cmd/event_display", display)
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.deleteAtEnd(dir)
	t.Logf("ko apply -f deploy/containersource/ (event-display image %s):\n%s", display, c.run(15*time.Minute, "ko", "apply", "-f", dir))
	start := time.Now()
	for _, r := range []string{"broker/monovertex", "containersource/runner-to-broker", "ksvc/event-display", "trigger/monovertex-to-event-display"} {
		if _, err := c.try(410*time.Second, "kubectl", "wait", "--for=condition=Ready", "--timeout=400s", r); err != nil {
			c.dump("default")
			t.Fatal(err)
		}
	}
	t.Logf("Ready after %v: broker, containersource, ksvc event-display, trigger", time.Since(start).Round(100*time.Millisecond))
	runner := c.pod("default", "app.kubernetes.io/instance=runner-to-broker,!serving.knative.dev/service", "runner")
	c.countAtEventDisplay("default", "runner-to-broker", c.portForward("default", runner, 2469), "event-display")
}

// countAtEventDisplay waits until the runner at base (admin port) has
// written 20 events, then until event-display (the Knative Service
// display) has logged every event the runner had written by then,
// counted by distinct ID; no failures, and no ID it did not write.
func (c *cluster) countAtEventDisplay(ns, name, base, display string) {
	t := c.t
	t.Helper()
	var before totals
	testutil.WaitFor(t, 120*time.Second, "events written to the Broker", func() bool {
		before = metrics(t, base)
		if before.written < 20 {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	idLine := regexp.MustCompile(`(?m)^  id: (.+)$`)
	var got map[string]bool
	testutil.WaitFor(t, 120*time.Second, fmt.Sprintf("%d events at %s", before.written, display), func() bool {
		out, err := c.try(60*time.Second, "kubectl", "-n", ns, "logs", "-l", "serving.knative.dev/service="+display, "-c", "user-container", "--tail=-1")
		if err != nil {
			t.Log(err)
			return false
		}
		got = map[string]bool{}
		for _, m := range idLine.FindAllStringSubmatch(out, -1) {
			got[m[1]] = true
		}
		if int64(len(got)) < before.written {
			time.Sleep(2 * time.Second)
			return false
		}
		return true
	})
	after := metrics(t, base)
	t.Logf("%s: written %d (then %d), acked %d, nacked %d, errors %d; distinct event IDs at %s %d",
		name, before.written, after.written, after.acked, after.nacked, after.errors, display, len(got))
	if after.errors != 0 || after.nacked != 0 {
		t.Fatalf("errors %d, nacked %d: want none", after.errors, after.nacked)
	}
	if int64(len(got)) > after.written {
		t.Fatalf("%s saw %d distinct IDs, more than the %d written", display, len(got), after.written)
	}
}

// TestSinkBindingToBroker: a runner as a Knative Service whose K_SINK a
// SinkBinding injects (testdata/sinkbinding.yaml): its events reach a
// subscriber through the Broker and a Trigger, counted by ID.
func TestSinkBindingToBroker(t *testing.T) {
	c := newCluster(t)
	b, err := os.ReadFile(filepath.Join(c.root, "e2e/cluster/testdata/sinkbinding.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sinkbinding.yaml")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(string(b), "EVENT_DISPLAY", c.getenv("MONOVERTEX_CLUSTER_EVENT_DISPLAY"))), 0o644); err != nil {
		t.Fatal(err)
	}
	c.deleteAtEnd(file)
	t.Logf("ko apply -f e2e/cluster/testdata/sinkbinding.yaml:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", file))
	start := time.Now()
	for _, r := range []string{"broker/sb-broker", "sinkbinding/sb-runner-to-broker", "ksvc/sb-runner", "ksvc/sb-display", "trigger/sb-broker-to-display"} {
		if _, err := c.try(410*time.Second, "kubectl", "wait", "--for=condition=Ready", "--timeout=400s", r); err != nil {
			c.dump("default")
			t.Fatal(err)
		}
	}
	t.Logf("Ready after %v: broker, sinkbinding, ksvc sb-runner and sb-display, trigger", time.Since(start).Round(100*time.Millisecond))
	// The binding's webhook sets K_SINK when it sees the Service created;
	// when the Service arrives first (one ko apply races the binding's
	// informer), the binding patches it and a second revision carries
	// K_SINK while the first, without it, exits 2. Either way the latest
	// ready revision is the one to count.
	rev := c.run(30*time.Second, "kubectl", "get", "ksvc", "sb-runner", "-o", "jsonpath={.status.latestReadyRevisionName}")
	t.Logf("latest ready revision of sb-runner: %s", rev)
	pod := c.pod("default", "serving.knative.dev/revision="+rev, "runner", "queue-proxy")
	sink := c.run(30*time.Second, "kubectl", "get", "pod", pod, "-o", `jsonpath={.spec.containers[?(@.name=="runner")].env[?(@.name=="K_SINK")].value}`)
	t.Logf("K_SINK injected by the SinkBinding: %s", sink)
	if !strings.Contains(sink, "broker-ingress") {
		t.Fatalf("K_SINK %q is not the Broker's address", sink)
	}
	c.countAtEventDisplay("default", "sb-runner", c.portForward("default", pod, 2469), "sb-display")
}

// TestHTTPIngestExample: deploy/http-ingest/; posts through Traefik (the
// Knative ingress) each answered only after delivery: every answered post is
// one log sink line.
func TestHTTPIngestExample(t *testing.T) {
	c := newCluster(t)
	c.cleanupKsvc("default", "http-ingest")
	t.Logf("ko apply -f deploy/http-ingest/:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "deploy/http-ingest/"))
	c.waitReady("default", "http-ingest")
	c.waitRoute("default", "http-ingest")
	ingress := c.getenv("MONOVERTEX_CLUSTER_INGRESS")
	const posts = 200
	client := http.Client{Timeout: 60 * time.Second}
	for i := 0; i < posts; i++ {
		req, err := http.NewRequest(http.MethodPost, ingress+"/", strings.NewReader(fmt.Sprintf(`{"n":%d}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "http-ingest.default.example.com"
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("post %d: %s %s", i, resp.Status, body)
		}
	}
	out := c.run(60*time.Second, "kubectl", "logs", "-l", "serving.knative.dev/service=http-ingest", "-c", "runner", "--tail=-1", "--prefix=false")
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "sink ") {
			lines = append(lines, l)
		}
	}
	printed := testutil.LogSinkIDs(t, strings.Join(lines, "\n"))
	t.Logf("http-ingest: %d posts answered 2xx through the ingress, %d log sink lines", posts, printed)
	if printed != posts {
		t.Fatalf("log sink printed %d messages, want %d (one per answered post)", printed, posts)
	}
}

// getenv returns a variable of the cluster's env file.
func (c *cluster) getenv(name string) string {
	c.t.Helper()
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok && v != "" {
			return v
		}
	}
	c.t.Fatalf("%s is not set by the env file", name)
	return ""
}
