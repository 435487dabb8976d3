package mvconvert

import (
	"strings"
	"testing"
)

// convertOne converts a one-MonoVertex manifest and returns the runner's
// environment (values as written, secret references as "secret:NAME/KEY"),
// the Secret volumes (name -> secret/key) and the warnings.
func convertOne(t *testing.T, yaml string) (env, vols map[string]string, warnings []string, err error) {
	t.Helper()
	docs, err := ReadDocuments(strings.NewReader(yaml))
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	res, err := Convert(docs[0].MonoVertex, Options{Scaler: ScalerHPA})
	if err != nil {
		return nil, nil, nil, err
	}
	pod := res.Service.Spec.Template.Spec.PodSpec
	env, vols = map[string]string{}, map[string]string{}
	for _, e := range pod.Containers[0].Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s is set twice in the runner's environment", e.Name)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			continue
		}
		env[e.Name] = e.Value
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			vols[v.Name] = v.Secret.SecretName + "/" + v.Secret.Items[0].Key
		}
	}
	return env, vols, res.Warnings, nil
}

const jsHead = "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  sink:\n    log: {}\n  source:\n    jetstream:\n      url: nats://n:4222\n      stream: s\n"

func hasWarning(warnings []string, path string) bool {
	for _, w := range warnings {
		if strings.HasPrefix(w, path+":") {
			return true
		}
	}
	return false
}

// TestJetStreamTLSAndAuthAsNumaflowReadsThem: numaflow-core's
// parse_tls_config and parse_nats_auth decide what of a jetstream source's
// tls and auth is used; the converted runner uses the same.
func TestJetStreamTLSAndAuthAsNumaflowReadsThem(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		env        map[string]string // "" means must be absent
		vols       []string
		warn       []string
		fail       string
	}{
		{"tls: {} is TLS with the system roots", jsHead + "      tls: {}\n",
			map[string]string{"MV_JETSTREAM_TLS": "true", "MV_JETSTREAM_TLS_CA_FILE": "", "MV_JETSTREAM_TLS_SKIP_VERIFY": ""}, nil, nil, ""},
		{"skip verify ignores the Secrets", jsHead + "      tls:\n        insecureSkipVerify: true\n        caCertSecret: {name: t, key: ca}\n        certSecret: {name: t, key: c}\n        keySecret: {name: t, key: k}\n",
			map[string]string{"MV_JETSTREAM_TLS": "true", "MV_JETSTREAM_TLS_SKIP_VERIFY": "true", "MV_JETSTREAM_TLS_CA_FILE": "", "MV_JETSTREAM_TLS_CERT_FILE": "", "MV_JETSTREAM_TLS_KEY_FILE": ""},
			nil, []string{"spec.source.jetstream.tls.insecureSkipVerify"}, ""},
		{"a CA alone", jsHead + "      tls:\n        caCertSecret: {name: t, key: ca}\n",
			map[string]string{"MV_JETSTREAM_TLS": "true", "MV_JETSTREAM_TLS_CA_FILE": "/etc/monovertex/jetstream/tls-ca/ca.pem", "MV_JETSTREAM_TLS_CERT_FILE": ""}, []string{"jetstream-tls-ca"}, nil, ""},
		{"a key without a certificate is not read", jsHead + "      tls:\n        keySecret: {name: t, key: k}\n",
			map[string]string{"MV_JETSTREAM_TLS": "true", "MV_JETSTREAM_TLS_KEY_FILE": ""}, nil, nil, ""},
		{"a certificate without its key", jsHead + "      tls:\n        certSecret: {name: t, key: c}\n", nil, nil, nil, "spec.source.jetstream.tls.keySecret"},
		{"mutual TLS", jsHead + "      tls:\n        caCertSecret: {name: t, key: ca}\n        certSecret: {name: t, key: c}\n        keySecret: {name: t, key: k}\n",
			map[string]string{"MV_JETSTREAM_TLS_CERT_FILE": "/etc/monovertex/jetstream/tls-cert/cert.pem", "MV_JETSTREAM_TLS_KEY_FILE": "/etc/monovertex/jetstream/tls-key/key.pem"},
			[]string{"jetstream-tls-ca", "jetstream-tls-cert", "jetstream-tls-key"}, nil, ""},
		{"basic wins over nkey and token", jsHead + "      auth:\n        basic:\n          user: {name: u, key: user}\n          password: {name: u, key: pw}\n        nkey: {name: nk, key: seed}\n        token: {name: tk, key: t}\n",
			map[string]string{"MV_JETSTREAM_USER": "secret:u/user", "MV_JETSTREAM_PASSWORD": "secret:u/pw", "MV_JETSTREAM_NKEY_FILE": "", "MV_JETSTREAM_TOKEN": "", "MV_JETSTREAM_URL": "nats://n:4222"},
			nil, []string{"spec.source.jetstream.auth.nkey", "spec.source.jetstream.auth.token"}, ""},
		{"nkey wins over token", jsHead + "      auth:\n        nkey: {name: nk, key: seed}\n        token: {name: tk, key: t}\n",
			map[string]string{"MV_JETSTREAM_NKEY_FILE": "/etc/monovertex/jetstream/nkey/seed.nk", "MV_JETSTREAM_TOKEN": "", "MV_JETSTREAM_USER": "", "MV_JETSTREAM_URL": "nats://n:4222"},
			[]string{"jetstream-nkey"}, []string{"spec.source.jetstream.auth.token"}, ""},
		{"a token", jsHead + "      auth:\n        token: {name: tk, key: t}\n",
			map[string]string{"MV_JETSTREAM_TOKEN": "secret:tk/t", "MV_JETSTREAM_USER": "", "MV_JETSTREAM_NKEY_FILE": "", "MV_JETSTREAM_URL": "nats://n:4222"}, nil, nil, ""},
		{"auth and a user in the URL", strings.Replace(jsHead, "nats://n:4222", "nats://a:b@n:4222", 1) + "      auth:\n        token: {name: tk, key: t}\n", nil, nil, nil, "spec.source.jetstream.url"},
		{"empty auth", jsHead + "      auth: {}\n", nil, nil, nil, "spec.source.jetstream.auth"},
	} {
		t.Run(c.name, func(t *testing.T) { checkConversion(t, c.yaml, c.env, c.vols, c.warn, c.fail) })
	}
}

