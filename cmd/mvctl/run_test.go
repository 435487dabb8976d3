package main

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/mvconvert"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// deployed is a converted corpus manifest started as local processes: the
// runner with exactly the environment mvctl wrote into its container, and
// each sidecar (a ko:// image of this module) as its binary with its
// container's environment. Only what a pod gets from its volumes and
// Knative is rewritten to test-local values: MV_UDS_DIR (the socket
// emptyDir) and MV_CONFIG_DIR (the mounted ConfigMap) point at temporary
// directories, and PORT and MV_ADMIN_PORT at free ports.
type deployed struct {
	t        *testing.T
	runner   *testutil.Process
	sidecars map[string]*testutil.Process
	env      map[string]string
}

// convertCorpus converts the one MonoVertex of a corpus file.
func convertCorpus(t *testing.T, file string) *mvconvert.Result {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	docs, err := mvconvert.ReadDocuments(fh)
	if err != nil || len(docs) != 1 || docs[0].MonoVertex == nil {
		t.Fatalf("%s: want one MonoVertex: %v", file, err)
	}
	res, err := mvconvert.Convert(docs[0].MonoVertex, mvconvert.Options{Scaler: scalerFor(file), PodMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func envMap(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Fatalf("container %s: %s comes from %v, which a local run cannot resolve", c.Name, e.Name, e.ValueFrom)
		}
		env[e.Name] = e.Value
	}
	return env
}

// deploy starts a corpus manifest; addresses maps runner variables that
// name a server's address (which the manifest has as a cluster DNS name) to
// the local server's, and only variables mvctl wrote may be mapped.
func deploy(t *testing.T, file string, addresses ...string) *deployed {
	t.Helper()
	res := convertCorpus(t, file)
	pod := res.Service.Spec.Template.Spec.PodSpec
	uds, err := os.MkdirTemp("", "mvctl") // short: Unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(uds) })
	cfg := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg, "paused"), []byte(res.ConfigMap.Data["paused"]), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &deployed{t: t, sidecars: map[string]*testutil.Process{}}
	for _, c := range pod.Containers[1:] {
		const prefix = "ko://github.com/monovertex/monovertex/"
		if !strings.HasPrefix(c.Image, prefix) {
			t.Fatalf("sidecar %s runs %s, not a program of this module", c.Name, c.Image)
		}
		env := envMap(t, c)
		env["MV_UDS_DIR"] = uds // the example programs read the socket directory from it
		d.sidecars[c.Name] = testutil.Start(t, c.Name, testutil.Build(t, "./"+strings.TrimPrefix(c.Image, prefix)), env, c.Args...)
	}
	if pod.Containers[0].Name != "runner" {
		t.Fatalf("first container is %s, not the runner", pod.Containers[0].Name)
	}
	d.env = envMap(t, pod.Containers[0])
	d.env["MV_UDS_DIR"] = uds
	d.env["MV_CONFIG_DIR"] = cfg
	for i := 0; i+1 < len(addresses); i += 2 {
		if _, ok := d.env[addresses[i]]; !ok {
			t.Fatalf("mvctl wrote no %s to point at the local server", addresses[i])
		}
		d.env[addresses[i]] = addresses[i+1]
	}
	d.runner = testutil.StartRunner(t, d.env)
	d.runner.WaitReady(90 * time.Second)
	return d
}

// stop sends SIGTERM to the runner and returns its final totals.
func (d *deployed) stop() testutil.StopTotals {
	d.t.Helper()
	d.runner.Signal(syscall.SIGTERM)
	if code := d.runner.Wait(30 * time.Second); code != 0 {
		d.t.Fatalf("runner exit %d after SIGTERM:\n%s", code, d.runner.Stderr.String())
	}
	for name, p := range d.sidecars {
		if p.Exited() {
			d.t.Fatalf("sidecar %s exited with %d:\n%s", name, p.ExitCode(), p.Stderr.String())
		}
	}
	return testutil.StopLine(d.t, d.runner.Stderr.String())
}

func (d *deployed) waitAcked(n int64, timeout time.Duration) {
	d.t.Helper()
	testutil.WaitFor(d.t, timeout, fmt.Sprintf("%d inputs acked", n), func() bool {
		if d.runner.Exited() {
			d.t.Fatalf("runner exited with %d:\n%s", d.runner.ExitCode(), d.runner.Stderr.String())
		}
		st, err := d.runner.Status()
		return err == nil && st.Totals.Acked >= n
	})
}

// outputIDs returns the distinct message ids an example-udsink printed.
func outputIDs(p *testutil.Process) map[string]bool {
	ids := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(p.Stdout.String()))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), "\t"); len(f) == 6 {
			ids[f[0]] = true
		}
	}
	return ids
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the runner and the example containers")
	}
}

