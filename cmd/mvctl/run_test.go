package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	numaflowapi "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/internal/mvconvert"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/redistest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// deployed is a converted corpus manifest started as local processes: the
// runner with exactly the environment mvctl wrote into its container, and
// each sidecar (a ko:// image of this module) as its binary with its
// container's environment. Only what a pod gets from its volumes, its
// Secrets and Knative is rewritten to test-local values: MV_UDS_DIR (the
// socket emptyDir) and MV_CONFIG_DIR (the mounted ConfigMap) point at
// temporary directories, a mounted Secret's files are written to one and
// variables naming them point there, secretKeyRef variables take the
// test's Secret values (then $(VAR) references expand as Kubernetes does),
// and PORT and MV_ADMIN_PORT are free ports. Server addresses, which the
// manifest has as cluster DNS names, become the local servers'.
type deployed struct {
	t        *testing.T
	runner   *testutil.Process
	sidecars map[string]*testutil.Process
	env      map[string]string
}

// local says how a corpus manifest is run here.
type local struct {
	file string
	// name picks the MonoVertex of a many-document file; "" wants one.
	name string
	// secrets are the Secrets the user would create: name -> key -> value.
	secrets map[string]map[string]string
	// hosts rewrites, in the runner's variables, a cluster host:port to the
	// local server's; each must occur in some variable.
	hosts map[string]string
	// addresses are variable, value pairs replacing a whole variable that
	// names a server; only variables mvctl wrote may be replaced.
	addresses []string
}

// convertCorpus converts the one MonoVertex of a corpus file.
func convertCorpus(t *testing.T, file string) *mvconvert.Result {
	t.Helper()
	return convertCorpusDoc(t, file, "")
}

// convertCorpusDoc converts the MonoVertex named name of a corpus file (""
// when the file holds exactly one).
func convertCorpusDoc(t *testing.T, file, name string) *mvconvert.Result {
	t.Helper()
	var mv []*numaflowapi.MonoVertex
	for _, d := range readDocuments(t, file) {
		if d.MonoVertex != nil && (name == "" || d.MonoVertex.Name == name) {
			mv = append(mv, d.MonoVertex)
		}
	}
	if len(mv) != 1 {
		t.Fatalf("%s: want one MonoVertex named %q, found %d", file, name, len(mv))
	}
	res, err := mvconvert.Convert(mv[0], mvconvert.Options{Scaler: scalerFor(file), PodMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// envMap is a container's environment as Kubernetes gives it: values from
// secretKeyRef looked up in secrets, then $(VAR) references to variables
// defined before expanded (unresolvable ones stay as written).
func envMap(t *testing.T, c corev1.Container, secrets map[string]map[string]string, hosts map[string]string, used map[string]bool) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			sv, ok := secrets[ref.Name][ref.Key]
			if !ok {
				t.Fatalf("container %s: %s comes from Secret %s key %s, which the test does not create", c.Name, e.Name, ref.Name, ref.Key)
			}
			v = sv
		default:
			t.Fatalf("container %s: %s comes from %v, which a local run cannot resolve", c.Name, e.Name, e.ValueFrom)
		}
		for from, to := range hosts {
			if strings.Contains(v, from) {
				v = strings.ReplaceAll(v, from, to)
				used[from] = true
			}
		}
		env[e.Name] = expandK8s(v, env)
	}
	return env
}