// checkConversion converts yaml and checks that it fails at the path fail,
// or else that the runner's environment has env ("" = not set), the Secret
// volumes are exactly vols, and a warning names each path of warn.
func checkConversion(t *testing.T, yaml string, env map[string]string, vols, warn []string, fail string) {
	t.Helper()
	gotEnv, gotVols, warnings, err := convertOne(t, yaml)
	if fail != "" {
		if err == nil || !strings.Contains(err.Error(), fail+":") {
			t.Fatalf("error %v, want one at %s", err, fail)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range env {
		if got, ok := gotEnv[k]; want == "" && ok || want != "" && got != want {
			t.Errorf("%s = %q (set %v), want %q", k, got, ok, want)
		}
	}
	for _, v := range vols {
		if _, ok := gotVols[v]; !ok {
			t.Errorf("no volume %s in %v", v, gotVols)
		}
	}
	if len(gotVols) != len(vols) {
		t.Errorf("volumes %v, want exactly %v", gotVols, vols)
	}
	for _, w := range warn {
		if !hasWarning(warnings, w) {
			t.Errorf("no warning at %s in %q", w, warnings)
		}
	}
}

// TestGeneratorValueBlobMakesSizeAndValueMoot: Numaflow reads neither
// msgSize nor value when a valueBlob is set, and a negative msgSize falls
// back to its default.
func TestGeneratorValueBlobMakesSizeAndValueMoot(t *testing.T) {
	const gen = "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  sink:\n    log: {}\n  source:\n    generator:\n"
	env, _, warnings, err := convertOne(t, gen+"      msgSize: 2000000000\n      value: 3\n      valueBlob: aGk=\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := env["MV_GENERATOR_MSG_SIZE"]; ok || env["MV_GENERATOR_VALUE"] != "" || env["MV_GENERATOR_VALUE_BLOB"] != "aGk=" {
		t.Fatalf("env %v", env)
	}
	for _, w := range []string{"spec.source.generator.msgSize", "spec.source.generator.value"} {
		if !hasWarning(warnings, w) {
			t.Errorf("no warning at %s in %q", w, warnings)
		}
	}
	env, _, warnings, err = convertOne(t, gen+"      msgSize: -4\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := env["MV_GENERATOR_MSG_SIZE"]; ok || !hasWarning(warnings, "spec.source.generator.msgSize") {
		t.Fatalf("negative msgSize: env %v, warnings %q", env, warnings)
	}
}

// TestGeneratorKeyCountIsNumaflows: numaflow-core keeps keyCount in a
// byte, so a larger count makes 255 keys.
func TestGeneratorKeyCountIsNumaflows(t *testing.T) {
	const gen = "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  sink:\n    log: {}\n  source:\n    generator:\n"
	for _, c := range []struct {
		keys, want string
		warns      bool
	}{{"255", "255", false}, {"256", "255", true}, {"100000", "255", true}, {"3", "3", false}} {
		env, _, warnings, err := convertOne(t, gen+"      keyCount: "+c.keys+"\n")
		if err != nil {
			t.Fatal(err)
		}
		if env["MV_GENERATOR_KEY_COUNT"] != c.want || hasWarning(warnings, "spec.source.generator.keyCount") != c.warns {
			t.Errorf("keyCount %s: MV_GENERATOR_KEY_COUNT=%q, warnings %q; want %s, warning %v", c.keys, env["MV_GENERATOR_KEY_COUNT"], warnings, c.want, c.warns)
		}
	}
}

// TestNATSSourceSaysWhatItCannotDo: at most once, and nothing to scale on.
func TestNATSSourceSaysWhatItCannotDo(t *testing.T) {
	env, _, warnings, err := convertOne(t, "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  sink:\n    log: {}\n  source:\n    nats: {url: nats://n:4222, subject: s.>, queue: q}\n")
	if err != nil {
		t.Fatal(err)
	}
	if env["MV_SOURCE"] != "nats" || env["MV_NATS_SUBJECT"] != "s.>" || env["MV_NATS_QUEUE"] != "q" {
		t.Fatalf("env %v", env)
	}
	all := strings.Join(warnings, "\n")
	for _, want := range []string{"spec.source.nats: core NATS keeps no messages", "spec.source.nats: core NATS has no pending count"} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q in %q", want, warnings)
		}
	}
}

