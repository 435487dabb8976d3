package kafka

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/runner"
)

// TestKnativeCEModeMakesKafkaSourceEvents: under MV_KAFKA_CE_MODE=knative
// the events the CloudEvents sink makes of the records are those a Knative
// KafkaSource named orders-source in namespace shop delivers (attribute
// for attribute, as eventing-kafka-broker's InvalidCloudEventInterceptor
// builds them), and a record that is already a CloudEvent in Kafka's
// binary mode is that event.
func TestKnativeCEModeMakesKafkaSourceEvents(t *testing.T) {
	c := kafkatest.Start(t, 1, nil)
	createTopic(t, c.Client(), "orders", 2)
	cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	at := time.UnixMilli(1_765_000_000_123).UTC()
	records := []*kgo.Record{
		{Topic: "orders", Partition: 0, Key: []byte("user-1"), Value: []byte(`{"a":1}`), Timestamp: at, Headers: []kgo.RecordHeader{
			{Key: "Content-Type", Value: []byte("Application/JSON")},
			{Key: "X-Trace_Id", Value: []byte("abc")},
			{Key: "my-very-long-header-name", Value: []byte("v")},
		}},
		{Topic: "orders", Partition: 0, Value: []byte(`{"b":2}`), Timestamp: at, Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")},
			{Key: "ce_id", Value: []byte("evt-9")},
			{Key: "ce_type", Value: []byte("com.example.order")},
			{Key: "ce_source", Value: []byte("/shop/orders")},
			{Key: "ce_time", Value: []byte("2026-12-01T10:00:00Z")},
			{Key: "ce_myext", Value: []byte("x")},
			{Key: "content-type", Value: []byte("application/json")},
		}},
		{Topic: "orders", Partition: 1, Value: []byte("plain"), Timestamp: at},
	}
	for _, r := range records {
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(c.Brokers(), "orders")
	cfg.CEMode, cfg.Namespace, cfg.CESourceName, cfg.Name = "knative", "shop", "orders-source", "runner"
	if err := cfg.Validate(runner.RoleSource); err != nil {
		t.Fatal(err)
	}
	s := newSource(t, cfg)
	msgs := readAll(t, s, 3)
	mapper, err := cewire.New(cewire.Config{}, "runner", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]event.Event{}
	for _, m := range msgs {
		ev, err := mapper.ToEvent(m)
		if err != nil {
			t.Fatal(err)
		}
		got[ev.ID()] = ev
	}
	type want struct {
		typ, source, subject, contentType string
		time                              time.Time
		ext                               map[string]string
	}
	const src = "/apis/v1/namespaces/shop/kafkasources/orders-source#orders"
	for id, w := range map[string]want{
		"partition:0/offset:0": {knativeEventType, src, "partition:0#0", "application/json", at, map[string]string{
			"key": "user-1", "partitionkey": "user-1", "kafkaheaderxtraceid": "abc", "kafkaheadermyverylongheadername": "v"}},
		"evt-9":                {"com.example.order", "/shop/orders", "", "application/json", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), map[string]string{"myext": "x"}},
		"partition:1/offset:0": {knativeEventType, src, "partition:1#0", "", at, map[string]string{}},
	} {
		ev, ok := got[id]
		if !ok {
			t.Fatalf("no event %s among %v", id, keys(got))
		}
		if ev.Type() != w.typ || ev.Source() != w.source || ev.Subject() != w.subject || ev.DataContentType() != w.contentType || !ev.Time().Equal(w.time) {
			t.Errorf("%s: type %q source %q subject %q datacontenttype %q time %v; want %q %q %q %q %v", id, ev.Type(), ev.Source(), ev.Subject(), ev.DataContentType(), ev.Time(), w.typ, w.source, w.subject, w.contentType, w.time)
		}
		ext := map[string]string{}
		for k, v := range ev.Extensions() {
			ext[k], _ = types.Format(v)
		}
		if len(ext) != len(w.ext) {
			t.Errorf("%s: extensions %v, want %v", id, ext, w.ext)
		}
		for k, v := range w.ext {
			if ext[k] != v {
				t.Errorf("%s: extension %s = %q, want %q", id, k, ext[k], v)
			}
		}
	}
	if err := s.Ack(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
}

func keys(m map[string]event.Event) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestKnativeCEModeSettings(t *testing.T) {
	cfg := testConfig("127.0.0.1:9092", "orders")
	cfg.CEMode = "knative"
	if err := cfg.Validate(runner.RoleSource); err == nil || !strings.Contains(err.Error(), "NAMESPACE") {
		t.Errorf("knative mode without NAMESPACE: %v", err)
	}
	cfg.CEMode = "kafkasource"
	if err := cfg.Validate(runner.RoleSource); err == nil || !strings.Contains(err.Error(), "MV_KAFKA_CE_MODE") {
		t.Errorf("unknown mode: %v", err)
	}
	if got := KnativeHeaderExtension("X-B3_TraceId.v2"); got != "kafkaheaderxb3traceidv2" {
		t.Errorf("header extension %q", got)
	}
}