// expandK8s expands $(NAME) from env and $$ to $, as the kubelet does.
func expandK8s(v string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '$' || i+1 >= len(v) {
			b.WriteByte(v[i])
			continue
		}
		switch v[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if j := strings.IndexByte(v[i:], ')'); j > 0 {
				if val, ok := env[v[i+2:i+j]]; ok {
					b.WriteString(val)
					i += j
					continue
				}
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// mountSecrets writes the Secret volumes c mounts into temporary
// directories and returns mount path -> local directory.
func mountSecrets(t *testing.T, pod corev1.PodSpec, c corev1.Container, secrets map[string]map[string]string) map[string]string {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		if v.Secret == nil {
			continue
		}
		data, ok := secrets[v.Secret.SecretName]
		if !ok {
			t.Fatalf("container %s mounts Secret %s, which the test does not create", c.Name, v.Secret.SecretName)
		}
		dir := t.TempDir()
		for _, it := range v.Secret.Items {
			val, ok := data[it.Key]
			if !ok {
				t.Fatalf("container %s mounts key %s of Secret %s, which the test does not create", c.Name, it.Key, v.Secret.SecretName)
			}
			if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(val), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out[m.MountPath] = dir
	}
	return out
}

// deploy starts a corpus manifest; addresses maps runner variables that
// name a server's address (which the manifest has as a cluster DNS name) to
// the local server's, and only variables mvctl wrote may be mapped.
func deploy(t *testing.T, file string, addresses ...string) *deployed {
	t.Helper()
	return deployWith(t, local{file: file, addresses: addresses})
}

// deployWith starts a corpus manifest as l says.
func deployWith(t *testing.T, l local) *deployed {
	t.Helper()
	res := convertCorpusDoc(t, l.file, l.name)
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
	used := map[string]bool{}
	for _, c := range pod.Containers[1:] {
		const prefix = "ko://github.com/monovertex/monovertex/"
		if !strings.HasPrefix(c.Image, prefix) {
			t.Fatalf("sidecar %s runs %s, not a program of this module", c.Name, c.Image)
		}
		env := envMap(t, c, l.secrets, nil, used)
		env["MV_UDS_DIR"] = uds // the example programs read the socket directory from it
		d.sidecars[c.Name] = testutil.Start(t, c.Name, testutil.Build(t, "./"+strings.TrimPrefix(c.Image, prefix)), env, c.Args...)
	}
	if pod.Containers[0].Name != "runner" {
		t.Fatalf("first container is %s, not the runner", pod.Containers[0].Name)
	}
	d.env = envMap(t, pod.Containers[0], l.secrets, l.hosts, used)
	for from := range l.hosts {
		if !used[from] {
			t.Fatalf("no runner variable names %s to point at the local server", from)
		}
	}
	for mount, dir := range mountSecrets(t, pod, pod.Containers[0], l.secrets) {
		for k, v := range d.env {
			if strings.HasPrefix(v, mount+"/") {
				d.env[k] = dir + strings.TrimPrefix(v, mount)
			}
		}
	}
	d.env["MV_UDS_DIR"] = uds
	d.env["MV_CONFIG_DIR"] = cfg
	d.env["MV_ADMIN_PORT"] = strconv.Itoa(testutil.FreePort(t))
	for i := 0; i+1 < len(l.addresses); i += 2 {
		if _, ok := d.env[l.addresses[i]]; !ok {
			t.Fatalf("mvctl wrote no %s to point at the local server", l.addresses[i])
		}
		d.env[l.addresses[i]] = l.addresses[i+1]
	}
	d.runner = testutil.StartRunner(t, d.env)
	d.runner.WaitReady(90 * time.Second)
	return d
}

// stop sends SIGTERM to the runner and returns its final totals.
func (d *deployed) stop() testutil.StopTotals {
	d.t.Helper()
	d.runner.Stop(30 * time.Second)
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

// logRecord is one line of a log sink in Numaflow's format, the parts of
// the message numaflow-core's log sink formats.
type logRecord struct{ Payload, Keys, EventTime, Headers, ID string }

// logRecords parses the log sink's lines in the runner's standard output:
// mvctl writes MV_LOG_FORMAT=numaflow, so each is numaflow-core's JSON
// record. A line that is not one fails the test.
func logRecords(t *testing.T, stdout string) []logRecord {
	t.Helper()
	var out []logRecord
	for l := range strings.Lines(stdout) {
		var rec struct{ Timestamp, Level, Message, Target string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("a log sink line that is not numaflow-core's JSON record (%v): %s", err, l)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z", rec.Timestamp); err != nil || rec.Level != "INFO" || rec.Target != "numaflow_core::sinker::sink::log" {
			t.Fatalf("not numaflow-core's log sink record (%v): %s", err, l)
		}
		m, ok := strings.CutPrefix(rec.Message, "Payload - ")
		// The payload comes first and may hold anything; the rest is cut
		// from the end.
		cut := func(sep string) string {
			i := strings.LastIndex(m, sep)
			if i < 0 {
				ok = false
				return ""
			}
			v := m[i+len(sep):]
			m = m[:i]
			return v
		}
		r := logRecord{ID: cut(" ID - "), Headers: cut(" Headers - "), EventTime: cut(" EventTime - "), Keys: cut(" Keys - "), Payload: m}
		if _, err := strconv.ParseInt(r.EventTime, 10, 64); !ok || err != nil {
			t.Fatalf("message %q is not Payload - ... Keys - ... EventTime - <ms> Headers - ... ID - ...", rec.Message)
		}
		out = append(out, r)
	}
	return out
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
	if d.env["MV_GENERATOR_VALUE"] != "7" || d.env["MV_READ_BATCH_SIZE"] != "100" || d.env["MV_GENERATOR_JITTER"] != "2s" {
		t.Fatalf("emitted env %v", d.env)
	}
	d.waitAcked(300, 60*time.Second)
	tot := d.stop()
	lines, keys := 0, map[string]bool{}
	for _, r := range logRecords(t, d.runner.Stdout.String()) {
		lines++
		if !strings.Contains(r.Payload, `"value":7`) {
			t.Fatalf("log line without the manifest's generator value 7: %+v", r)
		}
		if !strings.HasPrefix(r.ID, "generator-log-") || !strings.HasSuffix(r.ID, "-0-0") {
			t.Fatalf("ID %q is not Numaflow's <vertex>-<offset>-<replica>-0", r.ID)
		}
		keys[r.Keys] = true
	}
	t.Logf("read %d acked %d written %d, %d log lines, %d distinct keys", tot.Read, tot.Acked, tot.Written, lines, len(keys))
	if tot.Read < 300 || tot.Acked != tot.Read || tot.Written != tot.Read || int64(lines) != tot.Written {
		t.Fatalf("read %d acked %d written %d, %d log lines: want all equal", tot.Read, tot.Acked, tot.Written, lines)
	}
}

// TestCorpusRunsGeneratorBlobToLog: a generator's valueBlob is the payload
// of every message, as in Numaflow, whatever msgSize and value say.
func TestCorpusRunsGeneratorBlobToLog(t *testing.T) {
	skipShort(t)
	d := deploy(t, "testdata/corpus/generator-blob-log.yaml")
	if d.env["MV_GENERATOR_VALUE_BLOB"] != "eyJvcmRlciI6NDIsIm5vdGUiOiJmcm9tIHZhbHVlQmxvYiJ9" {
		t.Fatalf("emitted env %v", d.env)
	}
	d.waitAcked(100, 60*time.Second)
	tot := d.stop()
	const want = `{"order":42,"note":"from valueBlob"}`
	lines := 0
	for _, r := range logRecords(t, d.runner.Stdout.String()) {
		lines++
		if r.Payload != want {
			t.Fatalf("log line without the valueBlob payload: %+v", r)
		}
	}
	t.Logf("read %d acked %d written %d, %d log lines", tot.Read, tot.Acked, tot.Written, lines)
	if tot.Read < 100 || tot.Acked != tot.Read || tot.Written != tot.Read || int64(lines) != tot.Written {
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
	// mvctl's MV_MESSAGE_IDS=numaflow: <vertex>-<offset>-<index>, the
	// offset a user-defined source's <offset, base64>-<partition>, a
	// transformer's output k index k (numaflow-core's MessageID).
	if d.env["MV_MESSAGE_IDS"] != "numaflow" {
		t.Fatalf("MV_MESSAGE_IDS=%q, want numaflow", d.env["MV_MESSAGE_IDS"])
	}
	id := func(n int) string {
		return "udsource-pipeline-" + base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(n))) + "-0"
	}
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
		target[id(n)+"-0"] = true
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
	// Numaflow's IDs (MV_MESSAGE_IDS=numaflow): a unary map's output k of
	// the source's message <vertex>-<offset>-0 is <vertex>-<offset>-0-k.
	id := func(n int) string {
		return "udf-onsuccess-" + base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(n))) + "-0-0-0"
	}
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
	seen, ids := map[string]bool{}, map[string]bool{}
	for _, r := range logRecords(t, d.runner.Stdout.String()) {
		if strings.HasPrefix(r.Payload, "order-") {
			seen[r.Payload] = true
		}
		ids[r.ID] = true
	}
	// Numaflow's IDs: <vertex>-<stream sequence>-<replica>-<index>.
	for seq := 1; seq <= n; seq++ {
		if id := fmt.Sprintf("%s-%d-0-0", d.env["MV_NAME"], seq); !ids[id] {
			t.Fatalf("no log line with ID %s (IDs seen: %d)", id, len(ids))
		}
	}
	pending, ackPending := natstest.ConsumerState(t, js, "orders", "orders-log")
	t.Logf("published %d; read %d acked %d written %d; %d distinct log lines; consumer pending %d ack-pending %d", n, tot.Read, tot.Acked, tot.Written, len(seen), pending, ackPending)
	if len(seen) != n || tot.Acked != n || pending != 0 || ackPending != 0 {
		t.Fatalf("%d distinct messages printed, %d acked, consumer pending %d ack-pending %d; want %d, %d, 0, 0", len(seen), tot.Acked, pending, ackPending, n, n)
	}
}

// metricSum is the sum of a metric's samples on the runner's /metrics.
func metricSum(t *testing.T, p *testutil.Process, name string) (float64, bool) {
	t.Helper()
	code, body := testutil.Get(t, p.AdminURL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d", code)
	}
	sum, found := 0.0, false
	for _, l := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(l, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// checkRateLimiter fails the test unless the runner's rate limiter is on
// with store, its limit is within the manifest's bounds, and it granted
// at least the read calls n messages take (each reads at most
// MV_READ_BATCH_SIZE): counts, not speed.
func checkRateLimiter(t *testing.T, d *deployed, store string, min, max, n int) {
	t.Helper()
	st, err := d.runner.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.RateLimit == nil {
		t.Fatalf("/status has no rate_limit: the runner runs without the manifest's limits.rateLimit")
	}
	granted, ok := metricSum(t, d.runner, "monovtx_rate_limit_tokens_granted_total")
	if !ok {
		t.Fatal("/metrics has no monovtx_rate_limit_tokens_granted_total")
	}
	batch := 500 // config.Runner's default
	if v, ok := d.env["MV_READ_BATCH_SIZE"]; ok {
		if batch, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	calls := (n + batch - 1) / batch
	t.Logf("rate limiter: store %s, %d replica(s), limit %d/s now, %.0f read calls granted (%d messages take at least %d)", st.RateLimit.Store, st.RateLimit.Replicas, st.RateLimit.LimitPerSecond, granted, n, calls)
	if st.RateLimit.Store != store || st.RateLimit.LimitPerSecond < min || st.RateLimit.LimitPerSecond > max || granted < float64(calls) {
		t.Fatalf("rate limiter %+v, %.0f read calls granted: want store %s, limit within the manifest's %d..%d, at least %d calls granted", *st.RateLimit, granted, store, min, max, calls)
	}
}

// TestCorpusRunsJetStreamOverTLSWithAnNKey: jetstream-tls-nkey.yaml as
// written against a server that speaks only TLS, wants a client
// certificate signed by the test CA and the NKey user's signature; the
// Secrets are the test's, mounted where the runner's variables say.
func TestCorpusRunsJetStreamOverTLSWithAnNKey(t *testing.T) {
	skipShort(t)
	sec := natstest.WriteSecrets(t)
	srv := natstest.StartWith(t, natstest.TLS(t, sec.PKI, true), natstest.NKeyUser(t, sec.Seed))
	_, js := srv.Connect(t)
	natstest.CreateStream(t, js, jetstream.StreamConfig{Name: "orders", Subjects: []string{"orders.>"}})
	const n = 500
	for i := 0; i < n; i++ {
		if _, err := js.Publish(t.Context(), "orders.eu", []byte(fmt.Sprintf("order-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	d := deployWith(t, local{
		file: "testdata/corpus/jetstream-tls-nkey.yaml",
		secrets: map[string]map[string]string{
			"nats-tls":  {"ca.crt": string(sec.PKI.CA), "tls.crt": string(sec.PKI.ClientCert), "tls.key": string(sec.PKI.ClientKey)},
			"nats-nkey": {"seed": string(sec.Seed)},
		},
		hosts: map[string]string{"nats.secure.svc:4222": strings.TrimPrefix(srv.URL(), "nats://")},
	})
	if d.env["MV_JETSTREAM_TLS"] != "true" || d.env["MV_JETSTREAM_NKEY_FILE"] == "" || d.env["MV_JETSTREAM_TLS_CERT_FILE"] == "" {
		t.Fatalf("emitted env %v", d.env)
	}
	d.waitAcked(n, 60*time.Second)
	tot := d.stop()
	seen := map[string]bool{}
	for _, r := range logRecords(t, d.runner.Stdout.String()) {
		if strings.HasPrefix(r.Payload, "order-") {
			seen[r.Payload] = true
		}
	}
	pending, ackPending := natstest.ConsumerState(t, js, "orders", "numaflow-secure-orders-mvtx-orders")
	t.Logf("published %d; read %d acked %d written %d; %d distinct log lines; consumer pending %d ack-pending %d", n, tot.Read, tot.Acked, tot.Written, len(seen), pending, ackPending)
	if len(seen) != n || tot.Acked != n || pending != 0 || ackPending != 0 {
		t.Fatalf("%d distinct messages printed, %d acked, consumer pending %d ack-pending %d; want %d, %d, 0, 0", len(seen), tot.Acked, pending, ackPending, n, n)
	}
}

// TestCorpusRunsNATSToLog: both MonoVertices of nats-log.yaml as written,
// each against a nats-server secured its way (a user and password over
// TLS; an NKey over mutual TLS), the Secrets the test's. Every message
// published once the runner subscribed is printed once.
func TestCorpusRunsNATSToLog(t *testing.T) {
	skipShort(t)
	sec := natstest.WriteSecrets(t)
	for _, c := range []struct {
		name    string
		opts    []natstest.Option
		secrets map[string]map[string]string
	}{
		{"nats-basic", []natstest.Option{natstest.TLS(t, sec.PKI, false), natstest.User("events", "pw-3vents")},
			map[string]map[string]string{"nats-user": {"user": "events\n", "password": "pw-3vents\n"}, "nats-token": {"token": "not-used"}, "nats-ca": {"ca.crt": string(sec.PKI.CA)}}},
		{"nats-nkey", []natstest.Option{natstest.TLS(t, sec.PKI, true), natstest.NKeyUser(t, sec.Seed)},
			map[string]map[string]string{"nats-nkey": {"seed": string(sec.Seed)}, "nats-tls": {"ca.crt": string(sec.PKI.CA), "tls.crt": string(sec.PKI.ClientCert), "tls.key": string(sec.PKI.ClientKey)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := natstest.StartWith(t, c.opts...)
			nc, _ := srv.Connect(t)
			d := deployWith(t, local{
				file: "testdata/corpus/nats-log.yaml", name: c.name, secrets: c.secrets,
				hosts: map[string]string{"nats.events.svc:4222": strings.TrimPrefix(srv.URL(), "nats://")},
			})
			if d.env["MV_SOURCE"] != "nats" || d.env["MV_NATS_QUEUE"] != "events-runners" || d.env["MV_NATS_TLS"] != "true" {
				t.Fatalf("emitted env %v", d.env)
			}
			srv.WaitInterest(t, "events.eu")
			const n = 500
			for i := 0; i < n; i++ {
				if err := nc.Publish("events.eu", fmt.Appendf(nil, "event-%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			d.waitAcked(n, 60*time.Second)
			tot := d.stop()
			seen := map[string]bool{}
			for _, r := range logRecords(t, d.runner.Stdout.String()) {
				if strings.HasPrefix(r.Payload, "event-") {
					seen[r.Payload] = true
				}
			}
			t.Logf("published %d; read %d acked %d written %d; %d distinct log lines", n, tot.Read, tot.Acked, tot.Written, len(seen))
			if len(seen) != n || tot.Read != n || tot.Written != n {
				t.Fatalf("%d distinct messages printed, %d read, %d written; want %d each", len(seen), tot.Read, tot.Written, n)
			}
		})
	}
}

// TestCorpusRunsJetStreamHPAWithRateLimit: the "orders" MonoVertex of
// jetstream-hpa.yaml against a NATS server that requires the user and
// password of its nats-auth Secret, written with the line break a Secret
// made from files has (Numaflow trims it; so must the runner). Its
// consumer delivers only new messages of orders.eu: every one published
// after the runner is up is acked and
// printed once, none of orders.us is, the consumer ends with nothing
// pending, and the manifest's rate limiter (memory store, 100..2000/s)
// granted the reads.
func TestCorpusRunsJetStreamHPAWithRateLimit(t *testing.T) {
	skipShort(t)
	const user, password = "orders-runner", "pw-0rders"
	srv := natstest.StartWithUser(t, user, password)
	_, js := srv.Connect(t)
	if nc, err := nats.Connect(srv.URL()); err == nil {
		nc.Close()
		t.Fatal("the NATS server accepted a client without credentials: it does not require the nats-auth user")
	}
	natstest.CreateStream(t, js, jetstream.StreamConfig{Name: "orders", Subjects: []string{"orders.>"}})
	ctx := t.Context()
	// Published before the consumer exists: deliver_policy new skips it.
	if _, err := js.Publish(ctx, "orders.eu", []byte("order-old")); err != nil {
		t.Fatal(err)
	}
	d := deployWith(t, local{
		file:    "testdata/corpus/jetstream-hpa.yaml",
		name:    "orders",
		secrets: map[string]map[string]string{"nats-auth": {"user": user + "\n", "password": password + "\n"}},
		hosts:   map[string]string{"nats.nats.svc:4222": strings.TrimPrefix(srv.URL(), "nats://")},
	})
	for k, want := range map[string]string{"MV_RATE_LIMIT_MAX": "2000", "MV_RATE_LIMIT_MIN": "100", "MV_RATE_LIMIT_RAMP_UP": "30s", "MV_RATE_LIMIT_STORE": "memory", "MV_RATE_LIMIT_MODE": "onlyIfUsed", "MV_JETSTREAM_DELIVER_POLICY": "new", "MV_SCALE_REPLICAS_PER_UP": "3"} {
		if d.env[k] != want {
			t.Fatalf("emitted %s=%q, want %q", k, d.env[k], want)
		}
	}
	// Ready means the consumer exists; check, since what is published
	// before it would not be delivered.
	if _, err := js.Consumer(ctx, "orders", "orders-runner"); err != nil {
		t.Fatalf("consumer orders-runner after the runner is ready: %v", err)
	}
	const n = 1500 // the ramp from the manifest's min 100/s reads these in a few seconds
	for i := 0; i < n; i++ {
		if _, err := js.Publish(ctx, "orders.eu", []byte(fmt.Sprintf("order-%d", i))); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if _, err := js.Publish(ctx, "orders.us", []byte(fmt.Sprintf("order-us-%d", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.waitAcked(n, 60*time.Second)
	checkRateLimiter(t, d, "memory", 100, 2000, n)
	tot := d.stop()
	seen, lines, other := map[string]bool{}, 0, 0
	for _, r := range logRecords(t, d.runner.Stdout.String()) {
		v := r.Payload
		if !strings.HasPrefix(v, "order-") {
			continue
		}
		if strings.HasPrefix(v, "order-us-") || v == "order-old" {
			other++
			continue
		}
		seen[v] = true
		lines++
	}
	pending, ackPending := natstest.ConsumerState(t, js, "orders", "orders-runner")
	t.Logf("published %d to orders.eu; read %d acked %d written %d; %d log lines, %d distinct, %d not for this consumer; consumer pending %d ack-pending %d", n, tot.Read, tot.Acked, tot.Written, lines, len(seen), other, pending, ackPending)
	if len(seen) != n || lines != n || other != 0 || tot.Acked != n || tot.Written != n || pending != 0 || ackPending != 0 {
		t.Fatalf("%d lines (%d distinct), %d of other subjects or older, %d acked, %d written, consumer pending %d ack-pending %d; want %d, %d, 0, %d, %d, 0, 0", lines, len(seen), other, tot.Acked, tot.Written, pending, ackPending, n, n, n, n)
	}
}

// TestCorpusRunsKafkaToKafka: kafka-keda.yaml as written, against two
// kfake brokers (a separate process) that speak only TLS, require a client
// certificate signed by the test CA and SCRAM-SHA-512 as the kafka-user
// Secret's user, and a redis-server for the shared rate limit. Only the
// broker and Redis host:ports are rewritten, and the Secrets are the
// test's (the kafka-tls files mounted where the runner's variables say).
// Every record of events reaches events-out once with its key, nothing
// goes to the onSuccess topic (the Kafka sink never answers ON_SUCCESS) or
// the fallback, and the group's committed offsets reach the end of events.
func TestCorpusRunsKafkaToKafka(t *testing.T) {
	skipShort(t)
	const user, password = "relay", "pw-r3lay"
	p := testutil.NewPKI(t)
	dir := t.TempDir()
	for name, b := range map[string][]byte{"server.crt": p.ServerCert, "server.key": p.ServerKey, "ca.crt": p.CA} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CA)
	clientCert, err := tls.X509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	topics := map[string]int{"events": 4, "events-eu": 2, "events-out": 4, "events-audit": 4}
	k := kafkatest.StartSecure(t, 2, topics, kafkatest.Security{
		CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key"), ClientCAFile: filepath.Join(dir, "ca.crt"),
		SASL: "SCRAM-SHA-512:" + user + ":" + password,
		ClientOpts: []kgo.Opt{
			kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{clientCert}}),
			kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
		},
	})
	// The brokers refuse a client without SASL, so the runner's reads
	// below prove it authenticated with the Secret's SCRAM user.
	noSASL, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(k.Brokers(), ",")...),
		kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{clientCert}}))
	if err != nil {
		t.Fatal(err)
	}
	pingCtx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	if err := noSASL.Ping(pingCtx); err == nil {
		t.Fatal("kfake answered a client without SASL: it does not require the manifest's SCRAM")
	}
	cancel()
	noSASL.Close()
	rs := redistest.Start(t)
	brokers := strings.Split(k.Brokers(), ",")
	if len(brokers) != 2 {
		t.Fatalf("kfake brokers %v, want 2", brokers)
	}
	// The manifest reads two topics, as Numaflow's comma-separated topic
	// does: 3000 records in events, 1000 in events-eu.
	const n, nEU = 3000, 1000
	values := make([][]byte, n+nEU)
	for i := range values {
		values[i] = []byte(fmt.Sprintf("event-%d", i))
	}
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%d", i%16)) }
	admin := k.Client()
	kafkatest.Produce(t, admin, "events", values[:n], key)
	kafkatest.Produce(t, admin, "events-eu", values[n:], func(i int) []byte { return key(n + i) })

	d := deployWith(t, local{
		file: "testdata/corpus/kafka-keda.yaml",
		secrets: map[string]map[string]string{
			"kafka-tls": {"ca.crt": string(p.CA), "tls.crt": string(p.ClientCert), "tls.key": string(p.ClientKey)},
			// Ending in a line break, as a Secret made from files does:
			// Numaflow trims a Secret's value, and so must the runner.
			"kafka-user": {"user": user + "\n", "password": password + "\n"},
		},
		hosts: map[string]string{"kafka-0.kafka:9093": brokers[0], "kafka-1.kafka:9093": brokers[1], "redis.redis.svc:6379": rs.Addr()},
	})
	for k, want := range map[string]string{"MV_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "MV_KAFKA_TLS": "true", "MV_KAFKA_GROUP": "relay", "MV_RATE_LIMIT_STORE": "redis", "MV_RATE_LIMIT_MODE": "goBackN", "MV_RATE_LIMIT_REDIS_URL": "redis://" + rs.Addr() + "/2", "MV_ON_SUCCESS_KAFKA_TOPIC": "events-audit",
		"MV_KAFKA_TOPIC": "events, events-eu", "MV_KAFKA_SESSION_TIMEOUT": "30000ms", "MV_KAFKA_ISOLATION_LEVEL": "read_committed", "MV_KAFKA_MAX_MESSAGE_BYTES": "1000000",
		"MV_KAFKA_SINK_SET_KEY": "true", "MV_ON_SUCCESS_KAFKA_SET_KEY": "false"} {
		if d.env[k] != want {
			t.Fatalf("emitted %s=%q, want %q", k, d.env[k], want)
		}
	}
	d.waitAcked(n+nEU, 90*time.Second)
	checkRateLimiter(t, d, "redis", 500, 5000, n+nEU)
	ends := map[string]map[int32]int64{"events": kafkatest.EndOffsets(t, admin, "events"), "events-eu": kafkatest.EndOffsets(t, admin, "events-eu")}
	committed := map[string]map[int32]int64{}
	testutil.WaitFor(t, 30*time.Second, "committed offsets of group relay at the end of events and events-eu", func() bool {
		for topic, te := range ends {
			committed[topic] = kafkatest.Committed(t, admin, "relay", topic)
			for part, e := range te {
				if committed[topic][part] != e {
					return false
				}
			}
		}
		return true
	})
	tot := d.stop()
	out := kafkatest.ReadAll(t, k, "events-out")
	audit := kafkatest.ReadAll(t, k, "events-audit")
	seen, wrongKey := map[string]int{}, 0
	for _, r := range out {
		seen[string(r.Value)]++
		var i int
		if _, err := fmt.Sscanf(string(r.Value), "event-%d", &i); err != nil || string(r.Key) != string(key(i)) {
			wrongKey++
		}
	}
	missing, dups := 0, 0
	for _, v := range values {
		switch c := seen[string(v)]; {
		case c == 0:
			missing++
		case c > 1:
			dups += c - 1
		}
	}
	t.Logf("produced %d to events and %d to events-eu; read %d acked %d written %d fallback %d; events-out holds %d records (%d distinct, %d missing, %d duplicates, %d with a wrong key); events-audit %d; committed %v = end offsets %v",
		n, nEU, tot.Read, tot.Acked, tot.Written, tot.FallbackWritten, len(out), len(seen), missing, dups, wrongKey, len(audit), committed, ends)
	if all := n + nEU; len(out) != all || len(seen) != all || missing != 0 || wrongKey != 0 || len(audit) != 0 || tot.Acked != int64(all) || tot.Written != int64(all) || tot.FallbackWritten != 0 {
		t.Fatalf("events-out %d records, %d distinct, %d missing, %d wrong keys; events-audit %d; acked %d written %d fallback %d: want %d, %d, 0, 0; 0; %d, %d, 0",
			len(out), len(seen), missing, wrongKey, len(audit), tot.Acked, tot.Written, tot.FallbackWritten, all, all, all, all)
	}
}

// TestCorpusRunsKafkaOAuth: kafka-oauth.yaml as written, against a kfake
// broker that accepts only SASL OAUTHBEARER with the token a loopback
// token endpoint grants to the kafka-oauth Secret's client (its values end
// in the line break a Secret made from files has). Every record is copied
// to orders-out once, keyed as it came, and the endpoint was asked.
func TestCorpusRunsKafkaOAuth(t *testing.T) {
	skipShort(t)
	const id, secret, token = "orders-runner", "s3cret-0f-the-client", "granted-token"
	var grants atomic.Int64
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if r.URL.Path != "/realms/kafka/protocol/openid-connect/token" || !ok || u != id || p != secret {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		grants.Add(1)
		fmt.Fprintf(w, `{"access_token":%q,"expires_in":300}`, token)
	}))
	t.Cleanup(idp.Close)
	k := kafkatest.StartSecure(t, 1, map[string]int{"orders": 3, "orders-out": 3}, kafkatest.Security{
		OAuthTokens: []string{token},
		ClientOpts:  []kgo.Opt{kgo.SASL(oauth.Auth{Token: token}.AsMechanism())},
	})
	const n = 300
	values := make([][]byte, n)
	for i := range values {
		values[i] = []byte(fmt.Sprintf("order-%d", i))
	}
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%d", i%7)) }
	kafkatest.Produce(t, k.Client(), "orders", values, key)
	d := deployWith(t, local{
		file:    "testdata/corpus/kafka-oauth.yaml",
		secrets: map[string]map[string]string{"kafka-oauth": {"client-id": id + "\n", "client-secret": secret + "\n"}},
		hosts:   map[string]string{"kafka.events.svc:9092": k.Brokers(), "idp.auth.svc:8080": strings.TrimPrefix(idp.URL, "http://")},
	})
	if d.env["MV_KAFKA_SASL_MECHANISM"] != "OAUTHBEARER" {
		t.Fatalf("emitted env %v", d.env)
	}
	d.waitAcked(n, 60*time.Second)
	tot := d.stop()
	out := kafkatest.ReadAll(t, k, "orders-out")
	seen, wrongKey := map[string]int{}, 0
	for _, r := range out {
		seen[string(r.Value)]++
		var i int
		if _, err := fmt.Sscanf(string(r.Value), "order-%d", &i); err != nil || string(r.Key) != string(key(i)) {
			wrongKey++
		}
	}
	t.Logf("produced %d; acked %d written %d; orders-out holds %d (%d distinct, %d with a wrong key); %d token grants", n, tot.Acked, tot.Written, len(out), len(seen), wrongKey, grants.Load())
	if len(out) != n || len(seen) != n || wrongKey != 0 || tot.Acked != n || grants.Load() < 1 {
		t.Fatalf("orders-out %d records, %d distinct, %d wrong keys; acked %d; %d grants: want %d, %d, 0, %d, at least 1", len(out), len(seen), wrongKey, tot.Acked, grants.Load(), n, n, n)
	}
}
