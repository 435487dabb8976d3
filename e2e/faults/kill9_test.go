package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestRunnerKilledTenTimesLosesNothing moves 100k+ messages from one
// JetStream stream to another while a publisher keeps adding to the input,
// and kills the runner with SIGKILL at a random moment after each start,
// ten times, starting it again each time. Whatever a killed runner held is
// redelivered after the ack wait; the output stream de-duplicates on
// Nats-Msg-Id, so it must end with every input message exactly once. The
// duplicates the kills caused are counted twice over: as redeliveries (the
// consumer's delivery sequence beyond one per message) and as publishes
// beyond one per message (seen by a plain subscriber on the output subject).
func TestRunnerKilledTenTimesLosesNothing(t *testing.T) {
	n := pick(100_000, 500_000)
	kills := pick(10, 30)
	if v, err := strconv.Atoi(os.Getenv("MV_FAULTS_KILL_MESSAGES")); err == nil && v > 0 {
		n = v
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d: %d messages, %d kills", seed, n, kills)

	f := newJS(t)
	testutil.BuildRunner(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A backlog first, then the rest spread over about the time the kills
	// take, so every kill hits a runner with work in flight.
	backlog := n / 10
	f.publish(ctx, 0, backlog, 1000, 64, 0)
	batches := (n - backlog) / 500
	tick := time.Duration(int64(time.Duration(kills)*2500*time.Millisecond) / int64(max(batches, 1)))
	published := make(chan error, 1)
	go func() { published <- f.publish(ctx, backlog, n, 500, 64, tick) }()

	env := f.env()
	var recoveries []time.Duration
	var inFlightAtKill []int64
	var killedAt time.Time
	var outAtKill uint64
	start := time.Now()
	for k := 0; k <= kills; k++ {
		p := testutil.StartRunner(t, env)
		p.WaitReady(60 * time.Second)
		if k > 0 {
			// Recovered once the output grows past where the kill left it.
			testutil.WaitFor(t, 60*time.Second, "the output to grow after the restart", func() bool {
				return f.streamMsgs(outStream) > outAtKill
			})
			recoveries = append(recoveries, time.Since(killedAt))
		}
		noRaces(t, p)
		if k == kills {
			if err := <-published; err != nil {
				t.Fatal(err)
			}
			f.waitSettled(n, 180*time.Second)
			if code, took := sigterm(t, p, 30*time.Second); code != 0 {
				t.Fatalf("last runner exited %d after SIGTERM (%v), want 0:\n%s", code, took, tail(p.Stderr.String(), 4000))
			}
			noRaces(t, p)
			break
		}
		time.Sleep(time.Duration(300+rng.IntN(1700)) * time.Millisecond)
		read, acked, _ := totals(p)
		p.Kill()
		killedAt = time.Now()
		outAtKill = f.streamMsgs(outStream)
		inFlightAtKill = append(inFlightAtKill, read-acked)
		t.Logf("kill %d at %v: %d messages in the output, about %d read and unacked", k+1, time.Since(start).Round(time.Millisecond), outAtKill, read-acked)
	}
	tl := f.count(n, true)
	tl.mustBeComplete(t)
	redelivered := f.redeliveries(n)
	var worst, sum time.Duration
	for _, r := range recoveries {
		worst = max(worst, r)
		sum += r
	}
	t.Logf("recovery (kill to output growing again, runner start included): mean %v, worst %v; in flight at each kill: %v",
		round(sum/time.Duration(len(recoveries))), round(worst), inFlightAtKill)
	if tl.duplicatePublish < 0 || tl.publishes < n {
		t.Fatalf("the subscriber saw %d publishes for %d messages: it missed some, the duplicate count would be wrong", tl.publishes, n)
	}
	report(t, result{
		Scenario:   fmt.Sprintf("runner kill -9 x%d, JetStream -> JetStream", kills),
		Messages:   n,
		Lost:       tl.lost,
		Duplicated: fmt.Sprintf("0 stored; %d redelivered, %d published twice", redelivered, tl.duplicatePublish),
		Recovery:   fmt.Sprintf("mean %s, worst %s", round(sum/time.Duration(len(recoveries))), round(worst)),
		Notes:      "kill to output growing again, restart included; ack wait 3s",
	})
}
