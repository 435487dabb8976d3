package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/monovertex/monovertex/internal/mvconvert"
	"github.com/monovertex/monovertex/internal/testutil"
)

// corpusFiles returns the corpus manifests, sorted.
func corpusFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/corpus/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus under testdata/corpus: %v", err)
	}
	sort.Strings(files)
	return files
}

// readDocuments reads the documents of a corpus file.
func readDocuments(t *testing.T, file string) []mvconvert.Document {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	docs, err := mvconvert.ReadDocuments(fh)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return docs
}

// scalerFor is the --scaler a corpus file is meant for (its name says keda).
func scalerFor(file string) string {
	if strings.Contains(filepath.Base(file), "keda") {
		return mvconvert.ScalerKEDA
	}
	return mvconvert.ScalerHPA
}

// TestCorpusConvertsAndPassesKnativeValidation: every corpus manifest
// converts, and `mvctl validate` (knative.dev/serving v0.50.0 SetDefaults
// and Validate) accepts the Service with no error.
func TestCorpusConvertsAndPassesKnativeValidation(t *testing.T) {
	for _, f := range corpusFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var out, errs bytes.Buffer
			if code := run([]string{"validate", "--scaler", scalerFor(f), "-f", f}, nil, &out, &errs); code != 0 {
				t.Fatalf("mvctl validate exit %d:\n%s", code, errs.String())
			}
			if !strings.Contains(out.String(), "passes knative.dev/serving v0.50.0 SetDefaults and Validate") {
				t.Fatalf("mvctl validate said: %s", out.String())
			}
			out.Reset()
			errs.Reset()
			if code := run([]string{"convert", "--scaler", scalerFor(f), "-f", f}, nil, &out, &errs); code != 0 {
				t.Fatalf("mvctl convert exit %d:\n%s", code, errs.String())
			}
			kinds := map[string]int{}
			for _, doc := range strings.Split(out.String(), "\n---\n") {
				var obj struct{ Kind string }
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
					t.Fatalf("convert output does not parse: %v\n%s", err, doc)
				}
				kinds[obj.Kind]++
			}
			if kinds["Service"] < 1 || kinds["ConfigMap"] != kinds["Service"] || kinds["PodMonitor"] != kinds["Service"] {
				t.Fatalf("convert wrote %v, want a Service, a ConfigMap and a PodMonitor per MonoVertex", kinds)
			}
		})
	}
}

// TestFieldTableAccountsForEveryField: every field of the MonoVertex CRD
// (as mirrored) has a row in the field table, and every row names a real
// field.
func TestFieldTableAccountsForEveryField(t *testing.T) {
	all := map[string]bool{}
	for _, p := range mvconvert.FieldPaths() {
		all[p] = true
		if mvconvert.RowFor(p) == nil && !hasRowsBelow(p) {
			t.Errorf("field %s has no row in the field table (mvctl explain)", p)
		}
	}
	for _, p := range mvconvert.TablePaths() {
		if !all[p] {
			t.Errorf("the field table names %s, which is not a MonoVertex field", p)
		}
	}
}

// hasRowsBelow reports whether the table has rows for fields below p (p is
// only a container of rowed fields).
func hasRowsBelow(p string) bool {
	for _, q := range mvconvert.TablePaths() {
		if strings.HasPrefix(q, p+".") {
			return true
		}
	}
	return false
}

// setPaths returns the field paths a decoded manifest sets, with list
// indices written [] (as FieldPaths does).
func setPaths(v any, path string, out map[string]bool) {
	if path != "" {
		out[path] = true
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			setPaths(e, p, out)
		}
	case []any:
		for _, e := range x {
			setPaths(e, path+"[]", out)
		}
	}
}

// usedIn reports whether a concrete table path (or a field below it) is
// set in paths.
func usedIn(p string, paths map[string]bool) bool {
	for q := range paths {
		if q == p || strings.HasPrefix(q, p+".") || strings.HasPrefix(q, p+"[") {
			return true
		}
	}
	return false
}

