package generator_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/source/generator"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func TestConformance(t *testing.T) {
	conformance.RunSource(t, conformance.SourceCase{
		// Fast enough that every check's reads fill within their waits.
		New: func(*testing.T) runner.Source {
			return generator.New(generator.Config{RPU: 1000, Duration: 100 * time.Millisecond, MsgSize: 32}, 0)
		},
		Features: conformance.SourceFeatures{
			// It keeps nothing, so nothing is nacked, redelivered or pending;
			// it has no peer to lose.
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true},
			Generates: true,
		},
	})
}

// Messages are numbered per replica from 0: "<replica>-<n>" by default,
// and under MV_MESSAGE_IDS=numaflow "<n>-<replica>", numaflow-core's
// IntOffset(id, replica) with the number standing in for its clock.
func TestIDsNumberTheMessagesInTheFormOfTheMode(t *testing.T) {
	for _, tc := range []struct {
		ids  runner.MessageIDs
		blob string
		want []string
	}{
		{runner.SourceIDs, "", []string{"3-0", "3-1", "3-2", "3-3"}},
		{runner.NumaflowIDs, "", []string{"0-3", "1-3", "2-3", "3-3"}},
		{runner.NumaflowIDs, "aGk=", []string{"0-3", "1-3", "2-3", "3-3"}},
	} {
		t.Run(string(tc.ids)+" blob "+tc.blob, func(t *testing.T) {
			s := generator.New(generator.Config{RPU: 4, Duration: 100 * time.Millisecond, MsgSize: 8, ValueBlob: tc.blob, Total: 4, MessageIDs: tc.ids}, 3)
			var got []string
			for len(got) < len(tc.want) {
				msgs, err := s.Read(context.Background(), 10, time.Second)
				if err != nil {
					t.Fatalf("read after %v: %v", got, err)
				}
				for _, m := range msgs {
					got = append(got, m.ID)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("IDs %v, want %v", got, tc.want)
			}
		})
	}
}
