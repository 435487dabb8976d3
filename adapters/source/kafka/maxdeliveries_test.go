package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/runner"
)

// TestMaxDeliveriesStopsRedelivery: a record nacked every time with
// max_deliveries 3 is delivered exactly three times, then given up (its
// partition's commit passes it); one nacked without it comes back past
// three, and holds its partition's commit back.
func TestMaxDeliveriesStopsRedelivery(t *testing.T) {
	c := kafkatest.Start(t, 1, map[string]int{"md": 1})
	cl := c.Client()
	produceNumbers(t, cl, "md", 2)
	cfg := testConfig(c.Brokers(), "md")
	s := newSource(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	limited := runner.Nack{Reason: "sink refused", MaxDeliveries: 3}
	deliveries := map[string]int{}
	for round := 0; round < 5; round++ {
		want := 2
		if round >= 3 {
			want = 1 // record 0 was given up after its third delivery
		}
		for _, m := range readAll(t, s, want) {
			deliveries[string(m.Value)]++
			n := runner.Nack{}
			if string(m.Value) == "0" {
				n = limited
			}
			if err := s.Nack(ctx, []*runner.Message{m}, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	if deliveries["0"] != 3 {
		t.Errorf("the record nacked with max_deliveries 3 was delivered %d times; want 3", deliveries["0"])
	}
	if deliveries["1"] != 5 {
		t.Errorf("the record nacked without max_deliveries was delivered %d times; want 5 (no limit)", deliveries["1"])
	}
	// Record 1 is acked now: the commit passes both.
	last := readAll(t, s, 1)
	if string(last[0].Value) != "1" {
		t.Fatalf("read %q, want record 1 again", last[0].Value)
	}
	if err := s.Ack(ctx, last); err != nil {
		t.Fatal(err)
	}
	testutilWait(t, 20*time.Second, func() bool {
		return fmt.Sprint(kafkatest.Committed(t, cl, cfg.Group, "md")) == fmt.Sprint(map[int32]int64{0: 2})
	})
}