// TestCorpusUsesEveryField: together the corpus sets every field the table
// carries over or warns about; each refused field has a negative case.
func TestCorpusUsesEveryField(t *testing.T) {
	used := map[string]bool{}
	for _, f := range corpusFiles(t) {
		for _, d := range readDocuments(t, f) {
			var tree any
			if err := json.Unmarshal(d.Raw, &tree); err != nil {
				t.Fatal(err)
			}
			setPaths(tree, "", used)
		}
	}
	refusedCovered := map[string]bool{}
	for _, c := range negativeCases {
		refusedCovered[c.path] = true
	}
	for _, r := range mvconvert.Table {
		for _, tp := range r.Paths {
			expansions := mvconvert.TablePathExpansions(tp)
			ok := false
			for _, p := range expansions {
				if r.Status == mvconvert.Refused {
					for c := range refusedCovered {
						if c == p || strings.HasPrefix(c, p+".") {
							ok = true
						}
					}
				} else if usedIn(p, used) {
					ok = true
				}
			}
			if !ok && r.Status == mvconvert.Refused {
				t.Errorf("refused field %s has no negative case", tp)
			} else if !ok {
				t.Errorf("no corpus manifest sets %s (%s)", tp, r.Status)
			}
		}
	}
}

const base = `apiVersion: numaflow.numaproj.io/v1alpha1
kind: MonoVertex
metadata:
  name: neg
spec:
  source:
    generator: {}
  sink:
    log: {}
`