// TestKafkaConfigAsNumaflowReadsIt: a Kafka source's or sink's config is
// read line by line as numaflow-core splits it; each property becomes the
// runner's setting, a warning or a refusal naming it.
func TestKafkaConfigAsNumaflowReadsIt(t *testing.T) {
	const head = "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n"
	src := func(config string) string {
		return head + "  sink:\n    log: {}\n  source:\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      config: |\n" + indent(config)
	}
	snk := func(config string) string {
		return head + "  source:\n    generator: {}\n  sink:\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      config: |\n" + indent(config)
	}
	for _, c := range []struct {
		name, yaml string
		env        map[string]string // "" = not set
		warn       []string
		fail       string
	}{
		{"latest replaces the default", src("auto.offset.reset: latest"), map[string]string{"MV_KAFKA_START_OFFSET": "latest"}, nil, ""},
		{"librdkafka's other spellings", src("auto.offset.reset: smallest"), map[string]string{"MV_KAFKA_START_OFFSET": "earliest"}, nil, ""},
		{"a bad reset", src("auto.offset.reset: oldest"), nil, nil, "spec.source.kafka.config.auto.offset.reset"},
		{"session timeout and isolation", src("session.timeout.ms: 30000\nisolation.level: read_uncommitted"),
			map[string]string{"MV_KAFKA_SESSION_TIMEOUT": "30000ms", "MV_KAFKA_ISOLATION_LEVEL": "read_uncommitted"}, nil, ""},
		{"a session timeout that is not a number", src("session.timeout.ms: 30s"), nil, nil, "spec.source.kafka.config.session.timeout.ms"},
		{"tuning is dropped", src("max.poll.interval.ms: 300000\n  fetch.min.bytes : 1 "), map[string]string{"MV_KAFKA_SESSION_TIMEOUT": ""},
			[]string{"spec.source.kafka.config.max.poll.interval.ms", "spec.source.kafka.config.fetch.min.bytes"}, ""},
		{"a line with two colons is ignored, as Numaflow ignores it", src("client.rack: a:b\nauto.offset.reset: latest"),
			map[string]string{"MV_KAFKA_START_OFFSET": "latest"}, []string{"spec.source.kafka.config"}, ""},
		{"Numaflow's own settings", src("group.id: other\nenable.auto.commit: true"), map[string]string{"MV_KAFKA_GROUP": "x"},
			[]string{"spec.source.kafka.config.group.id", "spec.source.kafka.config.enable.auto.commit"}, ""},
		{"ssl settings", src("ssl.ca.location: /ca.pem"), nil, nil, "spec.source.kafka.config.ssl.ca.location"},
		{"a protocol the tls field does not say", src("security.protocol: SSL"), nil, nil, "spec.source.kafka.config.security.protocol"},
		{"the protocol the fields say", src("security.protocol: plaintext"), nil, nil, ""},
		{"an unknown property", src("group.protocol: consumer"), nil, nil, "spec.source.kafka.config.group.protocol"},
		{"a producer property on a source is ignored, as librdkafka ignores it", src("transactional.id: t\nacks: 1"), nil,
			[]string{"spec.source.kafka.config.transactional.id", "spec.source.kafka.config.acks"}, ""},
		{"message.max.bytes on a source is dropped", src("message.max.bytes: 2000000"), map[string]string{"MV_KAFKA_MAX_MESSAGE_BYTES": ""},
			[]string{"spec.source.kafka.config.message.max.bytes"}, ""},
		{"inert consumer settings", src("auto.commit.interval.ms: 100\nenable.auto.offset.store: false"), nil,
			[]string{"spec.source.kafka.config.auto.commit.interval.ms", "spec.source.kafka.config.enable.auto.offset.store"}, ""},
		{"isolation in capitals, as librdkafka takes it", src("isolation.level: READ_UNCOMMITTED"), map[string]string{"MV_KAFKA_ISOLATION_LEVEL": "read_uncommitted"}, nil, ""},
		{"security.protocol with tls is Numaflow's to set", src("security.protocol: PLAINTEXT") + "      tls: {}\n", map[string]string{"MV_KAFKA_TLS": "true"},
			[]string{"spec.source.kafka.config.security.protocol"}, ""},
		{"a line with a secret is not echoed", src("sasl.password: pa:ss:word"), nil, []string{"spec.source.kafka.config"}, ""},
		{"an unknown sink property", snk("transactional.id: t"), nil, nil, "spec.sink.kafka.config.transactional.id"},
		{"the sink's", snk("message.max.bytes: 2000000\nmessage.timeout.ms: 60000\nacks: -1\npartitioner: murmur2_random"),
			map[string]string{"MV_KAFKA_MAX_MESSAGE_BYTES": "2000000", "MV_KAFKA_PRODUCE_TIMEOUT": "60000ms", "MV_KAFKA_PARTITIONER": "murmur2_random", "MV_KAFKA_SINK_SET_KEY": "false"}, nil, ""},
		{"no sink config keeps the runner's defaults", snk("linger.ms: 5"),
			map[string]string{"MV_KAFKA_MAX_MESSAGE_BYTES": "", "MV_KAFKA_PRODUCE_TIMEOUT": "", "MV_KAFKA_PARTITIONER": ""}, []string{"spec.sink.kafka.config.linger.ms"}, ""},
		{"librdkafka's limits", snk("message.max.bytes: 1000\nmessage.timeout.ms: 0\npartitioner: consistent"),
			map[string]string{"MV_KAFKA_MAX_MESSAGE_BYTES": "1024", "MV_KAFKA_PRODUCE_TIMEOUT": "2147483647ms", "MV_KAFKA_PARTITIONER": "consistent_random"},
			[]string{"spec.sink.kafka.config.message.max.bytes", "spec.sink.kafka.config.message.timeout.ms", "spec.sink.kafka.config.partitioner"}, ""},
		{"past librdkafka's limit", snk("message.max.bytes: 1000000001"), nil, nil, "spec.sink.kafka.config.message.max.bytes"},
		{"a partitioner the runner does not offer", snk("partitioner: fnv1a"), nil, nil, "spec.sink.kafka.config.partitioner"},
		{"acks 1 is dropped", snk("acks: 1"), nil, []string{"spec.sink.kafka.config.acks"}, ""},
		{"a consumer property on a sink is ignored", snk("auto.offset.reset: latest\ngroup.id: g"), map[string]string{"MV_KAFKA_START_OFFSET": ""},
			[]string{"spec.sink.kafka.config.auto.offset.reset", "spec.sink.kafka.config.group.id"}, ""},
		// Numaflow's fallback would take 2000000-byte messages, its sink
		// (librdkafka's default) 1000000: the runner's sinks share the
		// primary's, with a warning.
		{"sinks that disagree", head + "  source:\n    generator: {}\n  sink:\n    kafka:\n      brokers: [k:9092]\n      topic: t\n" +
			"    fallback:\n      kafka:\n        brokers: [k:9092]\n        topic: f\n        setKey: true\n        config: 'message.max.bytes: 2000000'\n    retryStrategy:\n      onFailure: fallback\n",
			map[string]string{"MV_KAFKA_MAX_MESSAGE_BYTES": "1000000"}, []string{"spec.sink.fallback.kafka.config"}, ""},
		{"each sink's setKey", head + "  source:\n    generator: {}\n  sink:\n    kafka:\n      brokers: [k:9092]\n      topic: t\n" +
			"    fallback:\n      kafka:\n        brokers: [k:9092]\n        topic: f\n        setKey: true\n    retryStrategy:\n      onFailure: fallback\n",
			map[string]string{"MV_KAFKA_SINK_SET_KEY": "false", "MV_FALLBACK_KAFKA_SET_KEY": "true"}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) { checkConversion(t, c.yaml, c.env, nil, c.warn, c.fail) })
	}
}

