package jetstream_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	"github.com/monovertex/monovertex/internal/natstest"
)

// TestDeliverPoliciesStartWhereNumaflowsDo: a consumer the runner creates
// with each of Numaflow's deliver policies starts where that policy says,
// on a stream holding messages before the consumer exists.
func TestDeliverPoliciesStartWhereNumaflowsDo(t *testing.T) {
	_, js, base := serverWithStream(t, "POL")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put := func(subject, value string) {
		if _, err := js.Publish(ctx, subject, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	// Sequences 1-5: a1 a2 b1 a3 b2; then, after a pause, 6-7: a4 b3.
	for _, m := range [][2]string{{"POL.a", "a1"}, {"POL.a", "a2"}, {"POL.b", "b1"}, {"POL.a", "a3"}, {"POL.b", "b2"}} {
		put(m[0], m[1])
	}
	time.Sleep(50 * time.Millisecond)
	since := time.Now().UnixMilli()
	time.Sleep(50 * time.Millisecond)
	put("POL.a", "a4")
	put("POL.b", "b3")
	for i, c := range []struct {
		policy string
		want   []string
		check  func(jetstream.ConsumerConfig) bool
	}{
		{"all", []string{"a1", "a2", "b1", "a3", "b2", "a4", "b3"}, func(cc jetstream.ConsumerConfig) bool { return cc.DeliverPolicy == jetstream.DeliverAllPolicy }},
		{"LAST", []string{"b3"}, func(cc jetstream.ConsumerConfig) bool { return cc.DeliverPolicy == jetstream.DeliverLastPolicy }},
		{"last_per_subject", []string{"a4", "b3"}, func(cc jetstream.ConsumerConfig) bool {
			return cc.DeliverPolicy == jetstream.DeliverLastPerSubjectPolicy
		}},
		{"by_start_sequence 4", []string{"a3", "b2", "a4", "b3"}, func(cc jetstream.ConsumerConfig) bool {
			return cc.DeliverPolicy == jetstream.DeliverByStartSequencePolicy && cc.OptStartSeq == 4
		}},
		{"by_start_time " + strconv.FormatInt(since, 10), []string{"a4", "b3"}, func(cc jetstream.ConsumerConfig) bool {
			return cc.DeliverPolicy == jetstream.DeliverByStartTimePolicy && cc.OptStartTime != nil && cc.OptStartTime.UnixMilli() == since
		}},
	} {
		t.Run(c.policy, func(t *testing.T) {
			cfg := base
			cfg.Consumer = fmt.Sprintf("policy-%d", i)
			cfg.DeliverPolicy = c.policy
			if c.policy == "last_per_subject" {
				cfg.FilterSubject = "POL.>" // the server wants one with this policy
			}
			src := newSource(t, cfg)
			got := adaptertest.ReadN(t, ctx, src, len(c.want), false)
			if err := src.Ack(ctx, got); err != nil {
				t.Fatal(err)
			}
			for k, m := range got {
				if string(m.Value) != c.want[k] {
					t.Fatalf("read %q at %d, want %v", m.Value, k, c.want)
				}
			}
			if more, _ := src.Read(ctx, 10, 300*time.Millisecond); len(more) != 0 {
				t.Fatalf("read %d more than %v", len(more), c.want)
			}
			if cc := natstest.ConsumerInfo(t, js, "POL", cfg.Consumer).Config; !c.check(cc) {
				t.Fatalf("consumer created with %+v", cc)
			}
		})
	}
}
