package mvconvert

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/monovertex/monovertex/adapters/source/generator"
	"github.com/monovertex/monovertex/adapters/transformer/jsonata"
	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	"github.com/monovertex/monovertex/internal/kafkaconn"
	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/runner"
)

// Scalers the converter wires a MonoVertex to.
const (
	ScalerHPA  = "hpa"
	ScalerKEDA = "keda"
)

// DefaultRunnerImage is the runner's image as ko builds it from this module.
const DefaultRunnerImage = "ko://github.com/monovertex/monovertex/cmd/runner"

// DefaultPrometheusAddress is where KEDA queries Prometheus unless told
// otherwise (kube-prometheus-stack's operated service).
const DefaultPrometheusAddress = "http://prometheus-operated.monitoring.svc:9090"

// Paths inside the pod.
const (
	udsDir        = "/var/run/numaflow"
	udsVolume     = "var-run-numaflow"
	configDir     = "/etc/monovertex/config"
	configVolume  = "monovertex-config"
	kafkaTLSDir   = "/etc/monovertex/kafka"
	jetstreamDir  = "/etc/monovertex/jetstream"
	natsDir       = "/etc/monovertex/nats"
	runnerName    = "runner"
	adminPort     = 2469
	servingPort   = 8080
	backlogMetric = "monovtx_backlog_seconds"
)

// Options choose how the output is wired.
type Options struct {
	// Scaler is ScalerHPA or ScalerKEDA.
	Scaler string
	// RunnerImage is the runner container's image.
	RunnerImage string
	// PrometheusAddress is the Prometheus KEDA queries.
	PrometheusAddress string
	// PodMonitor adds a Prometheus Operator PodMonitor for the admin port.
	PodMonitor bool
	// RolloutDuration, when set, spreads a new revision's rollout over it
	// (serving.knative.dev/rollout-duration).
	RolloutDuration string
	// TransformerFilter, when set, replaces spec.source.transformer (a
	// container that only filters) by the runner's in-process filter:
	// MV_FILTER, a CESQL expression.
	TransformerFilter string
	// TransformerJSONata and UDFJSONata, when set, replace
	// spec.source.transformer or spec.udf (a container that reshapes
	// messages) by the in-process JSONata transformer running this
	// expression, carried in the ConfigMap.
	TransformerJSONata, UDFJSONata string
}

// Result is the conversion of one MonoVertex.
type Result struct {
	// ConfigMap holds the pause switch; Service runs the runner and the
	// user's containers; PodMonitor (when asked for) scrapes the runner.
	ConfigMap  *corev1.ConfigMap
	Service    *servingv1.Service
	PodMonitor map[string]any
	// Features are the Knative config-features flags the Service needs
	// enabled, each with the path that needs it.
	Features map[string]string
	// Warnings are one line each: a field dropped or changed on purpose.
	Warnings []string
}

// Objects returns the output objects in the order to apply them.
func (r *Result) Objects() []any {
	out := []any{r.ConfigMap, r.Service}
	if r.PodMonitor != nil {
		out = append(out, r.PodMonitor)
	}
	return out
}

type converter struct {
	mv   *nf.MonoVertex
	opts Options
	res  *Result

	env         []corev1.EnvVar // the runner's environment
	envFrom     map[string]string
	sidecars    []corev1.Container
	volumes     []corev1.Volume
	mounts      []corev1.VolumeMount // the runner's extra mounts
	podAnns     map[string]string
	paused      bool
	kafkaShared *kafkaAuthSpec
	// kafkaSinks are the Kafka sinks' settings from their config, which
	// the runner's Kafka sinks share (kafkaSinkSettings).
	kafkaSinks []kafkaSinkConf
	// configData are ConfigMap keys besides paused (JSONata expressions).
	configData map[string]string
}

// kafkaAuthSpec is the one TLS/SASL setting every Kafka part shares.
type kafkaAuthSpec struct {
	path string
	tls  *nf.TLS
	sasl *nf.SASL
}

// Convert converts one decoded MonoVertex. A *FieldError names a field that
// cannot be carried over and why.
func Convert(mv *nf.MonoVertex, opts Options) (res *Result, err error) {
	if opts.Scaler == "" {
		opts.Scaler = ScalerHPA
	}
	if opts.Scaler != ScalerHPA && opts.Scaler != ScalerKEDA {
		return nil, fmt.Errorf("scaler %q: want %s or %s", opts.Scaler, ScalerHPA, ScalerKEDA)
	}
	if opts.RunnerImage == "" {
		opts.RunnerImage = DefaultRunnerImage
	}
	if opts.PrometheusAddress == "" {
		opts.PrometheusAddress = DefaultPrometheusAddress
	}
	c := &converter{mv: mv, opts: opts, res: &Result{Features: map[string]string{}}, envFrom: map[string]string{}, podAnns: map[string]string{}}
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(*FieldError)
			if !ok {
				panic(r)
			}
			res, err = nil, fe
		}
	}()
	c.convert()
	return c.res, nil
}

// fail stops the conversion with a refusal.
func (c *converter) fail(path, format string, args ...any) {
	panic(refuse(path, format, args...))
}

func (c *converter) warn(path, format string, args ...any) {
	c.res.Warnings = append(c.res.Warnings, path+": "+fmt.Sprintf(format, args...))
}

// feature records a Knative feature flag the output needs, with a warning
// naming it.
func (c *converter) feature(flag, path, what string) {
	if _, ok := c.res.Features[flag]; !ok {
		c.res.Features[flag] = path
	}
	c.warn(path, "%s; Knative needs the feature flag %s: enabled in the config-features ConfigMap (knative-serving namespace)", what, flag)
}

// setEnv sets a runner variable from a field.
func (c *converter) setEnv(name, value, from string) {
	c.env = append(c.env, corev1.EnvVar{Name: name, Value: value})
	c.envFrom[name] = from
}

func (c *converter) setSecretEnv(name string, sel *corev1.SecretKeySelector, from string) {
	if sel == nil || sel.Name == "" || sel.Key == "" {
		c.fail(from, "want a secret reference with name and key")
	}
	c.env = append(c.env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: sel.DeepCopy()}})
	c.envFrom[name] = from
}

func dur(d *metav1.Duration) string { return d.Duration.String() }

func (c *converter) nonNegative(path string, d *metav1.Duration) {
	if d != nil && d.Duration < 0 {
		c.fail(path, "must not be negative, got %s", d.Duration)
	}
}

// setPositiveDuration sets env to d, if set, after failing path unless d
// is more than 0 (a pace of 0 would spin).
func (c *converter) setPositiveDuration(env, path string, d *metav1.Duration) {
	if d == nil {
		return
	}
	if d.Duration <= 0 {
		c.fail(path, "must be positive, got %s", d.Duration)
	}
	c.setEnv(env, dur(d), path)
}

func (c *converter) convert() {
	mv := c.mv
	if mv.Name == "" {
		c.fail("metadata.name", "required: it names the Knative Service, its ConfigMap and the mvtx_name metric label")
	}
	if errs := validation.IsDNS1035Label(mv.Name); len(errs) > 0 {
		c.fail("metadata.name", "%q: %s (Numaflow and Knative both require it)", mv.Name, strings.Join(errs, "; "))
	}
	c.metadata()
	spec := &mv.Spec
	c.setEnv("MV_NAME", mv.Name, "metadata.name")
	// A sink sees <name>-<offset>-<index>, as Numaflow's do, so one that
	// de-duplicates on IDs goes on doing so across the move.
	c.setEnv("MV_MESSAGE_IDS", "numaflow", "metadata.name")
	c.source()
	c.udf()
	c.sink()
	c.retry()
	c.limits()
	c.bypass()
	if spec.Streaming != nil {
		c.setEnv("MV_STREAMING", strconv.FormatBool(*spec.Streaming), "spec.streaming")
	}
	c.setEnv("MV_UDS_DIR", udsDir, "")
	c.setEnv("MV_CONFIG_DIR", configDir, "")
	c.setEnv("MV_ADMIN_PORT", strconv.Itoa(adminPort), "")
	c.setEnv("MV_SHUTDOWN_TIMEOUT", "45s", "")
	c.lifecycle()
	c.build()
}

func (c *converter) metadata() {
	md := &c.mv.ObjectMeta
	server := []struct {
		set  bool
		path string
	}{
		{md.GenerateName != "", "metadata.generateName"},
		{md.UID != "", "metadata.uid"},
		{md.ResourceVersion != "", "metadata.resourceVersion"},
		{md.Generation != 0, "metadata.generation"},
		{!md.CreationTimestamp.IsZero(), "metadata.creationTimestamp"},
		{md.DeletionTimestamp != nil, "metadata.deletionTimestamp"},
		{md.DeletionGracePeriodSeconds != nil, "metadata.deletionGracePeriodSeconds"},
		{len(md.ManagedFields) > 0, "metadata.managedFields"},
		{md.SelfLink != "", "metadata.selfLink"},
		{len(md.OwnerReferences) > 0, "metadata.ownerReferences"},
		{len(md.Finalizers) > 0, "metadata.finalizers"},
	}
	for _, f := range server {
		if f.set {
			c.warn(f.path, "dropped: it belongs to the MonoVertex object in the API server, not to what it is converted into")
		}
	}
	if _, ok := md.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		c.warn(fmt.Sprintf("metadata.annotations[%q]", corev1.LastAppliedConfigAnnotation), "dropped: kubectl's record of the MonoVertex, not of the Service")
	}
	if !reflect.DeepEqual(c.mv.Status, nf.MonoVertexStatus{}) {
		c.warn("status", "dropped: written by the Numaflow controller")
	}
}

// sourceKinds lists a Source's kinds in the CRD's order.
func sourceKinds(s *nf.Source) []string {
	var out []string
	for _, k := range []struct {
		name string
		set  bool
	}{
		{"generator", s.Generator != nil}, {"kafka", s.Kafka != nil}, {"http", s.HTTP != nil},
		{"nats", s.Nats != nil}, {"udsource", s.UDSource != nil}, {"jetstream", s.JetStream != nil},
		{"serving", s.Serving != nil}, {"pulsar", s.Pulsar != nil}, {"sqs", s.Sqs != nil},
	} {
		if k.set {
			out = append(out, k.name)
		}
	}
	return out
}