// negativeCases are manifests mvctl must refuse, each with the path the
// one line must name.
var negativeCases = []struct {
	name, yaml, path string
}{
	{"unknown field", strings.Replace(base, "    log: {}\n", "    log: {}\n    retryStrategy:\n      backof:\n        steps: 3\n", 1), "spec.sink.retryStrategy.backof"},
	{"unknown field in a list item", base + "  sidecars:\n    - name: x\n      image: img\n      imagee: z\n", "spec.sidecars[0].imagee"},
	{"unknown field in a map value", base + "  containerTemplate:\n    env:\n      - name: A\n        valu: b\n", "spec.containerTemplate.env[0].valu"},
	{"wrong type", base + "  limits:\n    readBatchSize: lots\n", "spec.limits.readBatchSize"},
	{"wrong type: duration", base + "  limits:\n    readTimeout: 5\n", "spec.limits.readTimeout"},
	{"two sources", strings.Replace(base, "    generator: {}\n", "    generator: {}\n    http: {}\n", 1), "spec.source.http"},
	{"a sink with neither kind", strings.Replace(base, "    log: {}\n", "    retryStrategy: {}\n", 1), "spec.sink"},
	{"rateLimit min > max", base + "  limits:\n    rateLimit:\n      max: 10\n      min: 20\n", "spec.limits.rateLimit.min"},
	{"negative cooldown", base + "  scale:\n    scaleUpCooldownSeconds: -5\n", "spec.scale.scaleUpCooldownSeconds"},
	{"negative goBackN cooldown", base + "  limits:\n    rateLimit:\n      max: 10\n      modes:\n        goBackN:\n          coolDownPeriod: -1s\n", "spec.limits.rateLimit.modes.goBackN.coolDownPeriod"},
	{"no source", "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: neg\nspec:\n  sink:\n    log: {}\n", "spec.source"},
	{"fallback without a fallback sink", strings.Replace(base, "    log: {}\n", "    log: {}\n    retryStrategy:\n      onFailure: fallback\n", 1), "spec.sink.retryStrategy.onFailure"},
	{"steps 0", strings.Replace(base, "    log: {}\n", "    log: {}\n    retryStrategy:\n      backoff:\n        steps: 0\n", 1), "spec.sink.retryStrategy.backoff.steps"},
	{"empty fallback tier", strings.Replace(base, "    log: {}\n", "    log: {}\n    fallback: {}\n", 1), "spec.sink.fallback"},
	{"generator valueBlob not base64", strings.Replace(base, "    generator: {}\n", "    generator:\n      valueBlob: abcdef\n", 1), "spec.source.generator.valueBlob"},
	{"jetstream deliver policy Numaflow cannot read", strings.Replace(base, "    generator: {}\n", "    jetstream:\n      url: nats://n:4222\n      stream: s\n      deliver_policy: by_start_sequence x\n", 1), "spec.source.jetstream.deliver_policy"},
	{"jetstream nkey without a key", strings.Replace(base, "    generator: {}\n", "    jetstream:\n      url: nats://n:4222\n      stream: s\n      auth:\n        nkey: {name: nk}\n", 1), "spec.source.jetstream.auth.nkey"},
	{"jetstream tls certificate without its key", strings.Replace(base, "    generator: {}\n", "    jetstream:\n      url: nats://n:4222\n      stream: s\n      tls: {certSecret: {name: t, key: c}}\n", 1), "spec.source.jetstream.tls.keySecret"},
	{"kafka gssapi", strings.Replace(base, "    generator: {}\n", "    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl:\n        mechanism: GSSAPI\n        gssapi: {serviceName: kafka}\n", 1), "spec.source.kafka.sasl.gssapi"},
	{"kafka oauth", strings.Replace(base, "    generator: {}\n", "    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl:\n        mechanism: OAUTH\n        oauth: {clientID: {name: o, key: id}, clientSecret: {name: o, key: s}, tokenEndpoint: x}\n", 1), "spec.source.kafka.sasl.oauth.tokenEndpoint"},
	{"kafka config", strings.Replace(base, "    generator: {}\n", "    kafka:\n      brokers: [k:9092]\n      topic: t\n      config: 'sasl.username: u'\n", 1), "spec.source.kafka.config.sasl.username"},
	{"kafka sink sasl gssapi", strings.Replace(base, "    log: {}\n", "    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl:\n        mechanism: GSSAPI\n        gssapi: {serviceName: kafka}\n", 1), "spec.sink.kafka.sasl.gssapi"},
	{"kafka sink sasl oauth", strings.Replace(base, "    log: {}\n", "    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl:\n        mechanism: OAUTH\n        oauth: {tokenEndpoint: https://idp/token}\n", 1), "spec.sink.kafka.sasl.oauth.clientID"},
	{"kafka sink config", strings.Replace(base, "    log: {}\n", "    kafka:\n      brokers: [k:9092]\n      topic: t\n      config: 'transactional.id: t'\n", 1), "spec.sink.kafka.config.transactional.id"},
	{"nats source without a queue group", strings.Replace(base, "    generator: {}\n", "    nats: {url: nats://n, subject: s}\n", 1), "spec.source.nats.queue"},
	{"pulsar source", strings.Replace(base, "    generator: {}\n", "    pulsar: {serverAddr: p, topic: t, consumerName: c, subscriptionName: s}\n", 1), "spec.source.pulsar"},
	{"sqs source without a region", strings.Replace(base, "    generator: {}\n", "    sqs: {queueName: q, queueOwnerAWSAccountID: a}\n", 1), "spec.source.sqs.awsRegion"},
	{"sqs source assumeRole without a role", strings.Replace(base, "    generator: {}\n", "    sqs: {awsRegion: r, queueName: q, assumeRole: {sessionName: s}}\n", 1), "spec.source.sqs.assumeRole.roleArn"},
	{"serving source", strings.Replace(base, "    generator: {}\n", "    serving: {}\n", 1), "spec.source.serving"},
	{"reduce udf", base + "  udf:\n    container: {image: x}\n    groupBy:\n      window:\n        fixed: {length: 60s}\n", "spec.udf.groupBy"},
	{"serve sink", strings.Replace(base, "    log: {}\n", "    serve: {}\n", 1), "spec.sink.serve"},
	{"sqs fallback sink without a queue", strings.Replace(base, "    log: {}\n", "    log: {}\n    fallback:\n      sqs: {awsRegion: r, queueOwnerAWSAccountID: a}\n", 1), "spec.sink.fallback.sqs.queueName"},
	{"pulsar onSuccess sink", strings.Replace(base, "    log: {}\n", "    log: {}\n    onSuccess:\n      pulsar: {serverAddr: p, topic: t, producerName: prod}\n", 1), "spec.sink.onSuccess.pulsar"},
	{"redis sentinel", base + "  limits:\n    rateLimit:\n      max: 10\n      store:\n        redisStore:\n          mode: sentinel\n          sentinel: {masterName: m, endpoints: ['s:26379']}\n", "spec.limits.rateLimit.store.redisStore.sentinel"},
	{"resource claims", base + "  resourceClaims:\n    - name: gpu\n", "spec.resourceClaims"},
	{"reserved sidecar name", base + "  sidecars:\n    - name: runner\n      image: img\n", "spec.sidecars[0].name"},
	{"an MV_ variable mvctl sets", base + "  containerTemplate:\n    env:\n      - name: MV_SOURCE\n        value: http\n", "spec.containerTemplate.env[0].name"},
	{"a name Knative cannot take", strings.Replace(base, "name: neg", "name: Bad_Name", 1), "metadata.name"},
	// Values the runner refuses at start (exit 2: a crash-looping Service)
	// that once converted and validated with exit 0.
	{"generator rpu past the runner's bound", strings.Replace(base, "    generator: {}\n", "    generator:\n      rpu: 4294967296\n", 1), "spec.source.generator.rpu"},
	{"generator rpu in exponent form", strings.Replace(base, "    generator: {}\n", "    generator:\n      rpu: 1e10\n", 1), "spec.source.generator.rpu"},
	{"generator msgSize past the runner's bound", strings.Replace(base, "    generator: {}\n", "    generator:\n      msgSize: 1e8\n", 1), "spec.source.generator.msgSize"},
	{"a Numaflow Pipeline", "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: Pipeline\nmetadata:\n  name: p\nspec: {}\n", "kind"},
}

