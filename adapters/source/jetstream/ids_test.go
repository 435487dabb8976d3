package jetstream_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	"github.com/monovertex/monovertex/runner"
)

// Under MV_MESSAGE_IDS=numaflow a message's ID is numaflow-core's offset
// string, "<stream sequence>-<replica>", the same on redelivery; acks and
// nacks after the engine renamed the messages still reach the server.
func TestNumaflowIDsAreSequenceAndReplica(t *testing.T) {
	for _, ack := range []string{"sync", "async"} {
		t.Run(ack, func(t *testing.T) {
			_, js, cfg := serverWithStream(t, "NID")
			cfg.MessageIDs, cfg.Replica = runner.NumaflowIDs, 2
			cfg.AckSync = ack == "sync"
			cfg.AckWait = 30 * time.Second
			src := newSource(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			publish(t, js, "NID.in", 3, "n")
			got := adaptertest.ReadN(t, ctx, src, 3, false)
			if ids := idsOf(got); !slices.Equal(ids, []string{"1-2", "2-2", "3-2"}) {
				t.Fatalf("IDs %v, want [1-2 2-2 3-2]", ids)
			}
			for _, m := range got {
				m.ID = "mv-" + m.ID + "-0" // what runner.Engine does after Read
			}
			if err := src.Nack(ctx, got[1:2], runner.Nack{}); err != nil {
				t.Fatal(err)
			}
			if err := src.Ack(ctx, []*runner.Message{got[0], got[2]}); err != nil {
				t.Fatal(err)
			}
			again := adaptertest.ReadN(t, ctx, src, 1, false)
			if ids := idsOf(again); !slices.Equal(ids, []string{"2-2"}) {
				t.Fatalf("redelivered %v, want [2-2]", ids)
			}
			again[0].ID = "mv-" + again[0].ID + "-0"
			if err := src.Ack(ctx, again); err != nil {
				t.Fatal(err)
			}
			waitPending(t, src, 0)
		})
	}
}

func idsOf(msgs []*runner.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