func (c *converter) source() {
	s := c.mv.Spec.Source
	if s == nil {
		c.fail("spec.source", "required: a MonoVertex reads from exactly one source")
	}
	kinds := sourceKinds(s)
	switch {
	case len(kinds) == 0:
		c.fail("spec.source", "no source kind: set one of generator, http, jetstream, kafka, nats or udsource")
	case len(kinds) > 1:
		c.fail("spec.source."+kinds[1], "a second source kind next to %s: a MonoVertex reads from exactly one source", kinds[0])
	}
	p := "spec.source." + kinds[0]
	switch kinds[0] {
	case "generator":
		c.generator(p, s.Generator)
	case "http":
		c.httpSource(p, s.HTTP)
	case "jetstream":
		c.jetstream(p, s.JetStream)
	case "kafka":
		c.kafkaSource(p, s.Kafka)
	case "udsource":
		c.setEnv("MV_SOURCE", "udsource", p)
		c.udContainer(p, "udsource", "udsource", s.UDSource.Container)
	case "nats":
		c.natsSource(p, s.Nats)
	case "serving":
		c.fail(p, "the serving source belongs to Numaflow's ServingPipeline; Numaflow refuses it in a MonoVertex too")
	case "sqs":
		c.sqsSource(p, s.Sqs)
	case "pulsar":
		c.fail(p, "the runner has no pulsar source: no Pulsar broker can be run where it is built and tested, and none is shipped untested (docs/from-numaflow.md, Pulsar); run a Numaflow user-defined source (source.udsource) for it")
	}
	t := s.UDTransformer
	if t == nil {
		for _, o := range []struct{ flag, value string }{{"--transformer-to-filter", c.opts.TransformerFilter}, {"--transformer-to-jsonata", c.opts.TransformerJSONata}} {
			if o.value != "" {
				c.fail(o.flag, "the MonoVertex has no spec.source.transformer to replace")
			}
		}
		return
	}
	p = "spec.source.transformer"
	switch {
	case c.opts.TransformerFilter != "" && c.opts.TransformerJSONata != "":
		c.fail("--transformer-to-filter", "replaces the same container as --transformer-to-jsonata; give one")
	case c.opts.TransformerFilter != "":
		c.setEnv("MV_FILTER", c.opts.TransformerFilter, "--transformer-to-filter")
		c.warn(p, "replaced by the in-process filter (MV_FILTER, --transformer-to-filter): its container %s is not carried", image(t.Container))
	case c.opts.TransformerJSONata != "":
		c.jsonata("MV_TRANSFORMER", p, "--transformer-to-jsonata", c.opts.TransformerJSONata, image(t.Container))
	default:
		c.setEnv("MV_TRANSFORMER", "udtransformer", p)
		c.udContainer(p, "transformer", "transformer", t.Container)
	}
	if c.opts.TransformerFilter != "" {
		if t.RetryStrategy != nil {
			c.checkRetry(p+".retryStrategy", t.RetryStrategy)
			c.warn(p+".retryStrategy", "not carried: the in-process filter that replaces the transformer has no calls to retry")
		}
		return
	}
	c.stageRetry(p+".retryStrategy", "MV_TRANSFORMER_", t.RetryStrategy)
}

func image(x *nf.Container) string {
	if x == nil {
		return "(none)"
	}
	return x.Image
}

// jsonata puts the in-process JSONata transformer in slot (MV_TRANSFORMER
// or MV_UDF) in place of the container at p, its expression in the
// ConfigMap under a key of its own, read from the mounted file. The
// expression is checked here as the runner checks it at start.
func (c *converter) jsonata(slot, p, flag, expr, img string) {
	cfg := jsonata.Config{Expression: expr}
	if err := cfg.Validate(runner.RoleTransformer); err != nil {
		var ce *runner.ConfigError
		if errors.As(err, &ce) {
			c.fail(flag, "%s", ce.Reason)
		}
		c.fail(flag, "%v", err)
	}
	key := "jsonata-" + strings.ToLower(strings.TrimPrefix(slot, "MV_"))
	if c.configData == nil {
		c.configData = map[string]string{}
	}
	c.configData[key] = expr
	c.setEnv(slot, "jsonata", p)
	c.setEnv("MV_JSONATA_EXPRESSION_FILE", configDir+"/"+key, flag)
	c.warn(p, "replaced by the in-process JSONata transformer (%s=jsonata, %s; the expression is the ConfigMap's key %s): its container %s is not carried", slot, flag, key, img)
}

func (c *converter) generator(p string, g *nf.GeneratorSource) {
	c.setEnv("MV_SOURCE", "generator", p)
	if g.RPU != nil {
		if *g.RPU < 1 {
			c.fail(p+".rpu", "must be at least 1, got %d", *g.RPU)
		}
		c.setEnv("MV_GENERATOR_RPU", strconv.FormatInt(*g.RPU, 10), p+".rpu")
	}
	c.setPositiveDuration("MV_GENERATOR_DURATION", p+".duration", g.Duration)
	// Numaflow sends a non-empty valueBlob as it is and then reads neither
	// msgSize nor value.
	blob := g.ValueBlob != nil && *g.ValueBlob != ""
	switch {
	case g.MsgSize == nil:
	case blob:
		c.warn(p+".msgSize", "dropped: it does not apply with a valueBlob, as in Numaflow")
	case *g.MsgSize < 0:
		c.warn(p+".msgSize", "dropped: negative (%d); Numaflow then uses its default, 8 bytes, as the runner does", *g.MsgSize)
	default:
		c.setEnv("MV_GENERATOR_MSG_SIZE", strconv.Itoa(int(*g.MsgSize)), p+".msgSize")
	}
	if g.KeyCount != nil {
		if *g.KeyCount < 0 {
			c.fail(p+".keyCount", "must not be negative, got %d", *g.KeyCount)
		}
		kc := int(*g.KeyCount)
		if kc > 255 {
			// numaflow-core keeps the count in a byte.
			c.warn(p+".keyCount", "%d becomes 255: Numaflow's generator makes at most 255 keys", kc)
			kc = 255
		}
		c.setEnv("MV_GENERATOR_KEY_COUNT", strconv.Itoa(kc), p+".keyCount")
	}
	switch {
	case g.Value == nil:
	case blob:
		c.warn(p+".value", "dropped: it does not apply with a valueBlob, as in Numaflow")
	default:
		c.setEnv("MV_GENERATOR_VALUE", strconv.FormatUint(*g.Value, 10), p+".value")
	}
	if g.Jitter != nil {
		if g.Jitter.Duration < 0 {
			c.fail(p+".jitter", "must not be negative, got %s", g.Jitter.Duration)
		}
		c.setEnv("MV_GENERATOR_JITTER", dur(g.Jitter), p+".jitter")
	}
	if g.ValueBlob != nil {
		// Numaflow decodes it at start and fails the pod on bad base64.
		if _, err := generator.DecodeValueBlob(*g.ValueBlob); err != nil {
			c.fail(p+".valueBlob", "%v", err)
		}
		c.setEnv("MV_GENERATOR_VALUE_BLOB", *g.ValueBlob, p+".valueBlob")
	}
}

func (c *converter) httpSource(p string, h *nf.HTTPSource) {
	c.setEnv("MV_SOURCE", "http", p)
	// Numaflow's HTTP source takes every body as it is.
	c.setEnv("MV_HTTP_CLOUDEVENTS", "false", p)
	if h.Auth != nil {
		if h.Auth.Token == nil {
			c.fail(p+".auth.token", "required when auth is set: the secret holding the bearer token")
		}
		c.setSecretEnv("MV_HTTP_AUTH_TOKEN", h.Auth.Token, p+".auth.token")
	}
	if h.Ports != nil {
		c.warn(p+".ports", "dropped: Knative routes HTTP to the runner's $PORT (8080) and terminates TLS at its ingress; POST to the Service's cluster-local URL, path / or /vertices/%s", c.mv.Name)
	}
}

func (c *converter) jetstream(p string, j *nf.JetStreamSource) {
	c.setEnv("MV_SOURCE", "jetstream", p)
	if j.URL == "" {
		c.fail(p+".url", "required: the NATS server URL")
	}
	if j.Stream == "" {
		c.fail(p+".stream", "required: the stream to read")
	}
	c.natsAuth(p, j.Auth, j.URL, natsJetStream)
	if j.TLS != nil {
		c.natsTLS(p+".tls", j.TLS, natsJetStream)
	}
	c.setEnv("MV_JETSTREAM_URL", j.URL, p+".url")
	c.setEnv("MV_JETSTREAM_STREAM", j.Stream, p+".stream")
	consumer := j.Consumer
	if strings.TrimSpace(consumer) == "" {
		// numaflow-core's default for a MonoVertex: pipeline name = the
		// MonoVertex's, vertex name = "mvtx". The same name binds the
		// consumer Numaflow made, so nothing is read again or skipped.
		consumer = "numaflow-" + c.mv.Name + "-mvtx-" + j.Stream
	}
	c.setEnv("MV_JETSTREAM_CONSUMER", consumer, p+".consumer")
	if strings.TrimSpace(j.DeliverPolicy) != "" {
		if err := natsjs.CheckDeliverPolicy(j.DeliverPolicy); err != nil {
			c.fail(p+".deliver_policy", "%v: Numaflow takes all, new, last, last_per_subject, by_start_sequence N or by_start_time EPOCH_MS", err)
		}
		c.setEnv("MV_JETSTREAM_DELIVER_POLICY", j.DeliverPolicy, p+".deliver_policy")
	}
	switch len(j.FilterSubjects) {
	case 0:
	case 1:
		c.setEnv("MV_JETSTREAM_FILTER_SUBJECT", j.FilterSubjects[0], p+".filter_subjects")
	default:
		c.fail(p+".filter_subjects", "%d subjects: a consumer the runner creates filters on one; create the consumer beforehand and name it in consumer", len(j.FilterSubjects))
	}
}

func (c *converter) kafkaSource(p string, k *nf.KafkaSource) {
	c.setEnv("MV_SOURCE", "kafka", p)
	if len(k.Brokers) == 0 {
		c.fail(p+".brokers", "required: at least one broker")
	}
	if k.Topic == "" {
		c.fail(p+".topic", "required: the topic to read")
	}
	c.setEnv("MV_KAFKA_BROKERS", strings.Join(k.Brokers, ","), p+".brokers")
	c.setEnv("MV_KAFKA_TOPIC", k.Topic, p+".topic")
	group := k.ConsumerGroupName
	if group == "" {
		group = c.mv.Name
	}
	c.setEnv("MV_KAFKA_GROUP", group, p+".consumerGroup")
	// Numaflow's Kafka source starts a new consumer group at the earliest
	// offset (auto.offset.reset=earliest).
	c.setEnv("MV_KAFKA_START_OFFSET", "earliest", p)
	c.kafkaConfig(p, k.Config, false, k.TLS, k.SASL)
	if k.KafkaVersion != "" {
		c.warn(p+".kafkaVersion", "dropped: the runner's Kafka client negotiates the protocol version with the brokers")
	}
	c.kafkaAuth(p, k.TLS, k.SASL)
}

// mountSecret mounts the key sel names as dir/file from a volume vol and
// returns the file's path.
func (c *converter) mountSecret(vol, dir, file string, sel *corev1.SecretKeySelector, from string) string {
	if sel.Name == "" || sel.Key == "" {
		c.fail(from, "want a secret reference with name and key")
	}
	c.volumes = append(c.volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: sel.Name, Items: []corev1.KeyToPath{{Key: sel.Key, Path: file}},
	}}})
	c.mounts = append(c.mounts, corev1.VolumeMount{Name: vol, MountPath: dir, ReadOnly: true})
	return dir + "/" + file
}

// natsVars names one NATS source's variables and where its Secrets go.
type natsVars struct {
	prefix string // MV_JETSTREAM or MV_NATS
	volume string // prefix of the Secret volumes' names
	dir    string // where they are mounted
}

var (
	natsJetStream = natsVars{"MV_JETSTREAM", "jetstream", jetstreamDir}
	natsCore      = natsVars{"MV_NATS", "nats", natsDir}
)

