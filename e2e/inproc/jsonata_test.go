package inproc_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/monovertex/monovertex/runner"
)

// reshape is the EventTransform-style expression of the JSONata tests:
// every 7th order dropped, every 4th split in two parts (fan-out), the
// others reshaped with attributes and data of their own.
const reshape = `data.n % 7 = 0 ? undefined :
data.n % 4 = 0 ? $map([1, 2], function($k) {
  {"specversion": "1.0", "id": id, "type": "order.part", "source": source, "part": $k,
   "data": {"n": data.n, "part": $k}}
}) :
{
  "specversion": "1.0",
  "id": id,
  "type": "order.seen",
  "source": "/jsonata",
  "region": region,
  "data": {"n": data.n, "double": data.n * 2, "kind": type}
}
`

// TestJSONataOn100000Messages: the expression, read from a mounted file,
// reshapes 100,000 events into exactly the outputs it describes: drops
// (undefined), fan-out (an array: two outputs named -0 and -1), attributes
// and data rebuilt, a missing region left out; data that is not the JSON
// its content type claims fails permanently and MV_ON_FAILURE=drop drops
// it after one try. A filter placed after the transformer sees the
// reshaped events and drops the us ones, and those left without a region
// (a missing attribute fails a CESQL expression, as at a Knative Trigger).
func TestJSONataOn100000Messages(t *testing.T) {
	const n = 100_000
	exprFile := filepath.Join(t.TempDir(), "jsonata-expression")
	if err := os.WriteFile(exprFile, []byte(reshape), 0o644); err != nil {
		t.Fatal(err)
	}
	events := make([]event, n)
	want := map[string]written{}
	malformed, dropped, filtered := 0, 0, 0
	for i := range events {
		ev := orderEvent(i)
		if i%97 == 0 {
			ev.Data, ev.DataBase64 = nil, base64.StdEncoding.EncodeToString([]byte(`{"n":`))
			malformed++
			events[i] = ev
			continue
		}
		events[i] = ev
		switch {
		case i%7 == 0:
			dropped++
		case i%4 == 0:
			for k := 1; k <= 2; k++ {
				id := fmt.Sprintf("%s-%d", ev.ID, k-1)
				want[id] = written{ID: id, Payload: fmt.Sprintf(`{"n":%d,"part":%d}`, i, k), Headers: map[string]string{
					"ce-type": "order.part", "ce-source": "/shop", "content-type": "application/json", "part": strconv.Itoa(k)}}
			}
		case ev.Region != "eu":
			// us, and also none: the expression leaves region out, and
			// CESQL, as at a Knative Trigger, fails on a missing attribute.
			filtered++
		default:
			h := map[string]string{"ce-type": "order.seen", "ce-source": "/jsonata", "content-type": "application/json", "region": "eu"}
			want[ev.ID] = written{ID: ev.ID, Payload: fmt.Sprintf(`{"double":%d,"kind":%q,"n":%d}`, 2*i, ev.Type, i), Headers: h}
		}
	}
	throughLogSink(t, map[string]string{
		"MV_TRANSFORMER": "jsonata", "MV_JSONATA_EXPRESSION_FILE": exprFile, "MV_ON_FAILURE": "drop",
		"MV_FILTER": "NOT (type = 'order.seen' AND region = 'us')", "MV_FILTER_POSITION": "after",
	}, events, want, func(tot runner.Totals) error {
		if tot.TransformerDropped != int64(dropped+malformed) || tot.TransformerErrors != int64(malformed) || tot.FilterDropped != int64(filtered) || tot.Written != int64(len(want)) {
			return fmt.Errorf("transformer dropped %d with %d errors, filter dropped %d, written %d; want %d, %d, %d, %d",
				tot.TransformerDropped, tot.TransformerErrors, tot.FilterDropped, tot.Written, dropped+malformed, malformed, filtered, len(want))
		}
		return nil
	})
	t.Logf("%d messages: %d outputs written, %d dropped by the expression, %d malformed dropped after one try, %d dropped by the filter after it; all acked",
		n, len(want), dropped, malformed, filtered)
}
