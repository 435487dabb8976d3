package generator_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
// and under MV_MESSAGE_IDS=numaflow "<t+n>-<replica>", numaflow-core's
// IntOffset(id, replica) with t the nanosecond clock at the source's
// start, as Numaflow's id is the clock: a restarted source does not give
// an ID again.
func TestIDsNumberTheMessagesInTheFormOfTheMode(t *testing.T) {
	seen := map[int64]bool{}
	for _, tc := range []struct {
		ids  runner.MessageIDs
		blob string
		want []string
	}{
		{runner.SourceIDs, "", []string{"3-0", "3-1", "3-2", "3-3"}},
		{runner.NumaflowIDs, "", []string{"0-3", "1-3", "2-3", "3-3"}},
		{runner.NumaflowIDs, "aGk=", []string{"0-3", "1-3", "2-3", "3-3"}},
		{runner.NumaflowIDs, "", nil}, // a second source, as after a restart
	} {
		t.Run(string(tc.ids)+" blob "+tc.blob, func(t *testing.T) {
			before := time.Now().UnixNano()
			s := generator.New(generator.Config{RPU: 4, Duration: 100 * time.Millisecond, MsgSize: 8, ValueBlob: tc.blob, Total: 4, MessageIDs: tc.ids}, 3)
			after := time.Now().UnixNano()
			var got []string
			for len(got) < 4 {
				msgs, err := s.Read(context.Background(), 10, time.Second)
				if err != nil {
					t.Fatalf("read after %v: %v", got, err)
				}
				for _, m := range msgs {
					got = append(got, m.ID)
				}
			}
			if tc.ids == runner.NumaflowIDs {
				// <t+n>-3 with t the clock at New: check t, then the rest.
				t0, err := strconv.ParseInt(strings.TrimSuffix(got[0], "-3"), 10, 64)
				if err != nil || t0 < before || t0 > after {
					t.Fatalf("first ID %q: want <clock at the start>-3, the clock between %d and %d", got[0], before, after)
				}
				seen[t0] = true
				for i := range got {
					got[i] = fmt.Sprintf("%d-3", mustInt(t, strings.TrimSuffix(got[i], "-3"))-t0)
				}
				tc.want = []string{"0-3", "1-3", "2-3", "3-3"}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("IDs %v, want %v", got, tc.want)
			}
		})
	}
	if len(seen) != 3 {
		t.Fatalf("the three sources under numaflow IDs started from %d distinct clocks, want 3", len(seen))
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
