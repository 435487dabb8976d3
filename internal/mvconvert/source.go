package mvconvert

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/monovertex/monovertex/adapters/source/generator"
	"github.com/monovertex/monovertex/adapters/transformer/jsonata"
	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/runner"
)

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