func indent(s string) string {
	var b strings.Builder
	for l := range strings.Lines(s) {
		b.WriteString("        " + strings.TrimSuffix(l, "\n") + "\n")
	}
	return b.String()
}

// TestKafkaConfigWarningsHideTheLine: a line Numaflow ignores may hold a
// secret; the warning names its number, never its text.
func TestKafkaConfigWarningsHideTheLine(t *testing.T) {
	const yaml = "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  sink:\n    log: {}\n  source:\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      config: |\n        linger.ms: 5\n        sasl.password: s3cr:et\n        hunter2\n"
	_, _, warnings, err := convertOne(t, yaml)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(warnings, "\n")
	if strings.Contains(all, "s3cr") || strings.Contains(all, "hunter2") || !strings.Contains(all, "line 2 ignored") || !strings.Contains(all, "line 3 ignored") {
		t.Fatalf("warnings %q: want lines 2 and 3 named and neither secret shown", warnings)
	}
}

// TestRetryStepsAsNumaflowCountsThem: with onFailure fallback or drop a
// sink that keeps failing gets steps retries, 65535 when unset, steps kept
// in 16 bits; with onFailure retry steps is ignored and the write retried
// until it succeeds.
func TestRetryStepsAsNumaflowCountsThem(t *testing.T) {
	mv := func(retry string) string {
		return "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  source:\n    generator: {}\n  sink:\n    log: {}\n    fallback:\n      blackhole: {}\n    retryStrategy:\n" + retry
	}
	for _, c := range []struct {
		name, yaml string
		env        map[string]string
		warn       []string
		fail       string
	}{
		{"fallback without steps", mv("      onFailure: fallback\n"), map[string]string{"MV_RETRY_STEPS": "65535", "MV_ON_FAILURE": "fallback"}, nil, ""},
		{"drop with steps", mv("      onFailure: drop\n      backoff: {steps: 7}\n"), map[string]string{"MV_RETRY_STEPS": "7"}, nil, ""},
		{"steps past 16 bits", mv("      onFailure: drop\n      backoff: {steps: 70000}\n"), map[string]string{"MV_RETRY_STEPS": "4464"}, []string{"spec.sink.retryStrategy.backoff.steps"}, ""},
		{"steps that are 0 in 16 bits", mv("      onFailure: fallback\n      backoff: {steps: 65536}\n"), nil, nil, "spec.sink.retryStrategy.backoff.steps"},
		{"retry ignores steps", mv("      onFailure: retry\n      backoff: {steps: 5}\n"), map[string]string{"MV_RETRY_STEPS": ""}, []string{"spec.sink.retryStrategy.backoff.steps"}, ""},
		{"the default is retry", mv("      backoff: {steps: 5, interval: 10ms}\n"), map[string]string{"MV_RETRY_STEPS": "", "MV_RETRY_INTERVAL": "10ms"}, []string{"spec.sink.retryStrategy.backoff.steps"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) { checkConversion(t, c.yaml, c.env, nil, c.warn, c.fail) })
	}
}