// natsAuth maps a NATS source's auth as numaflow-core's parse_nats_auth
// reads it: basic, else nkey, else token; an empty auth refused. The
// runner trims the Secrets' values as numaflow-core does.
func (c *converter) natsAuth(p string, a *nf.NatsAuth, url string, v natsVars) {
	if a == nil {
		return
	}
	if natsjs.URLsCarryUser(url) {
		c.fail(p+".url", "carries a user or token and auth is set too: keep one (the runner refuses both)")
	}
	ignored := func(field string) {
		c.warn(p+".auth."+field, "ignored: Numaflow uses only the first of basic, nkey and token that is set")
	}
	switch {
	case a.Basic != nil:
		c.setSecretEnv(v.prefix+"_USER", a.Basic.User, p+".auth.basic.user")
		c.setSecretEnv(v.prefix+"_PASSWORD", a.Basic.Password, p+".auth.basic.password")
		if a.NKey != nil {
			ignored("nkey")
		}
		if a.Token != nil {
			ignored("token")
		}
	case a.NKey != nil:
		fp := p + ".auth.nkey"
		c.setEnv(v.prefix+"_NKEY_FILE", c.mountSecret(v.volume+"-nkey", v.dir+"/nkey", "seed.nk", a.NKey, fp), fp)
		if a.Token != nil {
			ignored("token")
		}
	case a.Token != nil:
		c.setSecretEnv(v.prefix+"_TOKEN", a.Token, p+".auth.token")
	default:
		c.fail(p+".auth", "is set but names no basic, nkey or token (Numaflow refuses it so)")
	}
}

// natsTLS sets a NATS source's _TLS* variables, as numaflow-core reads its
// tls: insecureSkipVerify alone ignores the Secrets, a client certificate
// needs its key.
func (c *converter) natsTLS(p string, tls *nf.TLS, v natsVars) {
	c.setEnv(v.prefix+"_TLS", "true", p)
	if tls.InsecureSkipVerify {
		c.setEnv(v.prefix+"_TLS_SKIP_VERIFY", "true", p+".insecureSkipVerify")
		if tls.CACertSecret != nil || tls.CertSecret != nil || tls.KeySecret != nil {
			c.warn(p+".insecureSkipVerify", "the CA and client certificate Secrets are ignored with it, as Numaflow ignores them")
		}
		return
	}
	if tls.CertSecret != nil && tls.KeySecret == nil {
		c.fail(p+".keySecret", "required with certSecret (Numaflow refuses a client certificate without its key)")
	}
	for _, f := range []struct {
		sel         *corev1.SecretKeySelector
		field, name string
		env         string
	}{
		{tls.CACertSecret, "caCertSecret", "ca", "_TLS_CA_FILE"},
		{tls.CertSecret, "certSecret", "cert", "_TLS_CERT_FILE"},
		{tls.KeySecret, "keySecret", "key", "_TLS_KEY_FILE"},
	} {
		if f.sel == nil || f.name == "key" && tls.CertSecret == nil {
			continue // Numaflow reads a key only with a certificate
		}
		fp := p + "." + f.field
		c.setEnv(v.prefix+f.env, c.mountSecret(v.volume+"-tls-"+f.name, v.dir+"/tls-"+f.name, f.name+".pem", f.sel, fp), fp)
	}
}

// natsSource maps Numaflow's core NATS source.
func (c *converter) natsSource(p string, n *nf.NatsSource) {
	c.setEnv("MV_SOURCE", "nats", p)
	if n.URL == "" {
		c.fail(p+".url", "required: the NATS server URL")
	}
	if n.Subject == "" {
		c.fail(p+".subject", "required: the subject to subscribe to")
	}
	if n.Queue == "" {
		c.fail(p+".queue", "required: the queue group the replicas share")
	}
	c.natsAuth(p, n.Auth, n.URL, natsCore)
	c.setEnv("MV_NATS_URL", n.URL, p+".url")
	c.setEnv("MV_NATS_SUBJECT", n.Subject, p+".subject")
	c.setEnv("MV_NATS_QUEUE", n.Queue, p+".queue")
	if n.TLS != nil {
		c.natsTLS(p+".tls", n.TLS, natsCore)
	}
	c.warn(p, "core NATS keeps no messages and takes no acks: at most once, as in Numaflow (a message published while no replica is subscribed, or buffered or read but not yet written when a pod stops, is lost)")
	c.warn(p, "core NATS has no pending count, so monovtx_backlog_seconds is absent and the Service stays at its min-scale: set spec.scale.min/max to the replicas you want, or scale the Service on cpu (autoscaling.knative.dev/metric: cpu)")
}

