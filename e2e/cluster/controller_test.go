package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// The controller runs where deploy/controller/ puts it; TestController's
// MonoVertex objects live in a namespace of their own.
const (
	ctlSystemNS = "monovertex-system"
	ctlNS       = "mvtx-ctl-test"
)

// writeTemp writes s to a file of the test's temporary directory.
func writeTemp(t *testing.T, name, s string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// installController runs `ko apply -f deploy/controller/` as the docs
// say, and waits for the controller and its webhook.
func (c *cluster) installController() {
	c.t.Helper()
	c.deleteAtEnd(filepath.Join(c.root, "deploy/controller"))
	c.t.Logf("ko apply -f deploy/controller/:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "deploy/controller/"))
	c.run(6*time.Minute, "kubectl", "-n", ctlSystemNS, "rollout", "status", "deployment/monovertex-controller", "--timeout=300s")
	// The webhook writes its rules into the configuration once it runs.
	testutil.WaitFor(c.t, 120*time.Second, "the webhook's rules", func() bool {
		out, _ := c.try(30*time.Second, "kubectl", "get", "validatingwebhookconfiguration", "validation.webhook.monovertex.numaflow.numaproj.io",
			"-o", "jsonpath={.webhooks[0].rules[0].resources}")
		if strings.Contains(out, "monovertices") {
			return true
		}
		time.Sleep(2 * time.Second)
		return false
	})
}

// corpusInNS is a corpus manifest moved into ctlNS, with edit applied.
func (c *cluster) corpusInNS(name string, edit func(string) string) string {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.root, "cmd/mvctl/testdata/corpus", name+".yaml"))
	if err != nil {
		c.t.Fatal(err)
	}
	s := strings.Replace(string(b), "  namespace: streams\n", "  namespace: "+ctlNS+"\n", 1)
	if !strings.Contains(s, "namespace: "+ctlNS) {
		s = strings.Replace(s, "metadata:\n", "metadata:\n  namespace: "+ctlNS+"\n", 1)
	}
	if edit != nil {
		s = edit(s)
	}
	return writeTemp(c.t, name+".yaml", s)
}

var metaName = regexp.MustCompile(`(?m)^  name: (\S+)$`)