// TestStagesKeepNumaflowsEndlessRetries: with the sink's onFailure
// fallback or drop, a transformer or UDF without its own retry strategy is
// still retried for ever, as Numaflow retries it.
func TestStagesKeepNumaflowsEndlessRetries(t *testing.T) {
	const head = "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  sink:\n    log: {}\n    retryStrategy:\n      onFailure: drop\n"
	const ctr = "          container: {image: i}\n"
	for _, c := range []struct {
		name, yaml string
		env        map[string]string
	}{
		{"a transformer", head + "  source:\n    generator: {}\n    transformer:\n" + strings.Replace(ctr, "          ", "      ", 1), map[string]string{"MV_STAGE_RETRY_STEPS": "unlimited", "MV_RETRY_STEPS": "65535"}},
		{"a UDF", head + "  source:\n    generator: {}\n  udf:\n" + strings.Replace(ctr, "          ", "    ", 1), map[string]string{"MV_STAGE_RETRY_STEPS": "unlimited"}},
		{"no stage", head + "  source:\n    generator: {}\n", map[string]string{"MV_STAGE_RETRY_STEPS": "", "MV_RETRY_STEPS": "65535"}},
	} {
		t.Run(c.name, func(t *testing.T) { checkConversion(t, c.yaml, c.env, nil, nil, "") })
	}
}

// TestTemplateMayChooseWhatNoNumaflowFieldSays: containerTemplate.env may
// set the variables mvctl sets only to do as Numaflow does (with a
// warning), and still not one a Numaflow field sets.
func TestTemplateMayChooseWhatNoNumaflowFieldSays(t *testing.T) {
	const head = "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  sink:\n    log: {}\n  source:\n    http: {}\n  containerTemplate:\n    env:\n"
	checkConversion(t, head+"      - {name: MV_HTTP_CLOUDEVENTS, value: \"true\"}\n", map[string]string{"MV_HTTP_CLOUDEVENTS": "true"}, nil, []string{"spec.containerTemplate.env[0]"}, "")
	checkConversion(t, head+"      - {name: MV_SOURCE, value: generator}\n", nil, nil, nil, "spec.containerTemplate.env[0].name")
}