// kafkaAuth sets the Kafka TLS and SASL variables, which every Kafka part
// of the runner shares: a second, different setting is refused.
func (c *converter) kafkaAuth(p string, tls *nf.TLS, sasl *nf.SASL) {
	if c.kafkaShared != nil {
		if !reflect.DeepEqual(c.kafkaShared.tls, tls) || !reflect.DeepEqual(c.kafkaShared.sasl, sasl) {
			c.fail(p, "TLS or SASL settings differ from %s's: the runner's Kafka parts share one set (MV_KAFKA_TLS*, MV_KAFKA_SASL_*)", c.kafkaShared.path)
		}
		return
	}
	c.kafkaShared = &kafkaAuthSpec{path: p, tls: tls, sasl: sasl}
	if tls != nil {
		c.setEnv("MV_KAFKA_TLS", "true", p+".tls")
		if tls.InsecureSkipVerify {
			c.setEnv("MV_KAFKA_TLS_SKIP_VERIFY", "true", p+".tls.insecureSkipVerify")
		}
		for _, f := range []struct {
			sel       *corev1.SecretKeySelector
			field     string
			name, env string
		}{
			{tls.CACertSecret, "caCertSecret", "ca", "MV_KAFKA_TLS_CA_FILE"},
			{tls.CertSecret, "certSecret", "cert", "MV_KAFKA_TLS_CERT_FILE"},
			{tls.KeySecret, "keySecret", "key", "MV_KAFKA_TLS_KEY_FILE"},
		} {
			if f.sel == nil {
				continue
			}
			fp := p + ".tls." + f.field
			c.setEnv(f.env, c.mountSecret("kafka-tls-"+f.name, kafkaTLSDir+"/"+f.name, f.name+".pem", f.sel, fp), fp)
		}
	}
	if sasl != nil {
		sp := p + ".sasl"
		if sasl.Mechanism == nil {
			c.fail(sp+".mechanism", "required: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
		}
		// numaflow-core reads only the part its mechanism names.
		mech := string(*sasl.Mechanism)
		if sasl.GSSAPI != nil && mech != "GSSAPI" {
			c.warn(sp+".gssapi", "ignored with mechanism %s, as Numaflow ignores it", mech)
		}
		if sasl.OAuth != nil && mech != "OAUTHBEARER" && mech != "OAUTH" {
			c.warn(sp+".oauth", "ignored with mechanism %s, as Numaflow ignores it", mech)
		}
		var creds *nf.SASLPlain
		field := ""
		switch mech {
		case "GSSAPI":
			c.fail(sp+".gssapi", "mechanism GSSAPI (Kerberos): the runner's Kafka client supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER")
		case "OAUTHBEARER", "OAUTH":
			o := sasl.OAuth
			if o == nil {
				c.fail(sp+".oauth", "required for mechanism %s: clientID, clientSecret and tokenEndpoint (Numaflow refuses it without)", mech)
			}
			c.setEnv("MV_KAFKA_SASL_MECHANISM", "OAUTHBEARER", sp+".mechanism")
			c.setSecretEnv("MV_KAFKA_SASL_OAUTH_CLIENT_ID", o.ClientID, sp+".oauth.clientID")
			c.setSecretEnv("MV_KAFKA_SASL_OAUTH_CLIENT_SECRET", o.ClientSecret, sp+".oauth.clientSecret")
			if err := kafkaconn.CheckTokenEndpoint(o.TokenEndpoint); err != nil {
				c.fail(sp+".oauth.tokenEndpoint", "%q %v", o.TokenEndpoint, err)
			}
			c.setEnv("MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT", o.TokenEndpoint, sp+".oauth.tokenEndpoint")
			return
		}
		switch mech {
		case "PLAIN":
			creds, field = sasl.Plain, "plain"
		case "SCRAM-SHA-256":
			creds, field = sasl.SCRAMSHA256, "scramsha256"
		case "SCRAM-SHA-512":
			creds, field = sasl.SCRAMSHA512, "scramsha512"
		default:
			c.fail(sp+".mechanism", "%q: the runner's Kafka client supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER", *sasl.Mechanism)
		}
		if creds == nil {
			c.fail(sp+"."+field, "required for mechanism %s: userSecret and passwordSecret", *sasl.Mechanism)
		}
		c.setEnv("MV_KAFKA_SASL_MECHANISM", string(*sasl.Mechanism), sp+".mechanism")
		c.setSecretEnv("MV_KAFKA_SASL_USER", creds.UserSecret, sp+"."+field+".userSecret")
		c.setSecretEnv("MV_KAFKA_SASL_PASSWORD", creds.PasswordSecret, sp+"."+field+".passwordSecret")
	}
}

// udContainer adds a Numaflow user-defined container as a sidecar with
// the environment Numaflow gives it.
func (c *converter) udContainer(p, name, containerType string, x *nf.Container) {
	if x == nil || x.Image == "" {
		c.fail(p+".container.image", "required: the image of the user-defined container")
	}
	cp := p + ".container"
	env := []corev1.EnvVar{
		{Name: "NUMAFLOW_UD_CONTAINER_TYPE", Value: containerType},
		{Name: "NUMAFLOW_MONO_VERTEX_NAME", Value: c.mv.Name},
	}
	if name == "udsource" {
		bs, to := uint64(500), time.Second
		if l := c.mv.Spec.Limits; l != nil {
			if l.ReadBatchSize != nil {
				bs = *l.ReadBatchSize
			}
			if l.ReadTimeout != nil {
				to = l.ReadTimeout.Duration
			}
		}
		env = append(env,
			corev1.EnvVar{Name: "NUMAFLOW_READ_BATCH_SIZE", Value: strconv.FormatUint(bs, 10)},
			corev1.EnvVar{Name: "NUMAFLOW_READ_TIMEOUT_MS", Value: strconv.FormatInt(to.Milliseconds(), 10)})
	}
	for i, e := range x.Env {
		c.checkEnvSource(fmt.Sprintf("%s.env[%d]", cp, i), e)
	}
	ctr := corev1.Container{
		Name:            name,
		Image:           x.Image,
		Command:         x.Command,
		Args:            x.Args,
		Env:             append(env, x.Env...),
		EnvFrom:         x.EnvFrom,
		Resources:       x.Resources,
		SecurityContext: x.SecurityContext,
		VolumeMounts:    append([]corev1.VolumeMount{{Name: udsVolume, MountPath: udsDir}}, x.VolumeMounts...),
	}
	if x.ImagePullPolicy != nil {
		ctr.ImagePullPolicy = *x.ImagePullPolicy
	}
	if x.ReadinessProbe != nil {
		c.warn(cp+".readinessProbe", "dropped, as Numaflow ignores it on a user-defined container (it probes them for liveness only); the runner's /healthz answers 503 while this container is away")
	}
	if x.LivenessProbe != nil {
		ctr.LivenessProbe = sidecarLivenessProbe(x.LivenessProbe)
		c.feature("multi-container-probing", cp+".livenessProbe",
			"carried as Numaflow probes a user-defined container: GET /sidecar-livez on the runner's admin port with these timings (Numaflow's 30s delay, 60s period, 30s timeout, 5 failures where unset)")
	}
	if len(x.Ports) > 0 {
		c.warn(cp+".ports", "dropped: Knative allows one port per pod, the runner's")
	}
	c.sidecars = append(c.sidecars, ctr)
}

// checkEnvSource records the feature flag an env var from the downward API
// needs.
func (c *converter) checkEnvSource(p string, e corev1.EnvVar) {
	if e.ValueFrom != nil && (e.ValueFrom.FieldRef != nil || e.ValueFrom.ResourceFieldRef != nil) {
		c.feature("kubernetes.podspec-fieldref", p+".valueFrom", "carried over")
	}
}

func (c *converter) udf() {
	u := c.mv.Spec.UDF
	if u == nil {
		if c.opts.UDFJSONata != "" {
			c.fail("--udf-to-jsonata", "the MonoVertex has no spec.udf to replace")
		}
		return
	}
	p := "spec.udf"
	if u.GroupBy != nil {
		c.fail(p+".groupBy", "a reduce UDF needs Numaflow's windows and inter-step buffer; Numaflow refuses it in a MonoVertex too")
	}
	if c.opts.UDFJSONata != "" {
		if c.opts.TransformerJSONata != "" {
			c.fail("--udf-to-jsonata", "the runner runs one JSONata stage; with --transformer-to-jsonata too, join the two expressions into one")
		}
		c.jsonata("MV_UDF", p, "--udf-to-jsonata", c.opts.UDFJSONata, image(u.Container))
	} else {
		c.setEnv("MV_UDF", "udmap", p)
		c.udContainer(p, "udf", "udf", u.Container)
	}
	c.stageRetry(p+".retryStrategy", "MV_UDF_", u.RetryStrategy)
}

// sinkKind returns the one kind set in a sink tier.
func (c *converter) sinkKind(p string, s *nf.AbstractSink) string {
	var kinds []string
	for _, k := range []struct {
		name string
		set  bool
	}{
		{"log", s.Log != nil}, {"kafka", s.Kafka != nil}, {"blackhole", s.Blackhole != nil},
		{"udsink", s.UDSink != nil}, {"serve", s.Serve != nil}, {"sqs", s.Sqs != nil}, {"pulsar", s.Pulsar != nil},
	} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	switch {
	case len(kinds) == 0:
		c.fail(p, "no sink kind: set one of log, blackhole, udsink or kafka")
	case len(kinds) > 1:
		c.fail(p+"."+kinds[1], "a second sink kind next to %s: each sink writes to exactly one place", kinds[0])
	}
	switch kinds[0] {
	case "serve":
		c.fail(p+".serve", "the serve sink belongs to Numaflow's ServingPipeline; a MonoVertex has no serving store")
	case "pulsar":
		c.fail(p+".pulsar", "the runner has no pulsar sink: no Pulsar broker can be run where it is built and tested, and none is shipped untested (docs/from-numaflow.md, Pulsar); run a Numaflow user-defined sink (udsink) for it")
	}
	return kinds[0]
}

func (c *converter) sink() {
	s := c.mv.Spec.Sink
	if s == nil {
		c.fail("spec.sink", "required: a MonoVertex writes to a sink")
	}
	var kafkaBrokers []string
	kafkaFrom := ""
	tiers := []struct {
		path, envKind, ctr, ctype, topicEnv string
		sink                                *nf.AbstractSink
	}{
		{"spec.sink", "MV_SINK", "udsink", "udsink", "MV_KAFKA_SINK_TOPIC", &s.AbstractSink},
		{"spec.sink.fallback", "MV_FALLBACK_SINK", "fb-udsink", "fb-udsink", "MV_FALLBACK_KAFKA_TOPIC", s.Fallback},
		{"spec.sink.onSuccess", "MV_ON_SUCCESS_SINK", "ons-udsink", "ons-udsink", "MV_ON_SUCCESS_KAFKA_TOPIC", s.OnSuccess},
	}
	for _, t := range tiers {
		if t.sink == nil {
			continue
		}
		kind := c.sinkKind(t.path, t.sink)
		p := t.path + "." + kind
		c.setEnv(t.envKind, kind, p)
		switch kind {
		case "log":
			if _, done := c.envFrom["MV_LOG_FORMAT"]; !done {
				// numaflow-core's log-sink record, for what reads the
				// pod's log as it read Numaflow's.
				c.setEnv("MV_LOG_FORMAT", "numaflow", p)
			}
		case "udsink":
			c.udContainer(p, t.ctr, t.ctype, t.sink.UDSink.Container)
		case "kafka":
			k := t.sink.Kafka
			if len(k.Brokers) == 0 {
				c.fail(p+".brokers", "required: at least one broker")
			}
			if k.Topic == "" {
				c.fail(p+".topic", "required: the topic to write to")
			}
			if kafkaBrokers == nil {
				kafkaBrokers, kafkaFrom = k.Brokers, p+".brokers"
				c.setEnv("MV_KAFKA_SINK_BROKERS", strings.Join(k.Brokers, ","), kafkaFrom)
			} else if !reflect.DeepEqual(kafkaBrokers, k.Brokers) {
				c.fail(p+".brokers", "differ from %s: the runner's Kafka sinks share one cluster (MV_KAFKA_SINK_BROKERS)", kafkaFrom)
			}
			c.setEnv(t.topicEnv, k.Topic, p+".topic")
			// Numaflow keys a record (keys joined with ':') only with
			// setKey; the runner's default is to key it.
			setKeyEnv := map[string]string{"MV_SINK": "MV_KAFKA_SINK_SET_KEY", "MV_FALLBACK_SINK": "MV_FALLBACK_KAFKA_SET_KEY", "MV_ON_SUCCESS_SINK": "MV_ON_SUCCESS_KAFKA_SET_KEY"}[t.envKind]
			c.setEnv(setKeyEnv, strconv.FormatBool(k.SetKey), p+".setKey")
			if _, done := c.envFrom["MV_KAFKA_SINK_TIMESTAMP"]; !done {
				// Numaflow's Kafka sink leaves the record timestamp to
				// the producer: the time of the write.
				c.setEnv("MV_KAFKA_SINK_TIMESTAMP", "write", p)
			}
			c.kafkaConfig(p, k.Config, true, k.TLS, k.SASL)
			c.kafkaAuth(p, k.TLS, k.SASL)
		case "sqs":
			prefix := map[string]string{"MV_SINK": "MV_SQS_SINK_", "MV_FALLBACK_SINK": "MV_FALLBACK_SQS_", "MV_ON_SUCCESS_SINK": "MV_ON_SUCCESS_SQS_"}[t.envKind]
			q := t.sink.Sqs
			c.sqsQueue(p, prefix, q.QueueName, q.AWSRegion, q.QueueOwnerAWSAccountID, q.AssumeRole)
		}
	}
	c.kafkaSinkSettings()
}

// sqsQueue sets the variables naming an SQS queue (prefix QUEUE_NAME,
// REGION, QUEUE_OWNER_ACCOUNT_ID, ASSUME_ROLE). Credentials come from the
// default AWS chain, as in numaflow-core: the AWS_* variables the
// containerTemplate sets from a Secret, or the pod's IAM role.
func (c *converter) sqsQueue(p, prefix, queue, region, account string, role *nf.AWSAssumeRole) {
	if queue == "" {
		c.fail(p+".queueName", "required: the name of the SQS queue")
	}
	if region == "" {
		c.fail(p+".awsRegion", "required: the AWS region of the queue")
	}
	c.setEnv(prefix+"QUEUE_NAME", queue, p+".queueName")
	c.setEnv(prefix+"REGION", region, p+".awsRegion")
	if account != "" {
		c.setEnv(prefix+"QUEUE_OWNER_ACCOUNT_ID", account, p+".queueOwnerAWSAccountID")
	}
	if role != nil {
		if role.RoleARN == "" {
			c.fail(p+".assumeRole.roleArn", "required: the ARN of the role to assume")
		}
		b, err := json.Marshal(role)
		if err != nil {
			c.fail(p+".assumeRole", "%v", err)
		}
		c.setEnv(prefix+"ASSUME_ROLE", string(b), p+".assumeRole")
	}
}

func (c *converter) sqsSource(p string, q *nf.SqsSource) {
	c.setEnv("MV_SOURCE", "sqs", p)
	c.sqsQueue(p, "MV_SQS_", q.QueueName, q.AWSRegion, q.QueueOwnerAWSAccountID, q.AssumeRole)
	for _, f := range []struct {
		v        *int32
		env, sub string
	}{
		{q.VisibilityTimeout, "MV_SQS_VISIBILITY_TIMEOUT", "visibilityTimeout"},
		{q.MaxNumberOfMessages, "MV_SQS_MAX_NUMBER_OF_MESSAGES", "maxNumberOfMessages"},
		{q.WaitTimeSeconds, "MV_SQS_WAIT_TIME_SECONDS", "waitTimeSeconds"},
	} {
		if f.v != nil {
			c.setEnv(f.env, strconv.Itoa(int(*f.v)), p+"."+f.sub)
		}
	}
	if q.EndpointURL != nil && *q.EndpointURL != "" {
		c.setEnv("MV_SQS_ENDPOINT_URL", *q.EndpointURL, p+".endpointUrl")
	}
	if len(q.AttributeNames) > 0 {
		c.setEnv("MV_SQS_ATTRIBUTE_NAMES", strings.Join(q.AttributeNames, ","), p+".attributeNames")
	}
	if len(q.MessageAttributeNames) > 0 {
		c.setEnv("MV_SQS_MESSAGE_ATTRIBUTE_NAMES", strings.Join(q.MessageAttributeNames, ","), p+".messageAttributeNames")
	}
}

// backoffEnv is the runner's retry strategy derived from a Numaflow one.
func (c *converter) checkRetry(p string, r *nf.RetryStrategy) {
	if r == nil {
		return
	}
	if b := r.BackOff; b != nil {
		bp := p + ".backoff"
		c.nonNegative(bp+".interval", b.Interval)
		c.nonNegative(bp+".cap", b.Cap)
		if b.Steps != nil && *b.Steps == 0 {
			c.fail(bp+".steps", "must be at least 1 (Numaflow refuses 0 too)")
		}
		if b.Factor != nil && *b.Factor < 1 {
			c.fail(bp+".factor", "must be at least 1, got %g", *b.Factor)
		}
		if b.Cap != nil {
			interval := time.Millisecond
			if b.Interval != nil {
				interval = b.Interval.Duration
			}
			if b.Cap.Duration < interval {
				c.fail(bp+".cap", "%s is less than the interval %s", b.Cap.Duration, interval)
			}
		}
		if b.Jitter != nil && (*b.Jitter < 0 || *b.Jitter >= 1) {
			c.fail(bp+".jitter", "must be at least 0 and less than 1, got %g", *b.Jitter)
		}
	}
	if r.OnFailure != nil {
		switch *r.OnFailure {
		case nf.OnFailureRetry, nf.OnFailureFallback, nf.OnFailureDrop:
		default:
			c.fail(p+".onFailure", "%q: want retry, fallback or drop", *r.OnFailure)
		}
	}
}

// stageRetry converts a transformer's or UDF's own retry strategy into its
// MV_TRANSFORMER_* or MV_UDF_* variables (prefix), all of them, with
// numaflow-core's defaults for what the strategy leaves out (RetryConfig's
// default in config/components/sink.rs: 1ms, factor 1, no cap, no jitter,
// 65535 steps, onFailure retry), not the sink's: numaflow-core gives a
// stage strategy nothing of the sink's. As there, onFailure retry takes
// 65535 steps whatever steps says, and once they are spent the input goes
// back to the source (shared/retry.rs, RetryStep::Nack).
func (c *converter) stageRetry(p, prefix string, r *nf.RetryStrategy) {
	if r == nil {
		return
	}
	c.checkRetry(p, r)
	onFailure := nf.OnFailureRetry
	if r.OnFailure != nil {
		onFailure = *r.OnFailure
	}
	if onFailure == nf.OnFailureFallback {
		c.fail(p+".onFailure", "fallback is for sinks; Numaflow refuses it for a transformer or UDF too")
	}
	interval, steps, factor, capDur, jitter := "1ms", uint32(65535), 1.0, "0s", 0.0
	bp := p + ".backoff"
	if b := r.BackOff; b != nil {
		if b.Interval != nil {
			interval = dur(b.Interval)
		}
		if b.Factor != nil {
			factor = *b.Factor
		}
		if b.Cap != nil {
			capDur = dur(b.Cap)
		}
		if b.Jitter != nil {
			jitter = *b.Jitter
		}
		if b.Steps != nil {
			switch n := *b.Steps & 0xffff; {
			case onFailure == nf.OnFailureRetry:
				c.warn(bp+".steps", "ignored with onFailure retry, as Numaflow ignores it: 65535 tries, then the input goes back to the source")
			case n == 0:
				c.fail(bp+".steps", "%d is 0 retries in Numaflow, which keeps steps in 16 bits; use 1 to 65535", *b.Steps)
			default:
				if n != *b.Steps {
					c.warn(bp+".steps", "%d is %d retries, as Numaflow keeps steps in 16 bits", *b.Steps, n)
				}
				steps = n
			}
		}
	}
	c.setEnv(prefix+"RETRY_INTERVAL", interval, bp+".interval")
	c.setEnv(prefix+"RETRY_STEPS", strconv.FormatUint(uint64(steps), 10), bp+".steps")
	c.setEnv(prefix+"RETRY_FACTOR", strconv.FormatFloat(factor, 'g', -1, 64), bp+".factor")
	c.setEnv(prefix+"RETRY_CAP", capDur, bp+".cap")
	c.setEnv(prefix+"RETRY_JITTER", strconv.FormatFloat(jitter, 'g', -1, 64), bp+".jitter")
	c.setEnv(prefix+"ON_FAILURE", string(onFailure), p+".onFailure")
}

func (c *converter) retry() {
	p := "spec.sink.retryStrategy"
	r := c.mv.Spec.Sink.RetryStrategy
	c.checkRetry(p, &r)
	if b := r.BackOff; b != nil {
		bp := p + ".backoff"
		if b.Interval != nil {
			c.setEnv("MV_RETRY_INTERVAL", dur(b.Interval), bp+".interval")
		}
		if b.Factor != nil {
			c.setEnv("MV_RETRY_FACTOR", strconv.FormatFloat(*b.Factor, 'g', -1, 64), bp+".factor")
		}
		if b.Cap != nil {
			c.setEnv("MV_RETRY_CAP", dur(b.Cap), bp+".cap")
		}
		if b.Jitter != nil {
			c.setEnv("MV_RETRY_JITTER", strconv.FormatFloat(*b.Jitter, 'g', -1, 64), bp+".jitter")
		}
	}
	if r.OnFailure != nil {
		if *r.OnFailure == nf.OnFailureFallback && c.mv.Spec.Sink.Fallback == nil {
			c.fail(p+".onFailure", "fallback needs a fallback sink (spec.sink.fallback)")
		}
		c.setEnv("MV_ON_FAILURE", string(*r.OnFailure), p+".onFailure")
	}
	c.retrySteps(p, r)
}

// retrySteps sets MV_RETRY_STEPS as numaflow-core counts a sink's retries:
// with onFailure retry it ignores steps and retries on; with fallback or
// drop it takes steps in 16 bits (steps as u16), 65535 when unset, so a
// sink that keeps failing reaches the fallback or the drop.
func (c *converter) retrySteps(p string, r nf.RetryStrategy) {
	var steps *uint32
	if r.BackOff != nil {
		steps = r.BackOff.Steps
	}
	sp := p + ".backoff.steps"
	if r.OnFailure == nil || *r.OnFailure == nf.OnFailureRetry {
		if steps != nil {
			c.warn(sp, "ignored with onFailure retry, as Numaflow ignores it (it retries 65535 times, the runner for ever)")
		}
		return
	}
	n := uint32(65535) // numaflow-core's DEFAULT_MAX_SINK_RETRY_ATTEMPTS
	if steps != nil {
		n = *steps & 0xffff
		switch {
		case n == 0:
			c.fail(sp, "%d is 0 retries in Numaflow, which keeps steps in 16 bits; use 1 to 65535", *steps)
		case n != *steps:
			c.warn(sp, "%d is %d retries, as Numaflow keeps steps in 16 bits", *steps, n)
		}
	}
	c.setEnv("MV_RETRY_STEPS", strconv.FormatUint(uint64(n), 10), sp)
	// A transformer or UDF without its own retry strategy is retried for
	// ever in Numaflow, whatever the sink's steps.
	src := c.mv.Spec.Source
	if t := src.UDTransformer; t != nil && t.RetryStrategy == nil || c.mv.Spec.UDF != nil && c.mv.Spec.UDF.RetryStrategy == nil {
		c.setEnv("MV_STAGE_RETRY_STEPS", "unlimited", sp)
	}
}

func (c *converter) limits() {
	l := c.mv.Spec.Limits
	if l == nil {
		return
	}
	p := "spec.limits"
	if l.ReadBatchSize != nil {
		if *l.ReadBatchSize == 0 {
			c.fail(p+".readBatchSize", "must be at least 1")
		}
		c.setEnv("MV_READ_BATCH_SIZE", strconv.FormatUint(*l.ReadBatchSize, 10), p+".readBatchSize")
	}
	c.setPositiveDuration("MV_READ_TIMEOUT", p+".readTimeout", l.ReadTimeout)
	if l.Concurrency != nil {
		if *l.Concurrency == 0 {
			c.fail(p+".concurrency", "must be at least 1")
		}
		c.setEnv("MV_CONCURRENCY", strconv.FormatUint(*l.Concurrency, 10), p+".concurrency")
	}
	if r := l.RateLimit; r != nil {
		c.rateLimit(p+".rateLimit", r)
	}
}

func (c *converter) rateLimit(p string, r *nf.RateLimit) {
	if r.Max == nil {
		c.fail(p+".max", "required: the most messages read per second")
	}
	if *r.Max == 0 {
		c.fail(p+".max", "must be at least 1")
	}
	c.setEnv("MV_RATE_LIMIT_MAX", strconv.FormatUint(*r.Max, 10), p+".max")
	if r.Min != nil {
		if *r.Min > *r.Max {
			c.fail(p+".min", "%d is more than max (%d)", *r.Min, *r.Max)
		}
		c.setEnv("MV_RATE_LIMIT_MIN", strconv.FormatUint(*r.Min, 10), p+".min")
	}
	if r.RampUpDuration != nil {
		c.nonNegative(p+".rampUpDuration", r.RampUpDuration)
		c.setEnv("MV_RATE_LIMIT_RAMP_UP", dur(r.RampUpDuration), p+".rampUpDuration")
	}
	if s := r.RateLimiterStore; s != nil {
		sp := p + ".store"
		switch {
		case s.RateLimiterRedisStore != nil && s.RateLimiterInMemoryStore != nil:
			c.fail(sp+".inMemoryStore", "a second store next to redisStore: set one")
		case s.RateLimiterInMemoryStore != nil:
			c.setEnv("MV_RATE_LIMIT_STORE", "memory", sp+".inMemoryStore")
		case s.RateLimiterRedisStore != nil:
			c.redisStore(sp+".redisStore", s.RateLimiterRedisStore)
		default:
			c.fail(sp, "no store: set redisStore or inMemoryStore")
		}
	}
	if m := r.RateLimiterModes; m != nil {
		mp := p + ".modes"
		var set []string
		for _, k := range []struct {
			name string
			on   bool
		}{{"scheduled", m.RateLimiterScheduled != nil}, {"relaxed", m.RateLimiterRelaxed != nil}, {"onlyIfUsed", m.RateLimiterOnlyIfUsed != nil}, {"goBackN", m.RateLimiterGoBackN != nil}} {
			if k.on {
				set = append(set, k.name)
			}
		}
		switch len(set) {
		case 0:
			c.fail(mp, "no mode: set one of scheduled, relaxed, onlyIfUsed or goBackN")
		case 1:
		default:
			c.fail(mp+"."+set[1], "a second mode next to %s: set one", set[0])
		}
		c.setEnv("MV_RATE_LIMIT_MODE", set[0], mp+"."+set[0])
		percent := func(path string, v *uint32, env string) {
			if v == nil {
				return
			}
			if *v > 100 {
				c.fail(path, "must be 0 to 100, got %d", *v)
			}
			c.setEnv(env, strconv.FormatUint(uint64(*v), 10), path)
		}
		if o := m.RateLimiterOnlyIfUsed; o != nil {
			percent(mp+".onlyIfUsed.thresholdPercentage", o.ThresholdPercentage, "MV_RATE_LIMIT_THRESHOLD_PERCENT")
		}
		if g := m.RateLimiterGoBackN; g != nil {
			gp := mp + ".goBackN"
			if g.CoolDownPeriod != nil {
				c.nonNegative(gp+".coolDownPeriod", g.CoolDownPeriod)
				c.setEnv("MV_RATE_LIMIT_COOLDOWN", dur(g.CoolDownPeriod), gp+".coolDownPeriod")
			}
			percent(gp+".rampDownPercentage", g.RampDownPercentage, "MV_RATE_LIMIT_RAMP_DOWN_PERCENT")
			percent(gp+".thresholdPercentage", g.ThresholdPercentage, "MV_RATE_LIMIT_THRESHOLD_PERCENT")
		}
	}
	if r.ResumedRampUp != nil {
		c.setEnv("MV_RATE_LIMIT_RESUMED_RAMP_UP", strconv.FormatBool(*r.ResumedRampUp), p+".resumedRampUp")
	}
	if r.TTL != nil {
		c.nonNegative(p+".ttl", r.TTL)
		c.setEnv("MV_RATE_LIMIT_TTL", dur(r.TTL), p+".ttl")
	}
}

func (c *converter) redisStore(p string, r *nf.RateLimiterRedisStore) {
	switch strings.ToLower(r.Mode) {
	case "single":
	case "sentinel":
		c.fail(p+".sentinel", "Redis Sentinel is not supported: %s", whySentinel)
	default:
		c.fail(p+".mode", "%q: want single (sentinel is not supported)", r.Mode)
	}
	if r.Sentinel != nil {
		c.fail(p+".sentinel", "set with mode single: remove it, or use url")
	}
	if r.URL == nil || *r.URL == "" {
		c.fail(p+".url", "required in mode single: redis://host:6379/0 or rediss://...")
	}
	u, err := url.Parse(*r.URL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		c.fail(p+".url", "want redis://host:port[/db] or rediss://..., got %q", *r.URL)
	}
	if r.DB != nil {
		db := strconv.Itoa(int(*r.DB))
		switch strings.Trim(u.Path, "/") {
		case "":
			u.Path = "/" + db
		case db:
		default:
			c.fail(p+".db", "%s differs from the database in url (%s)", db, u.Path)
		}
	}
	c.setEnv("MV_RATE_LIMIT_STORE", "redis", p)
	c.setEnv("MV_RATE_LIMIT_REDIS_URL", u.String(), p+".url")
}

func (c *converter) bypass() {
	b := c.mv.Spec.Bypass
	if b == nil {
		return
	}
	s := c.mv.Spec.Sink
	for _, t := range []struct {
		path, env string
		fc        *nf.ForwardConditions
		present   bool
	}{
		{"spec.bypass.sink", "MV_BYPASS_SINK", b.Sink, true},
		{"spec.bypass.fallback", "MV_BYPASS_FALLBACK", b.Fallback, s.Fallback != nil},
		{"spec.bypass.onSuccess", "MV_BYPASS_ON_SUCCESS", b.OnSuccess, s.OnSuccess != nil},
	} {
		if t.fc == nil {
			continue
		}
		if !t.present {
			c.fail(t.path, "bypass to a sink that is not configured (spec.sink.%s)", strings.TrimPrefix(t.path, "spec.bypass."))
		}
		op := "or"
		if t.fc.Tags.Operator != nil {
			op = string(*t.fc.Tags.Operator)
		}
		if op != "or" && op != "and" && op != "not" {
			c.fail(t.path+".tags.operator", "%q: want and, or or not", op)
		}
		if len(t.fc.Tags.Values) == 0 {
			c.fail(t.path+".tags.values", "required: at least one tag")
		}
		for i, v := range t.fc.Tags.Values {
			if v == "" || strings.Contains(v, ",") {
				c.fail(fmt.Sprintf("%s.tags.values[%d]", t.path, i), "%q: a tag must be non-empty and without commas", v)
			}
		}
		c.setEnv(t.env, op+":"+strings.Join(t.fc.Tags.Values, ","), t.path)
	}
}

func (c *converter) lifecycle() {
	switch ph := c.mv.Spec.Lifecycle.DesiredPhase; ph {
	case "", nf.PhaseRunning:
	case nf.PhasePaused:
		c.paused = true
	default:
		c.fail("spec.lifecycle.desiredPhase", "%q: want Running or Paused", ph)
	}
}

// scaleSettings are the scaling numbers derived from spec.replicas and
// spec.scale.
type scaleSettings struct {
	min, max, initial int32
	target            uint32
	fixed             bool
}

func (c *converter) scale() scaleSettings {
	sc := &c.mv.Spec.Scale
	p := "spec.scale"
	var st scaleSettings
	replicas := int32(1)
	if r := c.mv.Spec.Replicas; r != nil {
		if *r < 0 {
			c.fail("spec.replicas", "must not be negative, got %d", *r)
		}
		replicas = *r
	}
	if replicas == 0 {
		c.warn("spec.replicas", "0: a Knative Service keeps at least one pod with these scalers, so the runner is paused instead (the ConfigMap's paused: \"true\"); it reads nothing until you set it to \"false\"")
		c.paused = true
		replicas = 1
	}
	st.target = nf.DefaultTargetProcessingSeconds
	if sc.TargetProcessingSeconds != nil {
		if *sc.TargetProcessingSeconds == 0 {
			c.fail(p+".targetProcessingSeconds", "must be at least 1")
		}
		st.target = *sc.TargetProcessingSeconds
	}
	if sc.Disabled {
		st.fixed = true
		st.min, st.max = replicas, replicas
		for _, f := range []struct {
			path string
			set  bool
		}{{p + ".min", sc.Min != nil}, {p + ".max", sc.Max != nil}, {p + ".cron", sc.Cron != nil}} {
			if f.set {
				c.warn(f.path, "ignored: scale.disabled is true, so the Service runs exactly spec.replicas (%d) pods, as Numaflow does", replicas)
			}
		}
		return st
	}
	st.min = 1
	if sc.Min != nil {
		switch {
		case *sc.Min < 0:
			c.fail(p+".min", "must not be negative, got %d", *sc.Min)
		case *sc.Min == 0:
			c.warn(p+".min", "0 raised to 1 (no scale to zero): %s", whyZero)
		default:
			st.min = *sc.Min
		}
	}
	st.max = nf.DefaultMaxReplicas
	if sc.Max != nil {
		if *sc.Max < 1 {
			c.fail(p+".max", "must be at least 1, got %d", *sc.Max)
		}
		st.max = *sc.Max
	}
	if st.min > st.max {
		c.fail(p+".min", "%d is more than max (%d)", st.min, st.max)
	}
	if c.mv.Spec.Replicas != nil {
		st.initial = min(max(replicas, st.min), st.max)
	}
	if sc.ZeroReplicaSleepSeconds != nil {
		c.warn(p+".zeroReplicaSleepSeconds", "dropped: the Service never scales to zero (see scale.min)")
	}
	if sc.TargetBufferAvailability != nil {
		c.warn(p+".targetBufferAvailability", "dropped: it is for a pipeline's buffered vertices; Numaflow ignores it for a MonoVertex too")
	}
	if sc.LookbackSeconds != nil {
		lb := *sc.LookbackSeconds
		if lb == 0 {
			c.fail(p+".lookbackSeconds", "must be at least 1")
		}
		if lb > nf.MaxLookbackSeconds {
			c.warn(p+".lookbackSeconds", "%d lowered to %d, as Numaflow caps it", lb, nf.MaxLookbackSeconds)
			lb = nf.MaxLookbackSeconds
		}
		c.setEnv("MV_LOOKBACK_SECONDS", strconv.FormatUint(uint64(lb), 10), p+".lookbackSeconds")
	}
	if sc.ScaleUpCooldownSeconds != nil {
		c.setEnv("MV_SCALE_UP_COOLDOWN_SECONDS", strconv.FormatUint(uint64(*sc.ScaleUpCooldownSeconds), 10), p+".scaleUpCooldownSeconds")
	}
	if sc.ScaleDownCooldownSeconds != nil {
		c.setEnv("MV_SCALE_DOWN_COOLDOWN_SECONDS", strconv.FormatUint(uint64(*sc.ScaleDownCooldownSeconds), 10), p+".scaleDownCooldownSeconds")
	}
	up, down := perScale(sc.ReplicasPerScaleUp, sc.DeprecatedReplicasPerScale), perScale(sc.ReplicasPerScaleDown, sc.DeprecatedReplicasPerScale)
	if up != nil {
		c.setEnv("MV_SCALE_REPLICAS_PER_UP", strconv.FormatUint(uint64(*up), 10), p+".replicasPerScaleUp")
	}
	if down != nil {
		c.setEnv("MV_SCALE_REPLICAS_PER_DOWN", strconv.FormatUint(uint64(*down), 10), p+".replicasPerScaleDown")
	}
	if sc.DeprecatedReplicasPerScale != nil {
		c.warn(p+".replicasPerScale", "deprecated by Numaflow: carried as replicasPerScaleUp and replicasPerScaleDown where those are not set")
	}
	if sc.Cron != nil {
		c.checkCron(p+".cron", sc.Cron)
	}
	return st
}

func perScale(v, deprecated *uint32) *uint32 {
	if v != nil {
		return v
	}
	return deprecated
}

func (c *converter) checkCron(p string, cr *nf.CronScheduling) {
	if cr.Timezone != "" {
		if _, err := time.LoadLocation(cr.Timezone); err != nil {
			c.fail(p+".timezone", "%q is not an IANA time zone", cr.Timezone)
		}
	}
	if len(cr.Schedules) == 0 {
		c.fail(p+".schedules", "required: at least one schedule")
	}
	for i, s := range cr.Schedules {
		sp := fmt.Sprintf("%s.schedules[%d]", p, i)
		if _, err := kedaCron(s.Start); err != nil {
			c.fail(sp+".start", "%v", err)
		}
		if _, err := kedaCron(s.End); err != nil {
			c.fail(sp+".end", "%v", err)
		}
		if s.Start == s.End {
			c.fail(sp+".end", "must differ from start")
		}
		if s.Min == nil || *s.Min < 0 {
			c.fail(sp+".min", "required, at least 0")
		}
		if s.Max == nil || *s.Max < *s.Min {
			c.fail(sp+".max", "required, at least min")
		}
		if c.opts.Scaler != ScalerKEDA {
			continue
		}
		// KEDA's cron trigger raises the floor to min in the window; the
		// HPA takes the largest of its triggers, so nothing lowers the
		// ceiling for a window, and a replica count above it would break
		// what the window promises (a downstream kept below a load).
		switch maxR := c.mv.Spec.Scale.GetMaxReplicas(); {
		case *s.Max < maxR:
			c.fail(sp+".max", "%d is below spec.scale.max (%d): KEDA's cron trigger raises the floor to min in the window, but nothing in Knative or KEDA lowers the ceiling for a window, so the Service could scale past %d; set it to %d, or set spec.scale.max to %d for all hours", *s.Max, maxR, *s.Max, maxR, *s.Max)
		case *s.Max > maxR:
			c.warn(sp+".max", "%d is above spec.scale.max (%d): the ceiling stays max-scale (%d) in the window too, as KEDA's maxReplicaCount is one for all hours; raise spec.scale.max to %d to allow it", *s.Max, maxR, maxR, *s.Max)
		}
	}
	if c.opts.Scaler != ScalerKEDA {
		c.warn(p, "not carried with the HPA class, which has no time-based trigger: the windows' min and max are not applied, the rest of spec.scale is; convert with --scaler keda for a KEDA cron trigger per schedule")
	}
}

// kedaCron turns Numaflow's six-field cron (with seconds) into KEDA's
// five fields; a window must start on a whole minute.
func kedaCron(s string) (string, error) {
	f := strings.Fields(s)
	if len(f) != 6 {
		return "", fmt.Errorf("%q: want Numaflow's six fields (second minute hour day-of-month month day-of-week)", s)
	}
	if f[0] != "0" {
		return "", fmt.Errorf("%q: KEDA's cron scaler works in whole minutes; the seconds field must be 0", s)
	}
	return strings.Join(f[1:], " "), nil
}

// build assembles the ConfigMap, the Service and the PodMonitor.
func (c *converter) build() {
	mv, spec := c.mv, &c.mv.Spec
	st := c.scale()
	c.maxUnavailable(&st)
	c.setEnv("MV_SCALE_TARGET_SECONDS", strconv.FormatUint(uint64(st.target), 10), "spec.scale.targetProcessingSeconds")
	c.setEnv("MV_MIN_SCALE", strconv.Itoa(int(st.min)), "spec.scale.min")
	c.setEnv("MV_MAX_SCALE", strconv.Itoa(int(st.max)), "spec.scale.max")

	labels := map[string]string{"app.kubernetes.io/name": "monovertex", "app.kubernetes.io/instance": mv.Name}
	objLabels := mergeMaps(labels, mv.Labels)
	objAnns := map[string]string{}
	for k, v := range mv.Annotations {
		if k != corev1.LastAppliedConfigAnnotation {
			objAnns[k] = v
		}
	}
	cmName := mv.Name + "-config"
	paused := strconv.FormatBool(c.paused)
	c.res.ConfigMap = &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: mv.Namespace, Labels: objLabels},
		Data:       mergeMaps(map[string]string{"paused": paused}, c.configData),
	}

	// The pod template's annotations: the autoscaler wiring first, then the
	// user's spec.metadata, which may not override it.
	anns := c.scalerAnnotations(st)
	tmplLabels := mergeMaps(labels, map[string]string{"numaflow.numaproj.io/mono-vertex-name": mv.Name})
	if m := spec.Metadata; m != nil {
		for _, k := range slices.Sorted(maps.Keys(m.Annotations)) {
			if _, ok := anns[k]; ok {
				c.fail(fmt.Sprintf("spec.metadata.annotations[%q]", k), "set by mvctl from spec.scale and --scaler; remove it")
			}
			anns[k] = m.Annotations[k]
		}
		for k, v := range m.Labels {
			tmplLabels[k] = v
		}
	}

	runner := c.runnerContainer()
	c.checkRunnerEnv(runner)
	pod := corev1.PodSpec{
		Containers: append([]corev1.Container{runner}, c.sidecars...),
		Volumes: append([]corev1.Volume{
			{Name: udsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: configVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cmName}}}},
		}, c.volumes...),
	}
	c.podTemplate(&pod)

	svcAnns := objAnns
	if c.opts.RolloutDuration != "" {
		svcAnns = mergeMaps(objAnns, map[string]string{"serving.knative.dev/rollout-duration": c.opts.RolloutDuration})
	}
	c.updateStrategy()
	timeout := int64(60)
	c.res.Service = &servingv1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "serving.knative.dev/v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: mv.Name, Namespace: mv.Namespace,
			Labels:      mergeMaps(objLabels, map[string]string{"networking.knative.dev/visibility": "cluster-local"}),
			Annotations: nilIfEmpty(svcAnns)},
		Spec: servingv1.ServiceSpec{ConfigurationSpec: servingv1.ConfigurationSpec{Template: servingv1.RevisionTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: tmplLabels, Annotations: anns},
			Spec:       servingv1.RevisionSpec{PodSpec: pod, TimeoutSeconds: &timeout},
		}}},
	}
	if c.opts.PodMonitor {
		c.res.PodMonitor = podMonitor(mv.Name, mv.Namespace, objLabels)
	}
	if spec.DaemonTemplate != nil {
		c.warn("spec.daemonTemplate", "dropped: there is no daemon Deployment; the runner serves Numaflow's daemon API itself when MV_DAEMON_PORT is set (4327, as the daemon's), /status and the metrics the daemon served (pending, rates) on its admin port, and the Knative autoscaler (%s) takes the daemon's scaling decisions", c.opts.Scaler)
	}
}

