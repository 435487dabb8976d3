package kafka

import (
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

// The CloudEvents modes of MV_KAFKA_CE_MODE.
const (
	ceModeNone    = "none"
	ceModeKnative = "knative"
)

// knativeEventType is the type Knative's KafkaSource gives a record that
// is no CloudEvent (InvalidCloudEventInterceptor.TYPE in
// knative-extensions/eventing-kafka-broker's data plane).
const knativeEventType = "dev.knative.kafka.event"

// knativeEvents turns records into the messages whose CloudEvents are
// those a Knative KafkaSource named name in namespace delivers, so
// Triggers that filter on them keep working after a migration. It follows
// eventing-kafka-broker's data plane
// (data-plane/dispatcher/.../consumer/InvalidCloudEventInterceptor.java):
// a record that is not a CloudEvent becomes
//
//	id       partition:<p>/offset:<o>
//	type     dev.knative.kafka.event
//	source   /apis/v1/namespaces/<ns>/kafkasources/<name>#<topic>
//	subject  partition:<p>#<o>
//	time     the record's timestamp
//	key, partitionkey  the key as a string (KeyDeserializer's default)
//	kafkaheader<name>  each header but content-type, its name lower-cased
//	                   with all but a-z and 0-9 dropped; content-type
//	                   becomes datacontenttype, lower-cased
//
// and a record in CloudEvents' Kafka binary mode (a ce_specversion
// header) is that event, as the data plane's CloudEventDeserializer
// reads it: ce_<attribute> headers are its attributes and extensions,
// content-type its datacontenttype.
type knativeEvents struct {
	namespace, name string
}

// message fills m, made from r, as the KafkaSource's event.
func (k *knativeEvents) message(m *runner.Message, r *kgo.Record) {
	clear(m.Headers)
	p, o := strconv.FormatInt(int64(r.Partition), 10), strconv.FormatInt(r.Offset, 10)
	if k.binaryEvent(m, r) {
		return
	}
	m.ID = "partition:" + p + "/offset:" + o
	m.Headers["ce-type"] = knativeEventType
	m.Headers["ce-source"] = "/apis/v1/namespaces/" + k.namespace + "/kafkasources/" + k.name + "#" + r.Topic
	m.Headers["ce-subject"] = "partition:" + p + "#" + o
	if len(r.Key) > 0 {
		m.Keys = []string{string(r.Key)}
		m.Headers["key"] = string(r.Key)
	} else {
		m.Keys = nil
	}
	for _, h := range r.Headers {
		if strings.EqualFold(h.Key, "content-type") {
			m.Headers["content-type"] = strings.ToLower(string(h.Value))
			continue
		}
		m.Headers[KnativeHeaderExtension(h.Key)] = string(h.Value)
	}
}

// KnativeHeaderExtension is the extension a KafkaSource puts a record
// header in: "kafkaheader" and the header's name lower-cased, with every
// character but a-z and 0-9 dropped (replaceBadChars).
func KnativeHeaderExtension(header string) string {
	var b strings.Builder
	b.WriteString(cewire.KnativeKafkaHeaderPrefix)
	for _, c := range strings.ToLower(header) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// binaryEvent fills m from a record in CloudEvents' Kafka binary mode and
// reports whether r is one.
func (k *knativeEvents) binaryEvent(m *runner.Message, r *kgo.Record) bool {
	isEvent := false
	for _, h := range r.Headers {
		if h.Key == "ce_specversion" {
			isEvent = true
		}
	}
	if !isEvent {
		return false
	}
	m.Keys = nil
	for _, h := range r.Headers {
		name, ok := strings.CutPrefix(h.Key, "ce_")
		v := string(h.Value)
		switch {
		case h.Key == "content-type":
			m.Headers["content-type"] = v
		case !ok:
			// Other headers are not part of the event.
		case name == "id":
			m.ID = v
		case name == "time":
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				m.EventTime = t
			}
		case name == "type" || name == "source" || name == "subject" || name == "dataschema":
			m.Headers["ce-"+name] = v
		case name == "partitionkey":
			m.Keys = []string{v}
		case name != "specversion":
			m.Headers[name] = v
		}
	}
	return true
}
