package mvconvert

import (
	"slices"
	"strconv"
	"strings"

	nf "github.com/monovertex/monovertex/internal/numaflowapi"
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
	"partition.assignment.strategy", "partitioner", "queue.buffering.max.kbytes",
	"queue.buffering.max.messages", "queue.buffering.max.ms", "queued.max.messages.kbytes",
	"queued.min.messages", "receive.message.max.bytes", "reconnect.backoff.max.ms",
	"reconnect.backoff.ms", "request.timeout.ms", "retries", "retry.backoff.max.ms",
	"retry.backoff.ms", "socket.connection.setup.timeout.ms", "socket.keepalive.enable",
	"socket.receive.buffer.bytes", "socket.send.buffer.bytes", "socket.timeout.ms",
	"statistics.interval.ms", "sticky.partitioning.linger.ms", "topic.metadata.refresh.interval.ms",
}

// kafkaConfig maps a Kafka source's or sink's config, librdkafka
// properties as numaflow-core reads them: the text trimmed, one "key:
// value" per line, a line kept only if it holds exactly one colon, key and
// value trimmed. Properties with a runner setting become it; tuning is
// dropped with a warning; Numaflow's own are ignored as Numaflow overrides
// them; anything that would change what is read, written or trusted and
// has no runner setting is refused.
func (c *converter) kafkaConfig(p, raw string, sink bool, tls *nf.TLS, sasl *nf.SASL) {
	if strings.TrimSpace(raw) == "" {
		return
	}
	fp := p + ".config"
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		parts := strings.Split(line, ":")
		if len(parts) != 2 {
			if l := strings.TrimSpace(line); l != "" {
				c.warn(fp, "%q ignored, as Numaflow ignores a line without exactly one colon", l)
			}
			continue
		}
		c.kafkaProperty(fp, strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), sink, tls, sasl)
	}
}

// kafkaProperty maps one librdkafka property of a config at fp.
func (c *converter) kafkaProperty(fp, key, val string, sink bool, tls *nf.TLS, sasl *nf.SASL) {
	at := fp + "." + key
	ms := func(lo, hi int) string {
		n, err := strconv.Atoi(val)
		if err != nil || n < lo || n > hi {
			c.fail(at, "%q: want whole milliseconds from %d to %d", val, lo, hi)
		}
		return strconv.Itoa(n) + "ms"
	}
	part := "source"
	if sink {
		part = "sink"
	}
	switch {
	case !sink && key == "auto.offset.reset":
		switch strings.ToLower(val) {
		case "smallest", "earliest", "beginning":
			c.replaceEnv("MV_KAFKA_START_OFFSET", "earliest", at)
		case "largest", "latest", "end":
			c.replaceEnv("MV_KAFKA_START_OFFSET", "latest", at)
		default:
			c.fail(at, "%q: librdkafka takes smallest, earliest, beginning, largest, latest or end", val)
		}
	case !sink && key == "session.timeout.ms":
		c.replaceEnv("MV_KAFKA_SESSION_TIMEOUT", ms(1000, 3600000), at)
	case !sink && key == "isolation.level":
		if val != "read_committed" && val != "read_uncommitted" {
			c.fail(at, "%q: want read_committed or read_uncommitted", val)
		}
		c.replaceEnv("MV_KAFKA_ISOLATION_LEVEL", val, at)
	case sink && key == "message.max.bytes":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1024 || n > 1<<30 {
			c.fail(at, "%q: want bytes from 1024 to 1073741824", val)
		}
		c.sharedEnv("MV_KAFKA_MAX_MESSAGE_BYTES", val, at)
	case sink && (key == "message.timeout.ms" || key == "delivery.timeout.ms"):
		c.sharedEnv("MV_KAFKA_PRODUCE_TIMEOUT", ms(1000, 1<<31-1), at)
	case sink && (key == "acks" || key == "request.required.acks"):
		if val != "all" && val != "-1" {
			c.warn(at, "dropped: the runner's producer always waits for every in-sync replica (acks=all), which is safer and slower than %s", val)
		}
	case sink && key == "enable.idempotence":
		c.warn(at, "dropped: the runner's producer is always idempotent")
	case key == "bootstrap.servers" || key == "group.id" || key == "enable.auto.commit":
		c.warn(at, "ignored, as Numaflow sets it itself after the config")
	case key == "security.protocol":
		want := map[[2]bool]string{{false, false}: "plaintext", {true, false}: "ssl", {false, true}: "sasl_plaintext", {true, true}: "sasl_ssl"}[[2]bool{tls != nil, sasl != nil}]
		if strings.ToLower(val) != want {
			c.fail(at, "%q, but the %s's tls and sasl say %s: the runner takes TLS and SASL only from those fields, so set them instead", val, part, want)
		}
	case strings.HasPrefix(key, "ssl.") || strings.HasPrefix(key, "sasl."):
		c.fail(at, "the runner takes TLS and SASL settings from the %s's tls and sasl fields (with Secrets); set them there", part)
	case slices.Contains(kafkaTuning, key):
		c.warn(at, "dropped: librdkafka tuning with no setting in the runner's Kafka client (franz-go), which chooses its own")
	default:
		c.fail(at, "not a librdkafka %s property the runner can carry (it maps auto.offset.reset, session.timeout.ms, isolation.level, message.max.bytes, message.timeout.ms and drops tuning); remove it", part)
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

// sharedEnv sets a variable every Kafka sink shares: a second sink may
// repeat the value, not change it.
func (c *converter) sharedEnv(name, value, from string) {
	for _, e := range c.env {
		if e.Name == name {
			if e.Value != value {
				c.fail(from, "%s differs from %s's %s: every Kafka sink of the runner shares %s", value, c.envFrom[name], e.Value, name)
			}
			return
		}
	}
	c.setEnv(name, value, from)
}
