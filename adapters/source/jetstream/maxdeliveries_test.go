package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	"github.com/monovertex/monovertex/runner"
)

// TestMaxDeliveriesStopsRedelivery: a message nacked every time with
// max_deliveries 3 is delivered exactly three times, then terminated; a
// message nacked without it comes back past three.
func TestMaxDeliveriesStopsRedelivery(t *testing.T) {
	_, js, cfg := serverWithStream(t, "MD")
	cfg.AckWait = 30 * time.Second
	src := newSource(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	publish(t, js, "MD.in", 2, "n")
	deliveries := map[string]int{}
	limited := runner.Nack{Reason: "sink refused", MaxDeliveries: 3}
	for round := 0; round < 5; round++ {
		want := 2
		if round >= 3 {
			want = 1 // the limited one is terminated after its third delivery
		}
		got := adaptertest.ReadN(t, ctx, src, want, false)
		for _, m := range got {
			deliveries[string(m.Value)]++
			n := runner.Nack{}
			if string(m.Value) == "n-0" {
				n = limited
			}
			if err := src.Nack(ctx, []*runner.Message{m}, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Nothing more of n-0: read briefly and expect only n-1.
	extra, _ := src.Read(ctx, 10, time.Second)
	for _, m := range extra {
		deliveries[string(m.Value)]++
	}
	if deliveries["n-0"] != 3 {
		t.Errorf("the message nacked with max_deliveries 3 was delivered %d times; want 3", deliveries["n-0"])
	}
	if deliveries["n-1"] < 5 {
		t.Errorf("the message nacked without max_deliveries was delivered %d times; want at least 5 (no limit)", deliveries["n-1"])
	}
}