// corpusThroughController applies the corpus MonoVertex of file with
// `ko apply` (it builds the ko:// images the manifest names; kubectl apply
// after ko resolve is the same), waits for Ready with one revision, counts
// 100 messages finished in its pod, then deletes it and waits until what
// it owned is gone.
func (c *cluster) corpusThroughController(file string) {
	t := c.t
	mvFile := c.corpusInNS(file, nil)
	b, err := os.ReadFile(mvFile)
	if err != nil {
		t.Fatal(err)
	}
	name := metaName.FindStringSubmatch(string(b))[1]
	t.Logf("ko apply -f %s.yaml: %s", file, c.run(15*time.Minute, "ko", "apply", "-f", mvFile))
	defer func() {
		c.run(3*time.Minute, "kubectl", "-n", ctlNS, "delete", "mvtx", name, "--wait=true", "--timeout=150s")
		testutil.WaitFor(t, 180*time.Second, "the Service and ConfigMap of "+name+" to be collected", func() bool {
			out := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc,configmap", "-l", "app.kubernetes.io/instance="+name, "-o", "name")
			if strings.TrimSpace(out) == "" {
				return true
			}
			time.Sleep(2 * time.Second)
			return false
		})
	}()
	if _, err := c.try(410*time.Second, "kubectl", "-n", ctlNS, "wait", "--for=condition=Ready", "--timeout=400s", "mvtx/"+name); err != nil {
		c.dump(ctlNS)
		t.Fatalf("%v; status: %s", err, c.mvtx(name, "{.status}"))
	}
	rev := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc", name, "-o", "jsonpath={.status.latestCreatedRevisionName}")
	// udsource-pipeline asks for two replicas: any running one will do.
	var pod string
	testutil.WaitFor(t, 180*time.Second, "a running pod of "+name, func() bool {
		out, _ := c.try(30*time.Second, "kubectl", "-n", ctlNS, "get", "pods", "-l", "serving.knative.dev/service="+name,
			"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		if f := strings.Fields(out); len(f) > 0 {
			pod = f[0]
			return true
		}
		time.Sleep(time.Second)
		return false
	})
	base := c.portForward(ctlNS, pod, 2469)
	if file == "http-blackhole" {
		c.postTo(ctlNS, pod, 100)
	}
	var st runner.Status
	testutil.WaitFor(t, 180*time.Second, "100 messages finished in "+pod, func() bool {
		st = status(t, base)
		if st.Totals.Acked < 100 {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	t.Logf("mvtx/%s Ready (%s, phase %s, revision %s); %s (%s): read %d, written %d, fallback %d, on-success %d, acked %d, sink dropped %d",
		name, c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "mvtx", name, "--no-headers"), c.mvtx(name, "{.status.phase}"), rev,
		pod, strings.Join(st.Chain, " -> "), st.Totals.Read, st.Totals.Written, st.Totals.FallbackWritten, st.Totals.OnSuccessWritten, st.Totals.Acked, st.Totals.SinkDropped)
	switch {
	case rev != name+"-00001":
		t.Errorf("latest created revision %q, want %s-00001", rev, name)
	case st.Totals.SinkDropped != 0:
		t.Errorf("%d messages dropped at the sink", st.Totals.SinkDropped)
	case st.Totals.Acked > st.Totals.Read:
		t.Errorf("acked %d of %d read", st.Totals.Acked, st.Totals.Read)
	case file == "http-blackhole" && (st.Totals.Read != 100 || st.Totals.Written != 100 || st.Totals.Acked != 100):
		t.Errorf("100 posts answered 2xx, yet read %d, written %d, acked %d", st.Totals.Read, st.Totals.Written, st.Totals.Acked)
	}
}

func (c *cluster) mvtx(name, jsonpath string) string {
	out, _ := c.try(30*time.Second, "kubectl", "-n", ctlNS, "get", "mvtx", name, "-o", "jsonpath="+jsonpath)
	return out
}

// waitWritten waits until the runner behind base has written at least n
// messages and returns the count.
func waitWritten(t *testing.T, base string, n int64) int64 {
	t.Helper()
	var w int64
	testutil.WaitFor(t, 120*time.Second, fmt.Sprintf("%d messages written", n), func() bool {
		w = status(t, base).Totals.Written
		if w < n {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	return w
}

// TestController: `ko apply -f deploy/controller/`, then
// `kubectl apply` of a corpus MonoVertex: it becomes Ready with a running
// pod that processes messages (counted); desiredPhase Paused and back keeps
// the pod (same UID) and stops then resumes processing; a changed field
// rolls a new revision; invalid MonoVertex objects are refused with their
// path; a kill -9 of the controller mid-reconcile converges; deleting the
// MonoVertex removes its Service and ConfigMap.
func TestController(t *testing.T) {
	c := newCluster(t)
	if _, err := c.try(30*time.Second, "kubectl", "get", "namespace", ctlNS); err != nil {
		c.run(30*time.Second, "kubectl", "create", "namespace", ctlNS)
	}
	c.installController()

	const name = "generator-log"
	mvFile := c.corpusInNS(name, nil)
	t.Logf("kubectl apply -f %s.yaml: %s", name, c.run(time.Minute, "kubectl", "apply", "-f", mvFile))
	start := time.Now()
	if _, err := c.try(410*time.Second, "kubectl", "-n", ctlNS, "wait", "--for=condition=Ready", "--timeout=400s", "mvtx/"+name); err != nil {
		c.dump(ctlNS)
		t.Fatalf("%v; status: %s", err, c.mvtx(name, "{.status}"))
	}
	t.Logf("mvtx/%s Ready after %v; kubectl get mvtx: %s", name, time.Since(start).Round(100*time.Millisecond),
		c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "mvtx", name))
	if ph := c.mvtx(name, "{.status.phase}"); ph != "Running" {
		t.Fatalf("phase %q, want Running", ph)
	}

	// One revision: the controller does not rewrite the Service Knative
	// defaulted on create.
	if rev := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc", name, "-o", "jsonpath={.status.latestCreatedRevisionName}"); rev != name+"-00001" {
		t.Errorf("latest created revision %q after the create, want %s-00001", rev, name)
	}

	pod := c.runnerPod(ctlNS, name)
	uid, _ := c.podUID(ctlNS, pod)
	base := c.portForward(ctlNS, pod, 2469)
	w := waitWritten(t, base, 100)
	t.Logf("running: %d written", w)

	t.Run("every corpus MonoVertex the tests build", func(t *testing.T) {
		for _, file := range []string{"generator-blob-log", "http-blackhole", "udf-onsuccess-bypass", "udsource-transformer-udsink"} {
			t.Run(file, func(t *testing.T) { c.with(t).corpusThroughController(file) })
		}
	})

	t.Run("pause and resume keep the pod", func(t *testing.T) {
		c := c.with(t)
		rev := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc", name, "-o", "jsonpath={.status.latestCreatedRevisionName}")
		patch := func(phase string) {
			c.run(30*time.Second, "kubectl", "-n", ctlNS, "patch", "mvtx", name, "--type", "merge",
				"-p", fmt.Sprintf(`{"spec":{"lifecycle":{"desiredPhase":%q}}}`, phase))
		}
		patch("Paused")
		testutil.WaitFor(t, 200*time.Second, "the runner to report paused", func() bool {
			if status(t, base).Paused {
				return true
			}
			time.Sleep(2 * time.Second)
			return false
		})
		r1 := status(t, base).Totals.Read
		time.Sleep(5 * time.Second)
		r2 := status(t, base).Totals.Read
		if r2 != r1 {
			t.Fatalf("paused, yet read %d more", r2-r1)
		}
		if ph := c.mvtx(name, "{.status.phase}"); ph != "Paused" {
			t.Errorf("phase %q while paused", ph)
		}
		patch("Running")
		w := waitWritten(t, base, status(t, base).Totals.Written+50)
		after := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc", name, "-o", "jsonpath={.status.latestCreatedRevisionName}")
		uid2, restarts := c.podUID(ctlNS, pod)
		t.Logf("paused: read %d in 5s; resumed: %d written; revision %s -> %s; pod uid %s -> %s, restarts %s", r2-r1, w, rev, after, uid, uid2, restarts)
		if uid2 != uid || after != rev || restarts != "0" {
			t.Fatalf("pause and resume replaced the pod or the revision")
		}
	})

	t.Run("a changed field rolls a new revision", func(t *testing.T) {
		c := c.with(t)
		rev := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc", name, "-o", "jsonpath={.status.latestCreatedRevisionName}")
		c.run(30*time.Second, "kubectl", "-n", ctlNS, "patch", "mvtx", name, "--type", "merge", "-p", `{"spec":{"limits":{"readBatchSize":7}}}`)
		var now string
		testutil.WaitFor(t, 300*time.Second, "a new ready revision with MV_READ_BATCH_SIZE=7", func() bool {
			now = c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc", name, "-o", "jsonpath={.status.latestReadyRevisionName}")
			env := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc", name, "-o",
				`jsonpath={.spec.template.spec.containers[0].env[?(@.name=="MV_READ_BATCH_SIZE")].value}`)
			if now != rev && now != "" && env == "7" {
				return true
			}
			time.Sleep(2 * time.Second)
			return false
		})
		if _, err := c.try(410*time.Second, "kubectl", "-n", ctlNS, "wait", "--for=condition=Ready", "--timeout=400s", "mvtx/"+name); err != nil {
			t.Fatal(err)
		}
		t.Logf("revision %s -> %s; observedGeneration %s", rev, now, c.mvtx(name, "{.status.observedGeneration}"))
	})

	t.Run("invalid MonoVertex refused with the path", func(t *testing.T) {
		c := c.with(t)
		for _, tc := range []struct{ name, from, to, want string }{
			{"rate-min-above-max", "    readBatchSize: 100\n", "    readBatchSize: 100\n    rateLimit:\n      min: 10\n      max: 5\n", "spec.limits.rateLimit.min: 10 is more than max (5)"},
			{"misspelt", "    readBatchSize: 100\n", "    readBatchSise: 100\n", "spec.limits.readBatchSise"},
		} {
			file := c.corpusInNS(name, func(s string) string {
				s = strings.Replace(s, "  name: "+name+"\n", "  name: bad-"+tc.name+"\n", 1)
				return strings.Replace(s, tc.from, tc.to, 1)
			})
			out, err := c.try(time.Minute, "kubectl", "apply", "-f", file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: kubectl apply: %q, %v; want refused with %q", tc.name, out, err, tc.want)
				continue
			}
			t.Logf("%s refused: %s", tc.name, testutil.Tail(err.Error(), 400))
		}
	})

	t.Run("controller killed mid-reconcile converges", func(t *testing.T) {
		c := c.with(t)
		ctl := c.pod(ctlSystemNS, "app=monovertex-controller")
		c.run(30*time.Second, "kubectl", "-n", ctlNS, "patch", "mvtx", name, "--type", "merge", "-p", `{"spec":{"limits":{"readBatchSize":9}}}`)
		// SIGKILL: no grace period, no lease release.
		c.run(60*time.Second, "kubectl", "-n", ctlSystemNS, "delete", "pod", ctl, "--grace-period=0", "--force")
		testutil.WaitFor(t, 400*time.Second, "MV_READ_BATCH_SIZE=9 and Ready", func() bool {
			env := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc", name, "-o",
				`jsonpath={.spec.template.spec.containers[0].env[?(@.name=="MV_READ_BATCH_SIZE")].value}`)
			ready := c.mvtx(name, `{.status.conditions[?(@.type=="Ready")].status}`)
			gen, obs := c.mvtx(name, "{.metadata.generation}"), c.mvtx(name, "{.status.observedGeneration}")
			if env == "9" && ready == "True" && gen == obs {
				return true
			}
			time.Sleep(2 * time.Second)
			return false
		})
		n := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc,configmap", "-l", "app.kubernetes.io/instance="+name, "-o", "name")
		t.Logf("after the kill: %s", strings.Join(strings.Fields(n), ", "))
		if got := len(strings.Fields(n)); got != 2 {
			t.Fatalf("%d objects of %s, want its one Service and one ConfigMap", got, name)
		}
	})

	t.Run("deleting the MonoVertex removes what it owned", func(t *testing.T) {
		c := c.with(t)
		c.run(3*time.Minute, "kubectl", "-n", ctlNS, "delete", "mvtx", name, "--wait=true", "--timeout=150s")
		testutil.WaitFor(t, 180*time.Second, "the Service and ConfigMap to be collected", func() bool {
			out := c.run(30*time.Second, "kubectl", "-n", ctlNS, "get", "ksvc,configmap", "-l", "app.kubernetes.io/instance="+name, "-o", "name")
			if strings.TrimSpace(out) == "" {
				return true
			}
			time.Sleep(2 * time.Second)
			return false
		})
	})
}