// TestCorpusRunsGeneratorToLog: the generator's settings reach the runner
// (every payload carries value 7, four keys), and every message read is
// acked and printed by the log sink exactly once.
func TestCorpusRunsGeneratorToLog(t *testing.T) {
	skipShort(t)
	d := deploy(t, "testdata/corpus/generator-log.yaml")
	if d.env["MV_GENERATOR_VALUE"] != "7" || d.env["MV_READ_BATCH_SIZE"] != "100" {
		t.Fatalf("emitted env %v", d.env)
	}
	d.waitAcked(300, 60*time.Second)
	tot := d.stop()
	lines, keys := 0, map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(d.runner.Stdout.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "sink ") {
			continue
		}
		lines++
		if !strings.Contains(l, `\"value\":7`) {
			t.Fatalf("log line without the manifest's generator value 7: %s", l)
		}
		if i := strings.Index(l, " keys="); i >= 0 {
			keys[strings.Fields(l[i:])[0]] = true
		}
	}
	t.Logf("read %d acked %d written %d, %d log lines, %d distinct keys", tot.Read, tot.Acked, tot.Written, lines, len(keys))
	if tot.Read < 300 || tot.Acked != tot.Read || tot.Written != tot.Read || int64(lines) != tot.Written {
		t.Fatalf("read %d acked %d written %d, %d log lines: want all equal", tot.Read, tot.Acked, tot.Written, lines)
	}
}

// TestCorpusRunsHTTPToBlackhole: every POST is answered 200 only after the
// write, and the runner counts exactly those.
func TestCorpusRunsHTTPToBlackhole(t *testing.T) {
	skipShort(t)
	d := deploy(t, "testdata/corpus/http-blackhole.yaml")
	const n = 200
	c := http.Client{Timeout: 10 * time.Second}
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest(http.MethodPost, d.runner.PortURL+"/vertices/http-ingest", strings.NewReader(fmt.Sprintf(`{"n":%d}`, i)))
		req.Header.Set("X-Numaflow-Id", "msg-"+strconv.Itoa(i))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %d: %s", i, resp.Status)
		}
	}
	tot := d.stop()
	t.Logf("%d POSTs answered 200; read %d acked %d written %d", n, tot.Read, tot.Acked, tot.Written)
	if tot.Read != n || tot.Acked != n || tot.Written != n {
		t.Fatalf("read %d acked %d written %d, want %d each", tot.Read, tot.Acked, tot.Written, n)
	}
}

// TestCorpusRunsUDSourceTransformerSinks: the example containers' rules
// decide where each of the source's 3000 ids goes (cmd/example-*): the
// transformer drops n%10==0 and fans n%10==1 out to three; the sink answers
// FALLBACK for n%7==0 (written by the fallback sink) and fails n%13==5 once
// (retried with the manifest's backoff). Every id is acked and the sink and
// fallback outputs hold exactly the ids the rules give.
func TestCorpusRunsUDSourceTransformerSinks(t *testing.T) {
	skipShort(t)
	d := deploy(t, "testdata/corpus/udsource-transformer-udsink.yaml")
	const total = 3000 // EXAMPLE_TOTAL in the manifest
	if d.env["MV_ON_FAILURE"] != "fallback" || d.env["MV_RETRY_STEPS"] != "3" || d.env["MV_FALLBACK_SINK"] != "udsink" {
		t.Fatalf("emitted env %v", d.env)
	}
	d.waitAcked(total, 120*time.Second)
	testutil.WaitFor(t, 30*time.Second, "pending 0", func() bool {
		st, err := d.runner.Status()
		return err == nil && st.Pending == 0
	})
	tot := d.stop()
	id := func(n int) string { return base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(n))) + "-0" }
	wantSink, wantFallback := map[string]bool{}, map[string]bool{}
	for n := 0; n < total; n++ {
		if n%10 == 0 {
			continue
		}
		target := wantSink
		if n%7 == 0 {
			target = wantFallback
		}
		if n%10 == 1 {
			for k := 0; k < 3; k++ {
				target[id(n)+"-"+strconv.Itoa(k)] = true
			}
			continue
		}
		target[id(n)] = true
	}
	for _, c := range []struct {
		name string
		want map[string]bool
	}{{"udsink", wantSink}, {"fb-udsink", wantFallback}} {
		got := outputIDs(d.sidecars[c.name])
		missing, extra := 0, 0
		for k := range c.want {
			if !got[k] {
				missing++
			}
		}
		for k := range got {
			if !c.want[k] {
				extra++
			}
		}
		t.Logf("%s: %d distinct ids written, the rules give %d", c.name, len(got), len(c.want))
		if missing != 0 || extra != 0 {
			t.Fatalf("%s: %d ids missing, %d not expected there", c.name, missing, extra)
		}
	}
	t.Logf("runner: read %d acked %d written %d fallback %d dropped %d", tot.Read, tot.Acked, tot.Written, tot.FallbackWritten, tot.Dropped)
	if tot.Acked != total || tot.Read < total {
		t.Fatalf("read %d acked %d, want %d acked", tot.Read, tot.Acked, total)
	}
}