// TestNegativeCasesExitTwoWithOneLine runs the mvctl binary on each bad
// manifest: exit status 2 and exactly one stderr line naming the path.
func TestNegativeCasesExitTwoWithOneLine(t *testing.T) {
	bin := testutil.Build(t, "./cmd/mvctl")
	dir := t.TempDir()
	for i, c := range negativeCases {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
			if err := os.WriteFile(f, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"convert", "validate"} {
				var stdout, stderr bytes.Buffer
				x := exec.Command(bin, cmd, "-f", f)
				x.Stdout, x.Stderr = &stdout, &stderr
				err := x.Run()
				code := x.ProcessState.ExitCode()
				if code != 2 {
					t.Fatalf("case %d: mvctl %s: exit %d (%v), want 2; stderr:\n%s", i, cmd, code, err, stderr.String())
				}
				lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
				if len(lines) != 1 {
					t.Fatalf("mvctl %s: %d stderr lines, want 1:\n%s", cmd, len(lines), stderr.String())
				}
				if !strings.Contains(lines[0], ": "+c.path+": ") {
					t.Fatalf("mvctl %s: stderr %q does not name the path %s", cmd, lines[0], c.path)
				}
				if stdout.Len() != 0 {
					t.Fatalf("mvctl %s wrote output for a refused manifest:\n%s", cmd, stdout.String())
				}
			}
		})
	}
}

