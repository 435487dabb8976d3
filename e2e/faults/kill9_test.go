package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
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
	f.Publish(ctx, 0, backlog, 1000, 64, 0)
	batches := (n - backlog) / 500
	tick := time.Duration(int64(time.Duration(kills)*2500*time.Millisecond) / int64(max(batches, 1)))
	published := make(chan error, 1)
	var publishedAll atomic.Bool
	go func() {
		err := f.Publish(ctx, backlog, n, 500, 64, tick)
		publishedAll.Store(true)
		published <- err
	}()

	env := f.Env("faults")
	var recoveries []time.Duration
	var inFlightAtKill []int64
	var killedAt time.Time
	var outAtKill uint64
	start := time.Now()
	for k := 0; k <= kills; k++ {
		p := startRunner(t, env)
		if k > 0 && outAtKill < uint64(n) {
			// Recovered once the output grows past where the kill left it
			// (on a slow machine the kills can outlast the publisher, and
			// then there may be nothing left to move).
			testutil.WaitFor(t, 60*time.Second, "the output to grow after the restart", func() bool {
				out := f.StreamMsgs(outStream)
				return out > outAtKill || (publishedAll.Load() && out >= uint64(n))
			})
			if f.StreamMsgs(outStream) > outAtKill {
				recoveries = append(recoveries, time.Since(killedAt))
			}
		}
		noRaces(t, p)
		if k == kills {
			if err := <-published; err != nil {
				t.Fatal(err)
			}
			f.WaitSettled(n, 180*time.Second)
			if code, took := sigterm(t, p, 30*time.Second); code != 0 {
				t.Fatalf("last runner exited %d after SIGTERM (%v), want 0:\n%s", code, took, testutil.Tail(p.Stderr.String(), 4000))
			}
			noRaces(t, p)
			break
		}
		time.Sleep(time.Duration(300+rng.IntN(1700)) * time.Millisecond)
		read, acked, _ := totals(p)
		p.Kill()
		killedAt = time.Now()
		outAtKill = f.StreamMsgs(outStream)
		inFlightAtKill = append(inFlightAtKill, read-acked)
		t.Logf("kill %d at %v: %d messages in the output, about %d read and unacked", k+1, time.Since(start).Round(time.Millisecond), outAtKill, read-acked)
	}
	tl := f.Count(n, true)
	tl.MustBeComplete(t)
	redelivered := f.Redeliveries(n)
	var worst, sum time.Duration
	for _, r := range recoveries {
		worst = max(worst, r)
		sum += r
	}
	if len(recoveries) == 0 {
		t.Fatalf("no kill found work in flight: the test proves nothing")
	}
	t.Logf("recovery (kill to output growing again, runner start included): mean %v, worst %v; in flight at each kill: %v",
		round(sum/time.Duration(len(recoveries))), round(worst), inFlightAtKill)
	if tl.DuplicatePublish < 0 || tl.Publishes < n {
		t.Fatalf("the subscriber saw %d publishes for %d messages: it missed some, the duplicate count would be wrong", tl.Publishes, n)
	}
	report(t, result{
		Scenario:   fmt.Sprintf("runner kill -9 x%d, JetStream -> JetStream", kills),
		Messages:   n,
		Lost:       tl.Lost,
		Duplicated: fmt.Sprintf("0 stored; %d redelivered, %d published twice", redelivered, tl.DuplicatePublish),
		Recovery:   fmt.Sprintf("mean %s, worst %s", round(sum/time.Duration(len(recoveries))), round(worst)),
		Notes:      "kill to output growing again, restart included; ack wait 3s",
	})
}

// TestSigtermDuringJetStreamOutage stops the runner while the nats-server
// is down (e2e/jetstream covers the server restart under a running runner
// and SIGTERM with the server up): the runner must exit within
// MV_SHUTDOWN_TIMEOUT, and once the server and a new runner are back the
// output holds every input message exactly once.
func TestSigtermDuringJetStreamOutage(t *testing.T) {
	n := pick(20_000, 100_000)
	f := newJS(t)
	f.PublishAll(n/2, 64)
	env := f.Env("faults")
	env["MV_SHUTDOWN_TIMEOUT"] = "3s"
	p := startRunner(t, env)
	testutil.WaitFor(t, 60*time.Second, "a fifth written", func() bool { return f.StreamMsgs(outStream) >= uint64(n/5) })
	f.Srv.Shutdown()
	time.Sleep(500 * time.Millisecond)
	code, took := sigterm(t, p, 30*time.Second)
	read, acked := lastTotals(t, p)
	t.Logf("SIGTERM with the server down: exit %d after %v; read %d acked %d", code, took.Round(time.Millisecond), read, acked)
	exitNote := checkShutdown(t, code, took, 3*time.Second, "nats-server down")
	f.Srv.Restart(t)
	if err := f.Publish(context.Background(), n/2, n, 1000, 64, 0); err != nil {
		t.Fatal(err)
	}
	tl, recovered := f.restartAndCount(t, env, n, p)
	report(t, result{
		Scenario: "SIGTERM while the nats-server is down, then server and runner restart", Messages: n, Lost: tl.Lost,
		Duplicated: fmt.Sprintf("0 stored; %d published twice", tl.DuplicatePublish), Recovery: round(recovered),
		Notes: exitNote + "; restart to all written",
	})
}
