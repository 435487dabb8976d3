// Package sqs_test runs the runner binary with MV_SOURCE=sqs, a Numaflow
// source transformer (cmd/example-udtransformer) and MV_SINK=sqs with an
// SQS fallback sink against a real goaws server (internal/sqstest), and
// checks on the server's own log of actions that every message was
// accounted for, that none was deleted from the input queue before what
// it became was sent, and that each nack with a delay changed the
// message's visibility timeout to the delay rounded up to whole seconds.
package sqs_test

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/sqstest"
	"github.com/monovertex/monovertex/internal/testutil"
)

const (
	total = 10_000
	// The transformer drops n%10 == 0, fans n%10 == 1 out to three
	// copies, and nacks n%7 == 2 the first time it sees it, with a delay
	// of nackDelayMS (visibility: 2 whole seconds).
	nackDelayMS    = 1500
	wantVisibility = "2"
)

// refused is what the server refuses per entry when the sink sends it to
// the output queue: n%50 == 13, which then goes to the fallback queue once
// the sink's retries are spent.
var refused = regexp.MustCompile(`^[0-9]*(13|63)$`)

// expected is where n ends up: how many copies in the output queue, and
// whether in the fallback queue instead.
func expected(n int) (out int, fallback bool) {
	switch {
	case n%10 == 0:
		return 0, false
	case n%10 == 1:
		return 3, false
	case refused.MatchString(strconv.Itoa(n)):
		return 0, true
	}
	return 1, false
}

func nacked(n int) bool { return n%10 != 0 && n%7 == 2 }

