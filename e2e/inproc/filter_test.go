package inproc_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/monovertex/monovertex/runner"
)

// orderEvent is event i of the tests' input: type order.created,
// order.deleted or user.created by i%3, region us for i%5 == 0, none for
// i%11 == 0, else eu, and data {"n":i}.
func orderEvent(i int) event {
	ev := event{SpecVersion: "1.0", ID: fmt.Sprintf("e-%d", i), Source: "/shop", Type: []string{"order.created", "order.deleted", "user.created"}[i%3],
		DataContentType: "application/json", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	switch {
	case i%11 == 0:
	case i%5 == 0:
		ev.Region = "us"
	default:
		ev.Region = "eu"
	}
	return ev
}

// TestFilterOn100000Messages: MV_FILTER (CESQL) and MV_FILTERS (a Trigger's
// filters) together let through exactly the events that match both, as
// they were, and drop and ack the rest; an event without the attribute
// the expression reads does not match, as at a Knative Trigger.
func TestFilterOn100000Messages(t *testing.T) {
	const n = 100_000
	events := make([]event, n)
	want := map[string]written{}
	for i := range events {
		events[i] = orderEvent(i)
		if i%3 != 2 && i%5 != 0 && i%11 != 0 && i%10 != 7 {
			id := events[i].ID
			want[id] = written{ID: id, Payload: string(events[i].Data), Headers: map[string]string{
				"ce-type": events[i].Type, "ce-source": "/shop", "content-type": "application/json", "region": "eu"}}
		}
	}
	throughLogSink(t, map[string]string{
		"MV_FILTER":  "type LIKE 'order.%' AND region = 'eu'",
		"MV_FILTERS": `[{"not":{"suffix":{"id":"7"}}}]`,
	}, events, want, func(tot runner.Totals) error {
		if dropped := int64(n - len(want)); tot.FilterDropped != dropped || tot.Written != int64(len(want)) {
			return fmt.Errorf("filter dropped %d, written %d; want %d and %d", tot.FilterDropped, tot.Written, dropped, len(want))
		}
		return nil
	})
	t.Logf("%d messages: %d written, %d dropped by the filter, all acked", n, len(want), n-len(want))
}