// TestWarningsNameTheirPaths: a field dropped on purpose gives one warning
// line naming its path, and Knative feature flags are named.
func TestWarningsNameTheirPaths(t *testing.T) {
	var out, errs bytes.Buffer
	f := "testdata/corpus/kitchen-sink-keda.yaml"
	if code := run([]string{"convert", "--scaler", "keda", "-f", f}, nil, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{
		"spec.nodeSelector: carried over; Knative needs the feature flag kubernetes.podspec-nodeselector",
		"spec.tolerations: carried over; Knative needs the feature flag kubernetes.podspec-tolerations",
		"spec.affinity: carried over; Knative needs the feature flag kubernetes.podspec-affinity",
		"spec.daemonTemplate: dropped: there is no daemon",
		"spec.udf.container.livenessProbe: carried as Numaflow probes a user-defined container: GET /sidecar-livez on the runner's admin port with these timings",
		"Knative needs the feature flag multi-container-probing",
		"spec.priority: dropped",
		"status: dropped",
	} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("no warning containing %q in:\n%s", want, errs.String())
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(errs.String()), "\n") {
		if !strings.HasPrefix(l, "mvctl: warning: ") {
			t.Errorf("stderr line is not a warning: %q", l)
		}
	}
	if strings.Contains(errs.String(), "maxUnavailable") {
		t.Errorf("maxUnavailable is carried with spec.replicas, yet warned about:\n%s", errs.String())
	}
	// Paused: the ConfigMap says so; replicas 3 less maxUnavailable 1 is
	// the initial scale; the udf sidecar has Numaflow's liveness probe
	// with the container's period and failures and Numaflow's delay and
	// timeout.
	for _, want := range []string{`paused: "true"`, `autoscaling.knative.dev/initial-scale: "2"`, `"kind":"ScaledObject"`,
		"livenessProbe:\n          failureThreshold: 3\n          httpGet:\n            path: /sidecar-livez\n            port: 2469\n          initialDelaySeconds: 30\n          periodSeconds: 20\n          timeoutSeconds: 30\n        name: udf\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestKEDABehaviorCarriesTheScaleFields checks the ScaledObject override:
// cooldowns and step sizes as HPA behavior, cron windows as triggers.
func TestKEDABehaviorCarriesTheScaleFields(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"convert", "--scaler", "keda", "-f", "testdata/corpus/jetstream-hpa.yaml", "-f", "testdata/corpus/kafka-keda.yaml"}, nil, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var sos []mvconvert.ScaledObject
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		var obj struct {
			Kind string
			Spec struct {
				Template struct {
					Metadata struct{ Annotations map[string]string }
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "Service" {
			continue
		}
		var so mvconvert.ScaledObject
		if err := json.Unmarshal([]byte(obj.Spec.Template.Metadata.Annotations["autoscaling.knative.dev/scaled-object-override"]), &so); err != nil {
			t.Fatalf("scaled-object-override: %v", err)
		}
		sos = append(sos, so)
	}
	if len(sos) != 3 {
		t.Fatalf("want 3 Services (orders, orders-audit, kafka-relay), got %d", len(sos))
	}
	// orders: up 3 per 60s, down 1 per 120s with a 120s window; min 1 max 20.
	b := sos[0].Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior
	up, down := b.ScaleUp.Policies[0], b.ScaleDown.Policies[0]
	if up.Value != 3 || up.PeriodSeconds != 60 || down.Value != 1 || down.PeriodSeconds != 120 || *b.ScaleDown.StabilizationWindowSeconds != 120 || *b.ScaleUp.StabilizationWindowSeconds != 0 {
		t.Errorf("orders behavior: up %+v down %+v (window %d)", up, down, *b.ScaleDown.StabilizationWindowSeconds)
	}
	if *sos[0].Spec.MinReplicaCount != 1 || *sos[0].Spec.MaxReplicaCount != 20 {
		t.Errorf("orders bounds %d..%d", *sos[0].Spec.MinReplicaCount, *sos[0].Spec.MaxReplicaCount)
	}
	// kafka-relay: the deprecated replicasPerScale (4) both ways, Numaflow's
	// default cooldown (90s), two cron triggers in whole minutes.
	b = sos[2].Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior
	if b.ScaleUp.Policies[0].Value != 4 || b.ScaleDown.Policies[0].Value != 4 || b.ScaleUp.Policies[0].PeriodSeconds != 90 {
		t.Errorf("kafka-relay behavior: %+v %+v", b.ScaleUp.Policies, b.ScaleDown.Policies)
	}
	var crons []map[string]string
	for _, tr := range sos[2].Spec.Triggers {
		if tr.Type == "cron" {
			crons = append(crons, tr.Metadata)
		}
	}
	if len(crons) != 2 || crons[0]["start"] != "0 8 * * 1-5" || crons[0]["end"] != "0 18 * * 1-5" || crons[0]["desiredReplicas"] != "6" || crons[0]["timezone"] != "Europe/Berlin" {
		t.Errorf("cron triggers: %v", crons)
	}
}

// TestDocsHaveTheExplainTable keeps docs/from-numaflow.md's table the same
// as `mvctl explain` prints.
func TestDocsHaveTheExplainTable(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"explain"}, nil, &out, &out); code != 0 {
		t.Fatal(out.String())
	}
	page, err := os.ReadFile(filepath.Join(testutil.ModuleRoot(t), "docs", "from-numaflow.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, out.Bytes()) {
		t.Fatalf("docs/from-numaflow.md does not contain `mvctl explain`'s table; paste it there:\n%s", out.String())
	}
	if !regexp.MustCompile(`(?m)^# Coming from Numaflow$`).Match(page) {
		t.Fatal(`docs/from-numaflow.md does not start with "# Coming from Numaflow"`)
	}
}

// TestDeployExampleIsCurrent: deploy/from-numaflow/knative.yaml (which the
// offline ko proof resolves, validates and starts) is what mvctl writes
// today for the corpus manifest it names.
func TestDeployExampleIsCurrent(t *testing.T) {
	const src = "testdata/corpus/udsource-transformer-udsink.yaml"
	var out, errs bytes.Buffer
	if code := run([]string{"convert", "-f", src}, nil, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	b, err := os.ReadFile(filepath.Join(testutil.ModuleRoot(t), "deploy/from-numaflow/knative.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var body []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			body = append(body, l)
		}
	}
	if strings.Join(body, "") != out.String() {
		t.Fatalf("deploy/from-numaflow/knative.yaml differs from `mvctl convert -f cmd/mvctl/%s`; regenerate it (see its header)", src)
	}
}

// TestEnvironmentContract checks the variables mvctl writes for the
// runner's rate limiter, scaling signals and Kafka adapters by name and
// value, and the Secrets NATS credentials come from.
func TestEnvironmentContract(t *testing.T) {
	envOf := func(file string, index int) ([]string, map[string]string, map[string]string) {
		t.Helper()
		res, err := mvconvert.Convert(readDocuments(t, file)[index].MonoVertex, mvconvert.Options{Scaler: scalerFor(file)})
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		vals, secrets := map[string]string{}, map[string]string{}
		for _, e := range res.Service.Spec.Template.Spec.Containers[0].Env {
			order = append(order, e.Name)
			vals[e.Name] = e.Value
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				secrets[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
		}
		return order, vals, secrets
	}
	check := func(what string, got map[string]string, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s=%q, want %q", what, k, got[k], v)
			}
		}
	}
	_, env, secrets := envOf("testdata/corpus/jetstream-hpa.yaml", 0)
	check("orders", env, map[string]string{
		"MV_RATE_LIMIT_MAX": "2000", "MV_RATE_LIMIT_MIN": "100", "MV_RATE_LIMIT_RAMP_UP": "30s",
		"MV_RATE_LIMIT_STORE": "memory", "MV_RATE_LIMIT_MODE": "onlyIfUsed", "MV_RATE_LIMIT_THRESHOLD_PERCENT": "60",
		"MV_SCALE_UP_COOLDOWN_SECONDS": "60", "MV_SCALE_DOWN_COOLDOWN_SECONDS": "120",
		"MV_SCALE_REPLICAS_PER_UP": "3", "MV_SCALE_REPLICAS_PER_DOWN": "1",
		"MV_MIN_SCALE": "1", "MV_MAX_SCALE": "20", "MV_ON_FAILURE": "drop", "MV_FALLBACK_SINK": "blackhole",
		"MV_JETSTREAM_URL":            "nats://nats.nats.svc:4222",
		"MV_JETSTREAM_DELIVER_POLICY": "new", "MV_JETSTREAM_FILTER_SUBJECT": "orders.eu",
	})
	check("orders secrets", secrets, map[string]string{"MV_JETSTREAM_USER": "nats-auth/user", "MV_JETSTREAM_PASSWORD": "nats-auth/password"})
	_, env, secrets = envOf("testdata/corpus/jetstream-hpa.yaml", 1)
	check("orders-audit", env, map[string]string{
		"MV_JETSTREAM_URL":      "nats://nats-0.nats.svc:4222,nats://nats-1.nats.svc:4222",
		"MV_JETSTREAM_CONSUMER": "numaflow-orders-audit-mvtx-orders",
	})
	check("orders-audit secrets", secrets, map[string]string{"MV_JETSTREAM_TOKEN": "nats-auth/token"})
	_, env, secrets = envOf("testdata/corpus/kafka-keda.yaml", 0)
	check("kafka-relay", env, map[string]string{
		"MV_SOURCE": "kafka", "MV_KAFKA_BROKERS": "kafka-0.kafka:9093,kafka-1.kafka:9093", "MV_KAFKA_TOPIC": "events, events-eu", "MV_KAFKA_SINK_TIMESTAMP": "write",
		"MV_KAFKA_GROUP": "relay", "MV_KAFKA_START_OFFSET": "earliest", "MV_KAFKA_TLS": "true",
		"MV_KAFKA_TLS_CA_FILE": "/etc/monovertex/kafka/ca/ca.pem", "MV_KAFKA_TLS_CERT_FILE": "/etc/monovertex/kafka/cert/cert.pem",
		"MV_KAFKA_TLS_KEY_FILE": "/etc/monovertex/kafka/key/key.pem", "MV_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
		"MV_SINK": "kafka", "MV_KAFKA_SINK_BROKERS": "kafka-0.kafka:9093,kafka-1.kafka:9093", "MV_KAFKA_SINK_TOPIC": "events-out",
		"MV_ON_SUCCESS_SINK": "kafka", "MV_ON_SUCCESS_KAFKA_TOPIC": "events-audit", "MV_FALLBACK_SINK": "log",
		"MV_RATE_LIMIT_STORE": "redis", "MV_RATE_LIMIT_REDIS_URL": "redis://redis.redis.svc:6379/2",
		"MV_RATE_LIMIT_MODE": "goBackN", "MV_RATE_LIMIT_COOLDOWN": "10s", "MV_RATE_LIMIT_RAMP_DOWN_PERCENT": "20",
		"MV_RATE_LIMIT_THRESHOLD_PERCENT": "50", "MV_RATE_LIMIT_RESUMED_RAMP_UP": "true", "MV_RATE_LIMIT_TTL": "3m0s",
		"MV_SCALE_REPLICAS_PER_UP": "4", "MV_SCALE_REPLICAS_PER_DOWN": "4", "MV_MIN_SCALE": "1", "MV_MAX_SCALE": "30",
	})
	check("kafka-relay secrets", secrets, map[string]string{"MV_KAFKA_SASL_USER": "kafka-user/user", "MV_KAFKA_SASL_PASSWORD": "kafka-user/password"})
}

// TestWhatCannotComeOverSaysWhy: each Numaflow feature that cannot come
// over (Python multiprocess map over TCP, Redis Sentinel, scale to zero)
// has its line in `mvctl explain` with what happens and why, and mvctl's
// refusal or warning for it gives the same reason in one line naming the
// path.
func TestWhatCannotComeOverSaysWhy(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"explain"}, nil, &out, &out); code != 0 {
		t.Fatal(out.String())
	}
	for _, want := range []string{
		"| Python multiprocess map over TCP", "| the runner exits 2 at start naming `map.sock` |",
		"| Redis Sentinel (`spec.limits.rateLimit.store.redisStore.sentinel`) | mvctl exits 2 naming the path |",
		"| Scale to zero (`spec.scale.min: 0`) | raised to 1 with a warning naming the path |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("mvctl explain lacks %q", want)
		}
	}
	for _, c := range []struct {
		name, yaml, line string
		code             int
	}{
		{"sentinel", base + "  limits:\n    rateLimit:\n      max: 10\n      store:\n        redisStore:\n          mode: sentinel\n          sentinel: {masterName: m, endpoints: ['s:26379']}\n",
			"spec.limits.rateLimit.store.redisStore.sentinel: Redis Sentinel is not supported: the runner's redis store connects to one server and does not follow a Sentinel failover", 2},
		{"scale to zero", base + "  scale: {min: 0, max: 3}\n",
			"spec.scale.min: 0 raised to 1 (no scale to zero): a pull worker at zero pods reads nothing, and the backlog that scales it is exported by its own pods, so nothing would wake it", 0},
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"convert", "-f", "-"}, strings.NewReader(c.yaml), &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.line) || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line saying %q", c.name, code, stderr.String(), c.code, c.line)
		}
	}
}

