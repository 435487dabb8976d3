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

// TestMvctlConvertCorpus: Numaflow MonoVertex manifests of the corpus
// (cmd/mvctl/testdata/corpus) whose images this machine can build and whose
// source needs nothing outside the pod, converted with `mvctl convert` and
// applied with `ko apply` as docs/from-numaflow.md says; each Service
// becomes Ready and its runner processes messages, counted by /status.
func TestMvctlConvertCorpus(t *testing.T) {
	c := newCluster(t)
	mvctl := testutil.Build(t, "./cmd/mvctl")
	for _, name := range []string{"generator-log", "generator-blob-log", "udf-onsuccess-bypass", "http-blackhole"} {
		t.Run(name, func(t *testing.T) {
			c := c.with(t)
			out, err := c.try(time.Minute, mvctl, "convert", "-f", filepath.Join("cmd/mvctl/testdata/corpus", name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), name+".knative.yaml")
			if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			ns, ksvc := manifestNamespace(out), serviceName(t, out)
			if ns != "default" {
				// The namespace the MonoVertex named; a user makes it first.
				if _, err := c.try(30*time.Second, "kubectl", "get", "namespace", ns); err != nil {
					c.run(30*time.Second, "kubectl", "create", "namespace", ns)
				}
			}
			c.deleteAtEnd(file)
			t.Logf("mvctl convert -f %s.yaml | ko apply -f -:\n%s", name, c.run(15*time.Minute, "ko", "apply", "-f", file))
			c.waitReady(ns, ksvc)
			pod := c.runnerPod(ns, ksvc)
			base := c.portForward(ns, pod, 2469)
			if name == "http-blackhole" {
				c.postTo(ns, pod, 100)
			}
			var st runner.Status
			testutil.WaitFor(t, 120*time.Second, "100 messages written", func() bool {
				st = status(t, base)
				if st.Totals.Written+st.Totals.FallbackWritten < 100 {
					time.Sleep(time.Second)
					return false
				}
				return true
			})
			time.Sleep(2 * time.Second)
			st = status(t, base)
			t.Logf("%s (%s): read %d, written %d, fallback %d, on-success %d, acked %d, nacked %d, sink errors %d, sink dropped %d",
				name, strings.Join(st.Chain, " -> "), st.Totals.Read, st.Totals.Written, st.Totals.FallbackWritten, st.Totals.OnSuccessWritten,
				st.Totals.Acked, st.Totals.Nacked, st.Totals.SinkErrors, st.Totals.SinkDropped)
			switch {
			case st.Totals.SinkDropped != 0:
				t.Fatalf("%d messages dropped at the sink", st.Totals.SinkDropped)
			case name == "http-blackhole" && (st.Totals.Read != 100 || st.Totals.Written != 100 || st.Totals.Acked != 100):
				t.Fatalf("100 posts answered 2xx, yet read %d, written %d, acked %d", st.Totals.Read, st.Totals.Written, st.Totals.Acked)
			}
		})
	}
}

// with is the cluster for a subtest.
func (c *cluster) with(t *testing.T) *cluster {
	d := *c
	d.t = t
	return &d
}

// postTo posts n messages to the runner's HTTP source in pod, through a
// port-forward to its port 8080, and fails on any answer but 2xx.
func (c *cluster) postTo(ns, pod string, n int) {
	c.t.Helper()
	base := c.portForward(ns, pod, 8080)
	for i := 0; i < n; i++ {
		code, body := testutil.Post(c.t, base+"/", fmt.Appendf(nil, `{"n":%d}`, i), map[string]string{"Content-Type": "application/json"})
		if code/100 != 2 {
			c.t.Fatalf("post %d: %d %s", i, code, body)
		}
	}
}

var nsLine = regexp.MustCompile(`(?m)^  namespace: (\S+)$`)

// manifestNamespace is the namespace a converted manifest names, or
// default.
func manifestNamespace(yaml string) string {
	if m := nsLine.FindStringSubmatch(yaml); m != nil {
		return m[1]
	}
	return "default"
}

// serviceName is the name of the Knative Service in a converted manifest.
func serviceName(t *testing.T, yaml string) string {
	t.Helper()
	for _, doc := range strings.Split(yaml, "\n---\n") {
		if strings.Contains(doc, "apiVersion: serving.knative.dev/v1\n") {
			if m := regexp.MustCompile(`(?m)^  name: (\S+)$`).FindStringSubmatch(doc); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("no Knative Service in:\n%s", yaml)
	return ""
}

// TestFromNumaflowExample: deploy/from-numaflow/, the corpus's Numaflow
// MonoVertex as mvctl converts it (min-scale 2 from its scale.min, the HPA
// class): two pods, each with the runner and the Numaflow containers, each
// processing messages, counted by /status.
func TestFromNumaflowExample(t *testing.T) {
	c := newCluster(t)
	const ns, ksvc = "default", "udsource-pipeline"
	c.deleteAtEnd("deploy/from-numaflow/")
	t.Logf("ko apply -f deploy/from-numaflow/:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "deploy/from-numaflow/"))
	c.waitReady(ns, ksvc)
	var pods []string
	testutil.WaitFor(t, 180*time.Second, "the 2 pods of min-scale", func() bool {
		if c.runningPods(ns, "serving.knative.dev/service="+ksvc) != 2 {
			time.Sleep(2 * time.Second)
			return false
		}
		return true
	})
	pods = c.podNames(ns, ksvc)
	containers := c.run(30*time.Second, "kubectl", "-n", ns, "get", "pod", pods[0], "-o", `jsonpath={range .spec.containers[*]}{.name},{end}`)
	t.Logf("pods %s; containers %s", strings.Join(pods, ", "), strings.TrimSuffix(containers, ","))
	for _, pod := range pods {
		base := c.portForward(ns, pod, 2469)
		var st runner.Status
		testutil.WaitFor(t, 120*time.Second, "1,000 messages finished in "+pod, func() bool {
			st = status(t, base)
			if st.Totals.Acked < 1000 {
				time.Sleep(time.Second)
				return false
			}
			return true
		})
		t.Logf("%s (replica %d): read %d, written %d, fallback %d, acked %d, nacked %d, sink errors %d (retried), sink dropped %d",
			pod, st.Replica, st.Totals.Read, st.Totals.Written, st.Totals.FallbackWritten, st.Totals.Acked, st.Totals.Nacked, st.Totals.SinkErrors, st.Totals.SinkDropped)
		if st.Totals.SinkDropped != 0 || st.Totals.Acked > st.Totals.Written+st.Totals.FallbackWritten+st.Totals.TransformerDropped {
			t.Fatalf("%s: dropped %d; acked %d of written %d + fallback %d + dropped by the transformer %d",
				pod, st.Totals.SinkDropped, st.Totals.Acked, st.Totals.Written, st.Totals.FallbackWritten, st.Totals.TransformerDropped)
		}
	}
}