func TestSourceTransformerSinkWithNacksAndFallbacks(t *testing.T) {
	srv := sqstest.Start(t, sqstest.Options{Queues: []string{"in", "out", "fb"}, FailRegex: refused.String(), FailQueue: "out"})
	bodies := make([]string, total)
	for n := range bodies {
		bodies[n] = strconv.Itoa(n)
	}
	srv.Send(t, "in", bodies)

	x := testutil.NewExamples(t, "mvsqs")
	x.Start("example-udtransformer", "./cmd/example-udtransformer", map[string]string{
		"EXAMPLE_NACK_EVERY": "7", "EXAMPLE_NACK_DELAY_MS": strconv.Itoa(nackDelayMS),
	})
	env := srv.Env("in")
	for k, v := range map[string]string{
		"MV_TRANSFORMER": "udtransformer", "MV_SOURCE": "sqs",
		"MV_SINK": "sqs", "MV_SQS_SINK_QUEUE_NAME": "out", "MV_SQS_SINK_REGION": sqstest.Region, "MV_SQS_SINK_ENDPOINT_URL": srv.Endpoint,
		"MV_FALLBACK_SINK": "sqs", "MV_FALLBACK_SQS_QUEUE_NAME": "fb",
		"MV_ON_FAILURE": "fallback", "MV_RETRY_STEPS": "2", "MV_RETRY_INTERVAL": "1ms",
		"MV_READ_BATCH_SIZE": "100", "MV_READ_TIMEOUT": "1s", "MV_PENDING_INTERVAL": "200ms",
		"MV_UDF_STARTUP_TIMEOUT": "60s", "MV_SHUTDOWN_TIMEOUT": "20s",
	} {
		env[k] = v
	}
	x.StartRunner(env)

	outCount, fbCount := map[string]int{}, map[string]int{}
	wantOut, wantFb := 0, 0
	for n := range total {
		o, f := expected(n)
		wantOut += o
		if f {
			wantFb++
		}
	}
	got := func() (int, int) {
		for _, b := range srv.Drain(t, "out") {
			outCount[b]++
		}
		for _, b := range srv.Drain(t, "fb") {
			fbCount[b]++
		}
		o, f := 0, 0
		for _, c := range outCount {
			o += c
		}
		for _, c := range fbCount {
			f += c
		}
		return o, f
	}
	testutil.WaitFor(t, 5*time.Minute, "every message written and deleted from the input queue", func() bool {
		x.RunnerAlive()
		o, f := got()
		return o >= wantOut && f >= wantFb && srv.Count(t, "in") == 0
	})
	x.StopRunner()
	o, f := got()

	// Every message accounted for: where it should be, as often as it
	// should be there (more is a duplicate, allowed; fewer is a loss).
	dups := 0
	for n := range total {
		b := strconv.Itoa(n)
		wo, wf := expected(n)
		switch {
		case outCount[b] < wo:
			t.Errorf("%d: %d copies in the output queue, want %d", n, outCount[b], wo)
		case wf && fbCount[b] < 1:
			t.Errorf("%d: not in the fallback queue", n)
		case wo == 0 && outCount[b] > 0:
			t.Errorf("%d: %d copies in the output queue, want none", n, outCount[b])
		case !wf && fbCount[b] > 0:
			t.Errorf("%d: in the fallback queue, want it only in the output", n)
		}
		dups += outCount[b] - wo
		if wf {
			dups += fbCount[b] - 1
		}
	}
	if n := srv.Count(t, "in"); n != 0 {
		t.Errorf("the input queue still holds %d messages", n)
	}

	// On the server: what each receipt was, the visibility changes, and
	// that every delete came after the sends of what its message became.
	events := srv.Events(t)
	bodyOf := map[string]string{}
	sentOut, sentFb := map[string]int{}, map[string]int{}
	visibility := map[string]int{} // body -> changes
	nackedReceipts := map[string]bool{}
	deleted := map[string]int{}
	refusals, early := 0, 0
	for _, ev := range events {
		switch {
		case ev.Action == "ReceiveMessage" && ev.Queue == "in":
			for _, m := range ev.Messages {
				bodyOf[m.Receipt] = m.Body
			}
		case ev.Action == "SendMessageBatch" && ev.Queue == "out":
			refusals += len(ev.Refused)
			for _, m := range ev.Messages {
				sentOut[m.Body]++
			}
		case ev.Action == "SendMessageBatch" && ev.Queue == "fb":
			for _, m := range ev.Messages {
				sentFb[m.Body]++
			}
		case ev.Action == "ChangeMessageVisibility" && ev.Queue == "in":
			b := bodyOf[ev.Receipt]
			n, _ := strconv.Atoi(b)
			if b == "" || !nacked(n) || ev.VisibilityTimeout != wantVisibility {
				t.Errorf("visibility of %q (receipt %s) changed to %ss; want changes only for the nacked n%%7 == 2, to %ss", b, ev.Receipt, ev.VisibilityTimeout, wantVisibility)
			}
			visibility[b]++
			nackedReceipts[ev.Receipt] = true
		case (ev.Action == "DeleteMessageBatch" || ev.Action == "DeleteMessage") && ev.Queue == "in":
			receipts := ev.Receipts
			if ev.Receipt != "" {
				receipts = append(receipts, ev.Receipt)
			}
			for _, r := range receipts {
				b := bodyOf[r]
				n, err := strconv.Atoi(b)
				if err != nil {
					t.Errorf("deleted receipt %s was never received", r)
					continue
				}
				if nackedReceipts[r] {
					t.Errorf("%d deleted with the receipt it was nacked with", n)
				}
				wo, wf := expected(n)
				if sentOut[b] < wo || (wf && sentFb[b] < 1) {
					early++
					if early <= 5 {
						t.Errorf("%d deleted (event %d) after %d sends to the output and %d to the fallback; want %d and %t first", n, ev.Seq, sentOut[b], sentFb[b], wo, wf)
					}
				}
				deleted[b]++
			}
		}
	}
	wantNacked, sawNacked := 0, 0
	for n := range total {
		b := strconv.Itoa(n)
		if deleted[b] == 0 {
			t.Errorf("%d never deleted from the input queue", n)
		}
		if nacked(n) {
			wantNacked++
			if visibility[b] > 0 {
				sawNacked++
			}
		}
	}
	if sawNacked != wantNacked {
		t.Errorf("%d of the %d nacked messages had their visibility changed on the server", sawNacked, wantNacked)
	}
	if early > 0 {
		t.Errorf("%d deletes came before the message was final", early)
	}
	if refusals < wantFb*3 {
		t.Errorf("the server refused %d entries; want every fallback message refused 3 times (a try and 2 retries): %d", refusals, wantFb*3)
	}
	t.Logf("%d messages: %d written to the output (%d expected), %d to the fallback after %d refused entries, %d duplicates; %d nacked with visibility %ss; %d deletes, %d before final; %d server actions",
		total, o, wantOut, f, refusals, dups, sawNacked, wantVisibility, len(deleted), early, len(events))
}
