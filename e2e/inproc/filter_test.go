package inproc_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
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
	p := testutil.StartRunner(t, map[string]string{
		"MV_SOURCE": "http", "MV_HTTP_BUFFER_SIZE": "4000", "MV_READ_BATCH_SIZE": "500", "MV_READ_TIMEOUT": "20ms",
		"MV_SINK": "log", "MV_LOG_FORMAT": "numaflow",
		"MV_FILTER":  "type LIKE 'order.%' AND region = 'eu'",
		"MV_FILTERS": `[{"not":{"suffix":{"id":"7"}}}]`,
	})
	p.WaitReady(60 * time.Second)
	postBatches(t, p.PortURL, events, 1000, 4)
	settle(t, p, n)
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	if dropped := int64(n - len(want)); st.Totals.FilterDropped != dropped || st.Totals.Written != int64(len(want)) {
		t.Fatalf("filter dropped %d, written %d; want %d and %d", st.Totals.FilterDropped, st.Totals.Written, dropped, len(want))
	}
	p.Stop(30 * time.Second)
	compare(t, readLog(t, p.Stdout.String()), want)
	t.Logf("%d messages: %d written, %d dropped by the filter, all acked", n, len(want), n-len(want))
}
