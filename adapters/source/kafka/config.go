package kafka

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/monovertex/monovertex/internal/kafkaconn"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the Kafka source's settings.
type Config struct {
	Brokers        string        `envconfig:"MV_KAFKA_BROKERS" desc:"comma-separated bootstrap brokers, e.g. kafka-0:9092,kafka-1:9092"`
	Topic          string        `envconfig:"MV_KAFKA_TOPIC" desc:"topic to read (must exist), or comma-separated topics, as Numaflow's topic"`
	Group          string        `envconfig:"MV_KAFKA_GROUP" desc:"consumer group shared by all replicas; offsets are committed for it"`
	StartOffset    string        `envconfig:"MV_KAFKA_START_OFFSET" default:"earliest" desc:"where a group without a committed offset starts: earliest or latest (Numaflow's default is earliest)"`
	Isolation      string        `envconfig:"MV_KAFKA_ISOLATION_LEVEL" default:"read_committed" desc:"read_committed skips records of aborted transactions and waits for open ones to end, as Numaflow's Kafka source (librdkafka's default) does; read_uncommitted reads every record"`
	CommitInterval time.Duration `envconfig:"MV_KAFKA_COMMIT_INTERVAL" default:"1s" desc:"how often the final offsets are committed"`
	RevokeTimeout  time.Duration `envconfig:"MV_KAFKA_REVOKE_TIMEOUT" default:"10s" desc:"how long a rebalance waits for the in-flight records of a partition taken away before committing what is final; keep it below the rebalance timeout (60s)"`
	SessionTimeout time.Duration `envconfig:"MV_KAFKA_SESSION_TIMEOUT" default:"45s" desc:"group session timeout: a replica that stops heartbeating loses its partitions after it"`
	NackDelay      time.Duration `envconfig:"MV_KAFKA_NACK_DELAY" default:"0s" desc:"delay before a nacked record is read again when the nack asks for none"`
	MaxHeld        int           `envconfig:"MV_KAFKA_MAX_HELD" default:"100000" desc:"most records of one partition tracked while an unacked record holds its commit back; reading that partition pauses beyond it"`
	CheckCommits   bool          `envconfig:"MV_KAFKA_CHECK_COMMITS" default:"false" desc:"test hook: check every commit against a separate account of unacked records and stop (exit 1) if one is beyond them"`
	CEMode         string        `envconfig:"MV_KAFKA_CE_MODE" default:"none" desc:"none, or knative: each record becomes the CloudEvent a Knative KafkaSource delivers (type dev.knative.kafka.event, id partition:<p>/offset:<o>, kafkaheader<name> extensions), so Triggers filtering on them keep working"`
	CESourceName   string        `envconfig:"MV_KAFKA_CE_SOURCE_NAME" desc:"the KafkaSource's name in the events' source under MV_KAFKA_CE_MODE=knative (/apis/v1/namespaces/<NAMESPACE>/kafkasources/<name>#<topic>); default MV_NAME"`
	Namespace      string        `envconfig:"NAMESPACE" desc:"the KafkaSource's namespace in the events' source under MV_KAFKA_CE_MODE=knative"`
	kafkaconn.Auth `envconfig:"MV_KAFKA"`
	// Name is MV_NAME (set from runner.Env, not from the environment).
	Name string `ignored:"true"`
	// MessageIDs is how the runner forms message IDs (set from
	// runner.Env, not from the environment).
	MessageIDs runner.MessageIDs `ignored:"true"`
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if strings.TrimSpace(c.Brokers) == "" {
		return &runner.ConfigError{Var: "MV_KAFKA_BROKERS", Value: c.Brokers, Reason: "is required for MV_SOURCE=kafka, e.g. kafka:9092"}
	}
	if _, err := kafkaconn.Brokers("MV_KAFKA_BROKERS", c.Brokers); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, t := range c.topics() {
		switch {
		case !kafkaconn.ValidTopic(t):
			return &runner.ConfigError{Var: "MV_KAFKA_TOPIC", Value: c.Topic, Reason: fmt.Sprintf("%q: must name a topic, 1 to 249 of a-z A-Z 0-9 . _ - (several: comma-separated)", t)}
		case seen[t]:
			return &runner.ConfigError{Var: "MV_KAFKA_TOPIC", Value: c.Topic, Reason: fmt.Sprintf("names %q twice", t)}
		}
		seen[t] = true
	}
	switch {
	case strings.TrimSpace(c.Group) == "" || len(c.Group) > 255:
		return &runner.ConfigError{Var: "MV_KAFKA_GROUP", Value: c.Group, Reason: "must name the consumer group (Numaflow's consumerGroup), 1 to 255 bytes"}
	case c.StartOffset != "earliest" && c.StartOffset != "latest":
		return &runner.ConfigError{Var: "MV_KAFKA_START_OFFSET", Value: c.StartOffset, Reason: "must be earliest or latest"}
	case c.Isolation != "read_committed" && c.Isolation != "read_uncommitted":
		return &runner.ConfigError{Var: "MV_KAFKA_ISOLATION_LEVEL", Value: c.Isolation, Reason: "must be read_committed or read_uncommitted"}
	case c.CommitInterval <= 0:
		return &runner.ConfigError{Var: "MV_KAFKA_COMMIT_INTERVAL", Value: c.CommitInterval.String(), Reason: "must be a positive duration such as 1s"}
	case c.RevokeTimeout < 0:
		return &runner.ConfigError{Var: "MV_KAFKA_REVOKE_TIMEOUT", Value: c.RevokeTimeout.String(), Reason: "must be 0 (do not wait) or a positive duration such as 10s"}
	case c.SessionTimeout < time.Second:
		return &runner.ConfigError{Var: "MV_KAFKA_SESSION_TIMEOUT", Value: c.SessionTimeout.String(), Reason: "must be at least 1s (brokers allow 6s..300s by default)"}
	case c.NackDelay < 0:
		return &runner.ConfigError{Var: "MV_KAFKA_NACK_DELAY", Value: c.NackDelay.String(), Reason: "must be 0 or a positive duration"}
	case c.MaxHeld < 1:
		return &runner.ConfigError{Var: "MV_KAFKA_MAX_HELD", Value: strconv.Itoa(c.MaxHeld), Reason: "must be a positive whole number"}
	case c.CEMode != "" && c.CEMode != ceModeNone && c.CEMode != ceModeKnative:
		return &runner.ConfigError{Var: "MV_KAFKA_CE_MODE", Value: c.CEMode, Reason: "must be none or knative"}
	case c.CEMode == ceModeKnative && strings.TrimSpace(c.Namespace) == "":
		return &runner.ConfigError{Var: "NAMESPACE", Value: c.Namespace, Reason: "is required with MV_KAFKA_CE_MODE=knative: the namespace of the KafkaSource whose events the runner's replace (its events' source names it)"}
	}
	return c.Auth.Validate()
}

// topics splits MV_KAFKA_TOPIC at commas and trims each name, as
// numaflow-core reads its Kafka source's topic.
func (c *Config) topics() []string {
	ts := strings.Split(c.Topic, ",")
	for i := range ts {
		ts[i] = strings.TrimSpace(ts[i])
	}
	return ts
}
