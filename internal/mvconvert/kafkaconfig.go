package mvconvert

import (
	"slices"
	"strconv"
	"strings"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

// kafkaTuning are librdkafka properties that tune the client (buffers,
// timeouts of single requests, batching, compression) without changing
// what is read or written, acked or committed. The runner's client
// (franz-go) has its own settings for them, so they are dropped with a
// warning rather than refused.
var kafkaTuning = []string{
	"allow.auto.create.topics", "api.version.request", "batch.num.messages", "batch.size",
	"broker.address.family", "check.crcs", "client.id", "compression.codec", "compression.level",
	"compression.type", "connections.max.idle.ms", "debug", "enable.partition.eof",
	"fetch.error.backoff.ms", "fetch.max.bytes", "fetch.message.max.bytes", "fetch.min.bytes",
	"fetch.wait.max.ms", "heartbeat.interval.ms", "linger.ms", "log.connection.close", "log_level",
	"max.in.flight", "max.in.flight.requests.per.connection", "max.partition.fetch.bytes",
	"max.poll.interval.ms", "message.send.max.retries", "metadata.max.age.ms",
	"partition.assignment.strategy", "queue.buffering.max.kbytes",
	"queue.buffering.max.messages", "queue.buffering.max.ms", "queued.max.messages.kbytes",
	"queued.min.messages", "receive.message.max.bytes", "reconnect.backoff.max.ms",
	"reconnect.backoff.ms", "request.timeout.ms", "retries", "retry.backoff.max.ms",
	"retry.backoff.ms", "socket.connection.setup.timeout.ms", "socket.keepalive.enable",
	"socket.receive.buffer.bytes", "socket.send.buffer.bytes", "socket.timeout.ms",
	"statistics.interval.ms", "sticky.partitioning.linger.ms", "topic.metadata.refresh.interval.ms",
}

// Properties librdkafka reads only in a consumer or only in a producer; on
// the other it logs that it ignores them, and so the runner ignores them.
var (
	kafkaConsumerOnly = []string{"auto.offset.reset", "session.timeout.ms", "isolation.level", "group.id",
		"enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store", "group.instance.id"}
	kafkaProducerOnly = []string{"message.timeout.ms", "delivery.timeout.ms", "acks", "request.required.acks",
		"enable.idempotence", "partitioner", "transactional.id"}
)

// kafkaSinkConf is what one Kafka sink's config says of the settings the
// runner's Kafka sinks share: variable -> value.
type kafkaSinkConf struct {
	path string
	env  map[string]string
}

// kafkaSinkDefaults are a Numaflow Kafka sink's values of the shared
// settings when its config does not set them: librdkafka's
// message.max.bytes and partitioner, and the message.timeout.ms
// numaflow-kafka sets before the config.
var kafkaSinkDefaults = map[string]string{
	"MV_KAFKA_MAX_MESSAGE_BYTES": "1000000",
	"MV_KAFKA_PRODUCE_TIMEOUT":   "5000ms",
	"MV_KAFKA_PARTITIONER":       "consistent_random",
}

// kafkaConfig maps a Kafka source's or sink's config, librdkafka
// properties as numaflow-core reads them: the text trimmed, one "key:
// value" per line, a line kept only if it holds exactly one colon, key and
// value trimmed. Properties with a runner setting become it; tuning is
// dropped with a warning; properties Numaflow or librdkafka ignore are
// ignored; anything that would change what is read, written or trusted and
// has no runner setting is refused.
func (c *converter) kafkaConfig(p, raw string, sink bool, tls *nf.TLS, sasl *nf.SASL) {
	var conf *kafkaSinkConf
	if sink {
		c.kafkaSinks = append(c.kafkaSinks, kafkaSinkConf{path: p, env: map[string]string{}})
		conf = &c.kafkaSinks[len(c.kafkaSinks)-1]
	}
	if strings.TrimSpace(raw) == "" {
		return
	}
	fp := p + ".config"
	for i, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		parts := strings.Split(line, ":")
		if len(parts) != 2 {
			// Not the line itself: it may hold a secret.
			if strings.TrimSpace(line) != "" {
				c.warn(fp, "line %d ignored, as Numaflow ignores a line without exactly one colon (it has %d)", i+1, len(parts)-1)
			}
			continue
		}
		c.kafkaProperty(fp, strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), conf, tls, sasl)
	}
}