func (c *converter) updateStrategy() {
	u := c.mv.Spec.UpdateStrategy
	if u.Type != "" && u.Type != nf.RollingUpdate {
		c.fail("spec.updateStrategy.type", "%q: want RollingUpdate", u.Type)
	}
	if u.RollingUpdate != nil && u.RollingUpdate.MaxUnavailable != nil {
		if _, err := intstr.GetScaledValueFromIntOrPercent(u.RollingUpdate.MaxUnavailable, 1, true); err != nil {
			c.fail("spec.updateStrategy.rollingUpdate.maxUnavailable", "%v", err)
		}
	}
}

// maxUnavailable is Numaflow's updateStrategy.rollingUpdate.maxUnavailable
// as Knative's rollout can carry it. A Knative rollout starts the new
// revision with initial-scale pods, retires the old revision once they are
// ready, and the autoscaler takes it on from there: so at most replicas -
// initial-scale are unavailable, and maxUnavailable sets initial-scale to
// replicas - maxUnavailable (no lower than min-scale), which also keeps the
// surge of new pods that small, as Numaflow's update replaces pods without
// a surge. Without spec.replicas there is no count to take it from.
func (c *converter) maxUnavailable(st *scaleSettings) {
	u := c.mv.Spec.UpdateStrategy.RollingUpdate
	if u == nil || u.MaxUnavailable == nil {
		return
	}
	p := "spec.updateStrategy.rollingUpdate.maxUnavailable"
	r := c.mv.Spec.Replicas
	if r == nil || st.fixed {
		c.warn(p, "not carried: it counts from spec.replicas, which is not set (or scale is disabled, so every pod starts at once); the new revision starts with initial-scale pods and the old one is retired once they are ready")
		return
	}
	// Numaflow rounds a percentage down.
	n, _ := intstr.GetScaledValueFromIntOrPercent(u.MaxUnavailable, int(*r), false)
	st.initial = min(max(*r-int32(n), st.min), st.max)
}

