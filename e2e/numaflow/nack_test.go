package numaflow_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestTheSinksNackReachesTheSourceWhole: a numaflow-go sink nacks with a
// reason, max_deliveries and a delay, and the numaflow-go source's NackFn
// sees each of them exactly as the sink sent them (its nack log), for
// every nacked id, before the id is redelivered and written.
func TestTheSinksNackReachesTheSourceWhole(t *testing.T) {
	const (
		total    = 500
		every    = 5 // n%5 == 4 nacked once by the sink
		delayMS  = 300
		maxDeliv = 3
	)
	x := testutil.NewExamples(t, "mvnack")
	x.StartSource(total, map[string]string{"EXAMPLE_NACK_LOG": x.File("nacks")})
	x.StartSink("example-udsink", "out", map[string]string{
		"EXAMPLE_NACK_EVERY": strconv.Itoa(every), "EXAMPLE_NACK_DELAY_MS": strconv.Itoa(delayMS),
		"EXAMPLE_NACK_MAX_DELIVERIES": strconv.Itoa(maxDeliv), "EXAMPLE_FAIL_EVERY": "0", "EXAMPLE_FALLBACK_EVERY": "0",
	})
	x.StartRunner(x.RunnerEnv(nil))
	testutil.WaitFor(t, 90*time.Second, "every id acked", func() bool {
		x.RunnerAlive()
		return len(x.ReadAcked("acked")) == total
	})
	x.StopRunner()

	b, err := os.ReadFile(x.File("nacks"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) == 3 && f[2] == "redeliver" {
			continue
		}
		if len(f) != 5 {
			t.Fatalf("nack log line %q: want id, time, delay, max deliveries, reason", l)
		}
		id, _ := strconv.Atoi(f[0])
		want := []string{strconv.Itoa(delayMS), strconv.Itoa(maxDeliv), fmt.Sprintf("example nack for %d (first attempt)", id)}
		if got := f[2:]; id%every != 4 || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("id %d nacked with delay %s, max_deliveries %s, reason %q; want only n%%%d == 4, with %v as the sink sent them", id, f[2], f[3], f[4], every, want)
		}
		seen[id]++
	}
	wantNacked := 0
	for n := range total {
		if n%every == 4 {
			wantNacked++
			if seen[n] != 1 {
				t.Errorf("id %d reached the source's NackFn %d times; want once", n, seen[n])
			}
		}
	}
	written := map[int]bool{}
	for _, l := range x.ReadSinkLines("out") {
		written[l.N] = true
	}
	if len(written) != total {
		t.Errorf("%d of %d ids written", len(written), total)
	}
	t.Logf("%d ids, %d nacked by the sink, each seen by the source's NackFn with delay %dms, max_deliveries %d and its reason; all %d written and acked", total, wantNacked, delayMS, maxDeliv, len(written))
}