// TestCorpusRunsUDFWithBypass: the map UDF (cmd/example-udmap) drops
// n%10==1, fans n%10==2 out and tags by n%5 (0 "fallback", 1 "onsuccess",
// 3 "sink"); the bypass conditions send tagged outputs straight to those
// sinks and drop the untagged ones at the sink. The primary sink (its
// manifest env: EXAMPLE_FALLBACK_EVERY=7, EXAMPLE_ONSUCCESS_EVERY=7)
// answers FALLBACK for n%7==0 and ON_SUCCESS for n%7==3. Every one of the
// 2000 ids is acked, and each sink wrote exactly the ids these rules give.
func TestCorpusRunsUDFWithBypass(t *testing.T) {
	skipShort(t)
	d := deploy(t, "testdata/corpus/udf-onsuccess-bypass.yaml")
	const total = 2000
	if d.env["MV_BYPASS_SINK"] != "or:sink" || d.env["MV_BYPASS_FALLBACK"] != "or:fallback" || d.env["MV_BYPASS_ON_SUCCESS"] != "and:onsuccess" || d.env["MV_STREAMING"] != "true" {
		t.Fatalf("emitted env %v", d.env)
	}
	d.waitAcked(total, 120*time.Second)
	tot := d.stop()
	id := func(n int) string { return base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(n))) + "-0" }
	want := map[string]map[string]bool{"udsink": {}, "fb-udsink": {}, "ons-udsink": {}}
	for n := 0; n < total; n++ {
		if n%10 == 1 || n%10 == 2 { // dropped by the map; fan-outs carry no tag
			continue
		}
		switch n % 5 {
		case 0:
			want["fb-udsink"][id(n)] = true
		case 1:
			want["ons-udsink"][id(n)] = true
		case 3:
			switch n % 7 {
			case 0:
				want["fb-udsink"][id(n)] = true
			case 3:
				want["udsink"][id(n)] = true
				want["ons-udsink"][id(n)] = true
			default:
				want["udsink"][id(n)] = true
			}
		}
	}
	for name, w := range want {
		got := outputIDs(d.sidecars[name])
		missing, extra := 0, 0
		for k := range w {
			if !got[k] {
				missing++
			}
		}
		for k := range got {
			if !w[k] {
				extra++
			}
		}
		t.Logf("%s: %d distinct ids written, the rules give %d", name, len(got), len(w))
		if missing != 0 || extra != 0 {
			t.Errorf("%s: %d ids missing, %d not expected there", name, missing, extra)
		}
	}
	t.Logf("runner: read %d acked %d written %d fallback %d dropped %d", tot.Read, tot.Acked, tot.Written, tot.FallbackWritten, tot.Dropped)
	if tot.Acked != total {
		t.Fatalf("acked %d, want %d", tot.Acked, total)
	}
}

// TestCorpusRunsJetStreamToLog: the consumer mvctl names is created with
// its filter, every published message is printed once by the log sink,
// and the consumer has nothing pending or unacked at the end.
func TestCorpusRunsJetStreamToLog(t *testing.T) {
	skipShort(t)
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	natstest.CreateStream(t, js, jetstream.StreamConfig{Name: "orders", Subjects: []string{"orders.>"}})
	const n = 1000
	ctx := t.Context()
	for i := 0; i < n; i++ {
		if _, err := js.Publish(ctx, "orders.eu", []byte(fmt.Sprintf("order-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	d := deploy(t, "testdata/corpus/jetstream-log.yaml", "MV_JETSTREAM_URL", srv.URL())
	if d.env["MV_JETSTREAM_CONSUMER"] != "orders-log" || d.env["MV_JETSTREAM_FILTER_SUBJECT"] != "orders.>" {
		t.Fatalf("emitted env %v", d.env)
	}
	d.waitAcked(n, 60*time.Second)
	tot := d.stop()
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(d.runner.Stdout.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if i := strings.Index(sc.Text(), `value="order-`); i >= 0 {
			seen[strings.Fields(sc.Text()[i:])[0]] = true
		}
	}
	pending, ackPending := natstest.ConsumerState(t, js, "orders", "orders-log")
	t.Logf("published %d; read %d acked %d written %d; %d distinct log lines; consumer pending %d ack-pending %d", n, tot.Read, tot.Acked, tot.Written, len(seen), pending, ackPending)
	if len(seen) != n || tot.Acked != n || pending != 0 || ackPending != 0 {
		t.Fatalf("%d distinct messages printed, %d acked, consumer pending %d ack-pending %d; want %d, %d, 0, 0", len(seen), tot.Acked, pending, ackPending, n, n)
	}
}