// scalerAnnotations wires the Service to the autoscaler.
func (c *converter) scalerAnnotations(st scaleSettings) map[string]string {
	anns := map[string]string{
		"autoscaling.knative.dev/min-scale": strconv.Itoa(int(st.min)),
		"autoscaling.knative.dev/max-scale": strconv.Itoa(int(st.max)),
		"prometheus.io/scrape":              "true",
		"prometheus.io/port":                strconv.Itoa(adminPort),
		"prometheus.io/path":                "/metrics",
	}
	if st.initial > 0 {
		anns["autoscaling.knative.dev/initial-scale"] = strconv.Itoa(int(st.initial))
	}
	if st.fixed {
		// min = max: Knative's default autoscaler holds the count and
		// needs no metric.
		return anns
	}
	target := strconv.FormatUint(uint64(st.target), 10)
	anns["autoscaling.knative.dev/class"] = "hpa.autoscaling.knative.dev"
	anns["autoscaling.knative.dev/metric"] = backlogMetric
	anns["autoscaling.knative.dev/target"] = target
	sc := &c.mv.Spec.Scale
	if c.opts.Scaler == ScalerHPA {
		if sc.ScaleUpCooldownSeconds != nil || sc.ScaleDownCooldownSeconds != nil {
			w := sc.GetScaleDownCooldownSeconds()
			if sc.ScaleDownCooldownSeconds == nil {
				w = sc.GetScaleUpCooldownSeconds()
			}
			w = min(max(w, 6), 3600)
			anns["autoscaling.knative.dev/window"] = strconv.Itoa(w) + "s"
			c.warn("spec.scale", "the HPA class has one stabilization window for both directions (autoscaling.knative.dev/window: %ds, Knative's bounds 6s to 1h); --scaler keda carries each cooldown", w)
		}
		if sc.ReplicasPerScaleUp != nil || sc.ReplicasPerScaleDown != nil || sc.DeprecatedReplicasPerScale != nil {
			c.warn("spec.scale", "replicasPerScaleUp/Down not carried: Knative's HPA class sets no scaling policies; --scaler keda does")
		}
		return anns
	}
	query := kedaQuery(c.mv.Name, target)
	anns["autoscaling.knative.dev/metric-type"] = "Value"
	anns["autoscaling.knative.dev/prometheus-address"] = c.opts.PrometheusAddress
	anns["autoscaling.knative.dev/prometheus-query"] = query
	so, err := json.Marshal(c.scaledObject(st, query, target))
	if err != nil {
		panic(err)
	}
	anns["autoscaling.knative.dev/scaled-object-override"] = string(so)
	return anns
}