// TestCronWindowsAsKnativeCanCarryThem: with KEDA a window's max equal to
// scale.max converts, above it warns (one ceiling for all hours), below it
// exits 2 naming the path and what to do (nothing lowers the ceiling for a
// window); the HPA class converts the rest of the manifest and says, in
// one warning on spec.scale.cron, what it cannot do.
func TestCronWindowsAsKnativeCanCarryThem(t *testing.T) {
	cron := func(max int) string {
		return base + fmt.Sprintf("  scale:\n    max: 4\n    cron:\n      schedules:\n        - {start: '0 0 8 * * *', end: '0 0 9 * * *', min: 2, max: %d}\n", max)
	}
	for _, c := range []struct {
		name, scaler string
		max, code    int
		stderr, out  string
	}{
		{"keda, max as scale.max", "keda", 4, 0, "", `{"type":"cron","metadata":{"desiredReplicas":"2"`},
		{"keda, max above", "keda", 6, 0, "spec.scale.cron.schedules[0].max: 6 is above spec.scale.max (4): the ceiling stays max-scale (4) in the window too", `{"type":"cron","metadata":{"desiredReplicas":"2"`},
		{"keda, max below", "keda", 3, 2, "spec.scale.cron.schedules[0].max: 3 is below spec.scale.max (4): KEDA's cron trigger raises the floor to min in the window, but nothing in Knative or KEDA lowers the ceiling for a window, so the Service could scale past 3; set it to 4, or set spec.scale.max to 3 for all hours", ""},
		{"hpa", "hpa", 3, 0, "spec.scale.cron: not carried with the HPA class, which has no time-based trigger: the windows' min and max are not applied, the rest of spec.scale is; convert with --scaler keda", "autoscaling.knative.dev/max-scale: \"4\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			code := run([]string{"convert", "--scaler", c.scaler, "-f", "-"}, strings.NewReader(cron(c.max)), &out, &errs)
			if code != c.code || !strings.Contains(errs.String(), c.stderr) || !strings.Contains(out.String(), c.out) {
				t.Fatalf("exit %d, want %d; stderr %q, want it to hold %q; output holds %q: %v", code, c.code, errs.String(), c.stderr, c.out, strings.Contains(out.String(), c.out))
			}
			if c.stderr == "" && strings.Contains(errs.String(), "spec.scale.cron") {
				t.Errorf("warned about the cron windows: %s", errs.String())
			}
			if c.code == 2 && (out.Len() != 0 || strings.Count(strings.TrimSpace(errs.String()), "\n") != 0) {
				t.Errorf("refusal wrote output or more than one line: %q", errs.String())
			}
		})
	}
}