// kafkaProperty maps one librdkafka property of a config at fp: a
// source's when conf is nil, else a sink's into conf.
func (c *converter) kafkaProperty(fp, key, val string, conf *kafkaSinkConf, tls *nf.TLS, sasl *nf.SASL) {
	at := fp + "." + key
	sink := conf != nil
	ms := func(lo, hi int) string {
		n, err := strconv.Atoi(val)
		if err != nil || n < lo || n > hi {
			c.fail(at, "%q: want whole milliseconds from %d to %d", val, lo, hi)
		}
		return strconv.Itoa(n) + "ms"
	}
	lower := strings.ToLower(val)
	switch {
	case sink && slices.Contains(kafkaConsumerOnly, key):
		c.warn(at, "ignored: a consumer property, which librdkafka ignores in Numaflow's Kafka sink")
	case !sink && slices.Contains(kafkaProducerOnly, key):
		c.warn(at, "ignored: a producer property, which librdkafka ignores in Numaflow's Kafka source")
	case key == "auto.offset.reset":
		switch lower {
		case "smallest", "earliest", "beginning":
			c.replaceEnv("MV_KAFKA_START_OFFSET", "earliest", at)
		case "largest", "latest", "end":
			c.replaceEnv("MV_KAFKA_START_OFFSET", "latest", at)
		default:
			c.fail(at, "%q: the runner takes smallest, earliest, beginning, largest, latest or end (librdkafka's error has no equivalent)", val)
		}
	case key == "session.timeout.ms":
		c.replaceEnv("MV_KAFKA_SESSION_TIMEOUT", ms(1000, 3600000), at)
	case key == "isolation.level":
		if lower != "read_committed" && lower != "read_uncommitted" {
			c.fail(at, "%q: want read_committed or read_uncommitted", val)
		}
		c.replaceEnv("MV_KAFKA_ISOLATION_LEVEL", lower, at)
	case key == "group.id" || key == "enable.auto.commit" || key == "auto.commit.interval.ms" || key == "enable.auto.offset.store":
		c.warn(at, "ignored: Numaflow's Kafka source sets group.id and enable.auto.commit=false itself after the config, which makes the others inert")
	case key == "bootstrap.servers":
		c.warn(at, "ignored, as Numaflow sets it itself after the config")
	case key == "message.max.bytes" && !sink:
		c.warn(at, "dropped: it limits requests, which the runner's Kafka source sizes itself")
	case key == "message.max.bytes":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1000 || n > 1000000000 {
			c.fail(at, "%q: librdkafka takes 1000 to 1000000000 bytes", val)
		}
		if n < 1024 {
			c.warn(at, "%d raised to 1024, the runner's least", n)
			n = 1024
		}
		conf.env["MV_KAFKA_MAX_MESSAGE_BYTES"] = strconv.Itoa(n)
	case key == "message.timeout.ms" || key == "delivery.timeout.ms":
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 || n > 1<<31-1 {
			c.fail(at, "%q: librdkafka takes 0 (no limit) to 2147483647 milliseconds", val)
		}
		switch {
		case n == 0:
			c.warn(at, "0 (no limit) becomes the longest, 2147483647ms")
			n = 1<<31 - 1
		case n < 1000:
			c.warn(at, "%dms raised to 1000ms, the runner's least", n)
			n = 1000
		}
		conf.env["MV_KAFKA_PRODUCE_TIMEOUT"] = strconv.Itoa(n) + "ms"
	case key == "partitioner":
		switch lower {
		case "consistent_random", "murmur2_random", "random":
			conf.env["MV_KAFKA_PARTITIONER"] = lower
		case "consistent", "murmur2":
			c.warn(at, "%s_random instead: records without a key (Numaflow's default setKey: false) or with an empty one are spread over the partitions, where librdkafka's %s sends them all to one", lower, lower)
			conf.env["MV_KAFKA_PARTITIONER"] = lower + "_random"
		default:
			c.fail(at, "%q: the runner offers consistent_random (librdkafka's default), murmur2_random and random", val)
		}
	case key == "acks" || key == "request.required.acks":
		if lower != "all" && lower != "-1" {
			c.warn(at, "dropped: the runner's producer always waits for every in-sync replica (acks=all), which is safer and slower than %s", val)
		}
	case key == "enable.idempotence":
		c.warn(at, "dropped: the runner's producer is always idempotent")
	case key == "security.protocol":
		if tls != nil || sasl != nil {
			c.warn(at, "ignored, as Numaflow sets it itself from tls and sasl after the config")
		} else if lower != "plaintext" {
			c.fail(at, "%q without tls or sasl: the runner takes TLS and SASL only from those fields (with Secrets); set them instead", val)
		}
	case strings.HasPrefix(key, "ssl.") || strings.HasPrefix(key, "sasl."):
		c.fail(at, "the runner takes TLS and SASL settings from the tls and sasl fields (with Secrets); set them there")
	case slices.Contains(kafkaTuning, key):
		c.warn(at, "dropped: librdkafka tuning with no setting in the runner's Kafka client (franz-go), which chooses its own")
	default:
		c.fail(at, "not a librdkafka property the runner can carry (it maps auto.offset.reset, session.timeout.ms, isolation.level, message.max.bytes, message.timeout.ms, partitioner and drops tuning); remove it")
	}
}

// kafkaSinkSettings sets the variables every Kafka sink of the runner
// shares from what the sinks' configs say. In Numaflow each sink has its
// own; when they differ, the primary sink's value (its config's, else
// Numaflow's default) is used with a warning naming the others.
func (c *converter) kafkaSinkSettings() {
	if len(c.kafkaSinks) == 0 {
		return
	}
	for _, name := range []string{"MV_KAFKA_MAX_MESSAGE_BYTES", "MV_KAFKA_PRODUCE_TIMEOUT", "MV_KAFKA_PARTITIONER"} {
		set := false
		for _, k := range c.kafkaSinks {
			_, ok := k.env[name]
			set = set || ok
		}
		if !set {
			continue // Numaflow's defaults everywhere: the runner's apply
		}
		value := func(k kafkaSinkConf) string {
			if v, ok := k.env[name]; ok {
				return v
			}
			return kafkaSinkDefaults[name]
		}
		first := c.kafkaSinks[0]
		for _, k := range c.kafkaSinks[1:] {
			if value(k) != value(first) {
				c.warn(k.path+".config", "%s %s not carried: the runner's Kafka sinks share one value, %s's %s", name, value(k), first.path, value(first))
			}
		}
		c.setEnv(name, value(first), first.path+".config")
	}
}

// replaceEnv sets name to value, replacing an earlier value (a default the
// conversion set before it read the config).
func (c *converter) replaceEnv(name, value, from string) {
	for i := range c.env {
		if c.env[i].Name == name {
			c.env[i].Value = value
			c.envFrom[name] = from
			return
		}
	}
	c.setEnv(name, value, from)
}