// kedaQuery is P / R for the mono vertex: the backlog in seconds at the
// current total rate (see docs/knative.md, "Scaling on Knative").
func kedaQuery(name, target string) string {
	sel := fmt.Sprintf("{mvtx_name=%q}", name)
	return fmt.Sprintf("(max(monovtx_pending_raw%s >= 0) / (sum(monovtx_processing_rate%s) > 0)) or max(monovtx_pending_raw%s == 0) or vector(%s)", sel, sel, sel, target)
}

// ScaledObject is the part of a KEDA ScaledObject (keda.sh/v1alpha1) the
// converter writes into autoscaling.knative.dev/scaled-object-override:
// Knative's autoscaler-keda extension takes it as the revision's
// ScaledObject and fills in the name, the target Deployment and
// maxReplicaCount.
type ScaledObject struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Spec       ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec is KEDA's ScaledObject spec, as far as it is written.
type ScaledObjectSpec struct {
	MinReplicaCount *int32             `json:"minReplicaCount,omitempty"`
	MaxReplicaCount *int32             `json:"maxReplicaCount,omitempty"`
	Advanced        *KEDAAdvanced      `json:"advanced,omitempty"`
	Triggers        []KEDAScaleTrigger `json:"triggers"`
}

// KEDAAdvanced is KEDA's advanced section.
type KEDAAdvanced struct {
	HorizontalPodAutoscalerConfig *KEDAHPAConfig `json:"horizontalPodAutoscalerConfig"`
}

// KEDAHPAConfig carries the HPA behavior KEDA gives the HPA it creates.
type KEDAHPAConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

// KEDAScaleTrigger is one KEDA trigger.
type KEDAScaleTrigger struct {
	Type       string            `json:"type"`
	MetricType string            `json:"metricType,omitempty"`
	Metadata   map[string]string `json:"metadata"`
}

func (c *converter) scaledObject(st scaleSettings, query, target string) ScaledObject {
	sc := &c.mv.Spec.Scale
	rules := func(cooldown, step int, down bool) *autoscalingv2.HPAScalingRules {
		r := &autoscalingv2.HPAScalingRules{}
		period := int32(min(max(cooldown, 1), 1800))
		if down {
			w := int32(min(cooldown, 3600))
			r.StabilizationWindowSeconds = &w
		} else {
			w := int32(0)
			r.StabilizationWindowSeconds = &w
		}
		if step == 0 {
			p := autoscalingv2.DisabledPolicySelect
			r.SelectPolicy = &p
			return r
		}
		p := autoscalingv2.MaxChangePolicySelect
		r.SelectPolicy = &p
		r.Policies = []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: int32(step), PeriodSeconds: period}}
		return r
	}
	minR, maxR := st.min, st.max
	so := ScaledObject{APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject", Spec: ScaledObjectSpec{
		MinReplicaCount: &minR,
		MaxReplicaCount: &maxR,
		Advanced: &KEDAAdvanced{HorizontalPodAutoscalerConfig: &KEDAHPAConfig{Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp:   rules(sc.GetScaleUpCooldownSeconds(), sc.GetReplicasPerScaleUp(), false),
			ScaleDown: rules(sc.GetScaleDownCooldownSeconds(), sc.GetReplicasPerScaleDown(), true),
		}}},
		Triggers: []KEDAScaleTrigger{{Type: "prometheus", MetricType: "Value", Metadata: map[string]string{
			"serverAddress": c.opts.PrometheusAddress, "query": query, "threshold": target,
		}}},
	}}
	if cr := sc.Cron; cr != nil {
		tz := cr.Timezone
		if tz == "" {
			tz = "UTC"
		}
		for _, s := range cr.Schedules {
			start, _ := kedaCron(s.Start)
			end, _ := kedaCron(s.End)
			so.Spec.Triggers = append(so.Spec.Triggers, KEDAScaleTrigger{Type: "cron", Metadata: map[string]string{
				"timezone": tz, "start": start, "end": end, "desiredReplicas": strconv.Itoa(int(*s.Min)),
			}})
		}
	}
	return so
}

