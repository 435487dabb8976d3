package contract_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// TestASourceThatRedeliversInFlightIsDropped: example-udsource as a
// queue with a visibility timeout shorter than the time a batch takes
// (EXAMPLE_REDELIVER_AFTER=1ms): every read hands out again the ids read
// before and not yet acked, as a Numaflow user's source may. numaflow-core
// drops a delivery of an offset in flight, and so does the runner: the
// real numaflow-go sink (EXAMPLE_LOCK: one handler call at a time) is not
// given those. A delivery the source made before it took the ack of the
// same id, which reaches the runner after that ack, is a new delivery
// there as in Numaflow, and is written again (at least once allows it).
// So the three processes' counts must agree: the sink's lines are the
// ids plus the source's redeliveries less the runner's drops, every id is
// written and acked, and the drops are more than none.
func TestASourceThatRedeliversInFlightIsDropped(t *testing.T) {
	// Enough for thousands of redeliveries; more only adds CPU beside the
	// other packages' tests (e2e/faults measures memory under load).
	const total = 5_000
	x := testutil.NewExamples(t, "mvrd")
	for _, pkg := range []string{"./cmd/runner", "./cmd/example-udsource", "./cmd/example-udsink"} {
		testutil.Build(t, pkg)
	}
	x.StartSource(total, map[string]string{
		"EXAMPLE_REDELIVER_AFTER": "1ms", "EXAMPLE_REDELIVERED_FILE": x.File("redelivered"), "EXAMPLE_STRICT_READS": "true",
	})
	x.StartSink("example-udsink", "out", map[string]string{"EXAMPLE_LOCK": "true", "EXAMPLE_FALLBACK_EVERY": "0"})
	r := x.StartRunner(x.RunnerEnv(map[string]string{"MV_NAME": "redeliver", "MV_READ_BATCH_SIZE": "200", "MV_MESSAGE_IDS": "numaflow"}))
	testutil.WaitFor(t, 120*time.Second, "every id acked", func() bool {
		x.RunnerAlive()
		return len(x.ReadAcked("acked")) == total
	})
	// A delivery made before the source took an ack may still be on its
	// way through: wait until everything read is settled.
	var st runner.Status
	testutil.WaitFor(t, 30*time.Second, "everything read written or dropped", func() bool {
		x.RunnerAlive()
		var err error
		st, err = r.Status()
		return err == nil && st.Totals.Read == st.Totals.Written+st.Totals.DuplicateDropped && st.Totals.Acked == st.Totals.Written
	})
	x.StopRunner()
	b, err := os.ReadFile(x.File("redelivered"))
	if err != nil {
		t.Fatalf("the source never handed out an id in flight again (%v): the test tests nothing", err)
	}
	again, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	written, lines := map[string]int{}, 0
	for _, l := range x.ReadSinkLines("out") {
		written[l.ID]++
		lines++
	}
	missing := 0
	for n := range total {
		if written["redeliver-"+testutil.ExampleSourceID(n)+"-0"] == 0 {
			missing++
		}
	}
	tot := st.Totals
	t.Logf("the source handed out %d ids again; runner: read %d, dropped as in flight %d, written %d, acked %d; sink: %d lines, %d ids, %d missing",
		again, tot.Read, tot.DuplicateDropped, tot.Written, tot.Acked, lines, len(written), missing)
	if missing != 0 || len(written) != total || int64(len(x.ReadAcked("acked"))) != total {
		t.Fatalf("the sink has %d of %d ids (%d missing), the source %d acked", len(written), total, missing, len(x.ReadAcked("acked")))
	}
	if tot.DuplicateDropped == 0 || int64(again) < tot.DuplicateDropped {
		t.Fatalf("the runner dropped %d deliveries in flight of the source's %d redeliveries: want some, and no more", tot.DuplicateDropped, again)
	}
	if tot.Read != int64(total+again) || tot.Read != tot.Written+tot.DuplicateDropped || int64(lines) != tot.Written {
		t.Fatalf("runner read %d, written %d, dropped %d, sink lines %d: want read = %d ids + %d redeliveries = written + dropped, lines = written",
			tot.Read, tot.Written, tot.DuplicateDropped, lines, total, again)
	}
}
