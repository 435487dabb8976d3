package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	jssource "github.com/monovertex/monovertex/adapters/source/jetstream"
	"github.com/monovertex/monovertex/runner"
)

// TestAckSyncHasEveryAckTakenOnReturn: with MV_JETSTREAM_ACK_SYNC, Ack
// returns only once the consumer took every ack of the batch, whether the
// server confirms the last ack alone (the connection stayed up) or each
// one (after a reconnect): the consumer then has nothing pending and its
// ack floor is the last message, read straight after the call.
func TestAckSyncHasEveryAckTakenOnReturn(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  func(*jssource.Source, context.Context, []*runner.Message) error
	}{
		{"last confirmed", (*jssource.Source).Ack},
		{"each confirmed", jssource.AckEach},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, js, cfg := serverWithStream(t, "ACKS")
			const n = 500
			publish(t, js, "ACKS.in", n, "v")
			src := newSource(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			msgs := adaptertest.ReadN(t, ctx, src, n, false)
			if len(msgs) != n {
				t.Fatalf("read %d messages, want %d", len(msgs), n)
			}
			if err := tc.ack(src, ctx, msgs); err != nil {
				t.Fatalf("ack: %v", err)
			}
			cons, err := js.Consumer(ctx, "ACKS", cfg.Consumer)
			if err != nil {
				t.Fatal(err)
			}
			info, err := cons.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending != 0 || info.AckFloor.Stream != n {
				t.Fatalf("after Ack returned: %d acks pending, ack floor %d; want 0 and %d", info.NumAckPending, info.AckFloor.Stream, n)
			}
		})
	}
}