// runnerContainer is the runner with its environment, probes and mounts,
// and spec.containerTemplate applied.
func (c *converter) runnerContainer() corev1.Container {
	yes, no := true, false
	ctr := corev1.Container{
		Name:           runnerName,
		Image:          c.opts.RunnerImage,
		Ports:          []corev1.ContainerPort{{Name: "http1", ContainerPort: servingPort}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}},
			PeriodSeconds: 10, FailureThreshold: 3},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: &yes, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		VolumeMounts: append([]corev1.VolumeMount{
			{Name: udsVolume, MountPath: udsDir},
			{Name: configVolume, MountPath: configDir, ReadOnly: true},
		}, c.mounts...),
	}
	env := c.env
	if t := c.mv.Spec.ContainerTemplate; t != nil {
		p := "spec.containerTemplate"
		if len(t.Resources.Requests) > 0 || len(t.Resources.Limits) > 0 || len(t.Resources.Claims) > 0 {
			ctr.Resources = t.Resources
		}
		ctr.ImagePullPolicy = t.ImagePullPolicy
		if t.SecurityContext != nil {
			ctr.SecurityContext = t.SecurityContext
		}
		for i, e := range t.Env {
			ep := fmt.Sprintf("%s.env[%d]", p, i)
			if from, ok := c.envFrom[e.Name]; ok && numaflowChoices[e.Name] {
				// No Numaflow field says these: the template may choose.
				c.warn(ep, "%s replaces mvctl's %s, which does as Numaflow does", e.Name, envValue(env, e.Name))
				env = slices.DeleteFunc(slices.Clone(env), func(v corev1.EnvVar) bool { return v.Name == e.Name })
			} else if ok {
				if from == "" {
					from = "mvctl"
				}
				c.fail(ep+".name", "%s is set from %s; change that field instead", e.Name, from)
			}
			c.checkEnvSource(ep, e)
		}
		env = append(env, t.Env...)
		ctr.EnvFrom = t.EnvFrom
		applyProbe(ctr.ReadinessProbe, t.ReadinessProbe)
		applyProbe(ctr.LivenessProbe, t.LivenessProbe)
	}
	ctr.Env = env
	return ctr
}

// numaflowChoices are the variables mvctl sets to do as Numaflow does
// where no Numaflow field says anything; containerTemplate.env may set
// them otherwise.
var numaflowChoices = map[string]bool{
	"MV_MESSAGE_IDS":          true,
	"MV_LOG_FORMAT":           true,
	"MV_HTTP_CLOUDEVENTS":     true,
	"MV_KAFKA_SINK_TIMESTAMP": true,
	"MV_STAGE_RETRY_STEPS":    true,
}

// envValue is the value of name in env.
func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return name + "=" + e.Value
		}
	}
	return name
}

// sidecarLivenessProbe is the liveness probe Numaflow puts on a
// user-defined container: numaflow-core's /sidecar-livez, which fails
// while any user container does not answer IsReady, here on the runner's
// admin port (plain HTTP, where Numaflow's is HTTPS), with the container's
// timings or Numaflow's UDContainerLivez defaults. A success threshold
// other than 1 is not allowed on a liveness probe, so it is not taken.
func sidecarLivenessProbe(p *nf.Probe) *corev1.Probe {
	lp := &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/sidecar-livez", Port: intstr.FromInt32(adminPort)}},
		InitialDelaySeconds: 30, PeriodSeconds: 60, TimeoutSeconds: 30, FailureThreshold: 5,
	}
	applyProbe(lp, &nf.Probe{InitialDelaySeconds: p.InitialDelaySeconds, TimeoutSeconds: p.TimeoutSeconds, PeriodSeconds: p.PeriodSeconds, FailureThreshold: p.FailureThreshold})
	return lp
}

func applyProbe(dst *corev1.Probe, p *nf.Probe) {
	if p == nil {
		return
	}
	set := func(d *int32, v *int32) {
		if v != nil {
			*d = *v
		}
	}
	set(&dst.InitialDelaySeconds, p.InitialDelaySeconds)
	set(&dst.TimeoutSeconds, p.TimeoutSeconds)
	set(&dst.PeriodSeconds, p.PeriodSeconds)
	set(&dst.SuccessThreshold, p.SuccessThreshold)
	set(&dst.FailureThreshold, p.FailureThreshold)
}

var reservedContainers = map[string]bool{runnerName: true, "udsource": true, "transformer": true, "udf": true, "udsink": true, "fb-udsink": true, "ons-udsink": true}

// podTemplate applies spec's pod-level fields (AbstractPodTemplate,
// volumes, init containers, sidecars).
func (c *converter) podTemplate(pod *corev1.PodSpec) {
	spec := &c.mv.Spec
	reservedVolumes := map[string]bool{}
	for _, v := range pod.Volumes {
		reservedVolumes[v.Name] = true
	}
	for i, v := range spec.Volumes {
		p := fmt.Sprintf("spec.volumes[%d]", i)
		if reservedVolumes[v.Name] {
			c.fail(p+".name", "%q is the name of a volume mvctl adds; rename it", v.Name)
		}
		switch {
		case v.PersistentVolumeClaim != nil:
			c.feature("kubernetes.podspec-persistent-volume-claim", p+".persistentVolumeClaim", "carried over")
			if !v.PersistentVolumeClaim.ReadOnly {
				c.feature("kubernetes.podspec-persistent-volume-write", p+".persistentVolumeClaim", "mounted writable")
			}
		case v.HostPath != nil:
			c.feature("kubernetes.podspec-volumes-hostpath", p+".hostPath", "carried over")
		case v.CSI != nil:
			c.feature("kubernetes.podspec-volumes-csi", p+".csi", "carried over")
		case v.Ephemeral != nil:
			c.feature("kubernetes.podspec-volumes-ephemeral", p+".ephemeral", "carried over")
		case v.Image != nil:
			c.feature("kubernetes.podspec-volumes-image", p+".image", "carried over")
		}
		pod.Volumes = append(pod.Volumes, v)
	}
	for i, ic := range spec.InitContainers {
		p := fmt.Sprintf("spec.initContainers[%d]", i)
		if reservedContainers[ic.Name] {
			c.fail(p+".name", "%q is the name of a container mvctl adds; rename it", ic.Name)
		}
		for j, e := range ic.Env {
			c.checkEnvSource(fmt.Sprintf("%s.env[%d]", p, j), e)
		}
		pod.InitContainers = append(pod.InitContainers, ic)
	}
	if len(spec.InitContainers) > 0 {
		c.feature("kubernetes.podspec-init-containers", "spec.initContainers", "carried over")
	}
	for i, sc := range spec.Sidecars {
		p := fmt.Sprintf("spec.sidecars[%d]", i)
		if reservedContainers[sc.Name] {
			c.fail(p+".name", "%q is the name of a container mvctl adds; rename it", sc.Name)
		}
		sc := *sc.DeepCopy()
		if len(sc.Ports) > 0 {
			c.warn(p+".ports", "dropped: Knative allows one port per pod, the runner's")
			sc.Ports = nil
		}
		for _, pr := range []struct {
			name  string
			probe **corev1.Probe
		}{{"readinessProbe", &sc.ReadinessProbe}, {"livenessProbe", &sc.LivenessProbe}, {"startupProbe", &sc.StartupProbe}} {
			if *pr.probe != nil {
				c.warn(p+"."+pr.name, "dropped: Knative runs no probes on sidecars unless multi-container-probing is enabled")
				*pr.probe = nil
			}
		}
		for j, e := range sc.Env {
			c.checkEnvSource(fmt.Sprintf("%s.env[%d]", p, j), e)
		}
		pod.Containers = append(pod.Containers, sc)
	}
	t := &spec.AbstractPodTemplate
	if len(t.NodeSelector) > 0 {
		pod.NodeSelector = t.NodeSelector
		c.feature("kubernetes.podspec-nodeselector", "spec.nodeSelector", "carried over")
	}
	if len(t.Tolerations) > 0 {
		pod.Tolerations = t.Tolerations
		c.feature("kubernetes.podspec-tolerations", "spec.tolerations", "carried over")
	}
	if t.Affinity != nil {
		pod.Affinity = t.Affinity
		c.feature("kubernetes.podspec-affinity", "spec.affinity", "carried over")
	}
	if t.SecurityContext != nil {
		pod.SecurityContext = t.SecurityContext
		c.feature("kubernetes.podspec-securitycontext", "spec.securityContext", "carried over")
	}
	pod.ImagePullSecrets = t.ImagePullSecrets
	pod.ServiceAccountName = t.ServiceAccountName
	if t.PriorityClassName != "" {
		pod.PriorityClassName = t.PriorityClassName
		c.feature("kubernetes.podspec-priorityclassname", "spec.priorityClassName", "carried over")
	}
	if t.Priority != nil {
		c.warn("spec.priority", "dropped: Knative does not allow it; the Priority admission controller sets it from priorityClassName")
	}
	if t.RuntimeClassName != nil {
		pod.RuntimeClassName = t.RuntimeClassName
		c.feature("kubernetes.podspec-runtimeclassname", "spec.runtimeClassName", "carried over")
	}
	if a := t.AutomountServiceAccountToken; a != nil {
		if *a {
			c.warn("spec.automountServiceAccountToken", "true dropped: it is Kubernetes' default, and Knative only allows false")
		} else {
			pod.AutomountServiceAccountToken = a
		}
	}
	if t.DNSPolicy != "" {
		pod.DNSPolicy = t.DNSPolicy
		c.feature("kubernetes.podspec-dnspolicy", "spec.dnsPolicy", "carried over")
	}
	if t.DNSConfig != nil {
		pod.DNSConfig = t.DNSConfig
		c.feature("kubernetes.podspec-dnsconfig", "spec.dnsConfig", "carried over")
	}
	if len(t.ResourceClaims) > 0 {
		c.fail("spec.resourceClaims", "Knative Services cannot claim dynamic resources (no field for it in serving v1)")
	}
}

func podMonitor(name, namespace string, labels map[string]string) map[string]any {
	md := map[string]any{"name": name, "labels": labels}
	if namespace != "" {
		md["namespace"] = namespace
	}
	return map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PodMonitor",
		"metadata":   md,
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"serving.knative.dev/service": name}},
			"podMetricsEndpoints": []any{map[string]any{
				"port": "user-port", "path": "/metrics", "interval": "15s",
				"relabelings": []any{
					map[string]any{"sourceLabels": []any{"__address__"}, "regex": `(.+):\d+`, "targetLabel": "__address__", "replacement": "${1}:" + strconv.Itoa(adminPort)},
					map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_label_serving_knative_dev_service"}, "targetLabel": "knative_service"},
					map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_label_serving_knative_dev_revision"}, "targetLabel": "knative_revision"},
				},
			}},
		},
	}
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// SortedFeatures returns the feature flags the output needs, sorted.
func (r *Result) SortedFeatures() []string {
	out := make([]string, 0, len(r.Features))
	for f := range r.Features {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}
