package mvconvert

import (
	"reflect"
	"strconv"
	"strings"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

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
