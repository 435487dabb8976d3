package sqs_test

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/source/sqs"
	"github.com/monovertex/monovertex/internal/sqstest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func config(srv *sqstest.Server, queue string) sqs.Config {
	return sqs.Config{Queue: queue, Region: sqstest.Region, Endpoint: srv.Endpoint, Protocol: "query",
		Visibility: -1, MaxMessages: 10, WaitTime: 20, Attributes: "All", MsgAttrs: "All"}
}

func newSource(t *testing.T, cfg sqs.Config) *sqs.Source {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	if err := cfg.Validate(runner.RoleSource); err != nil {
		t.Fatal(err)
	}
	src, err := sqs.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(context.Background()) })
	if err := src.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	return src
}

func TestConformance(t *testing.T) {
	// One queue per test of the suite, on one server whose messages come
	// back 6s after a read that was not acked: long enough for the suite
	// to read everything it produced before any comes back.
	var queues []string
	for i := range 40 {
		queues = append(queues, fmt.Sprintf("q%d", i))
	}
	srv := sqstest.Start(t, sqstest.Options{Queues: queues, Visibility: 6 * time.Second})
	var next atomic.Int64
	current := map[string]string{}
	queueOf := func(t *testing.T) string {
		if q, ok := current[t.Name()]; ok {
			return q
		}
		q := queues[next.Add(1)-1]
		current[t.Name()] = q
		return q
	}
	produced := map[string]int{}
	conformance.RunSource(t, conformance.SourceCase{
		New: func(t *testing.T) runner.Source { return newSource(t, config(srv, queueOf(t))) },
		Produce: func(t *testing.T, n int) [][]byte {
			q := queueOf(t)
			bodies := make([]string, n)
			values := make([][]byte, n)
			for i := range bodies {
				bodies[i] = fmt.Sprintf("%s-v%d", q, produced[q]+i)
				values[i] = []byte(bodies[i])
			}
			produced[q] += n
			srv.Send(t, q, bodies)
			return values
		},
		Features: conformance.SourceFeatures{
			Lifecycle: conformance.Lifecycle{CloseTwice: true, ContinuesAfterErrors: true, BadInput: true},
			Nack:      true, RedeliverAfterClose: true, Pending: true, KeepsValues: true,
			RedeliveryWait: 15 * time.Second,
		},
	})
}

// read reads until it has n messages.
func read(t *testing.T, src *sqs.Source, n int) []*runner.Message {
	t.Helper()
	var got []*runner.Message
	for range 100 {
		msgs, err := src.Read(context.Background(), n-len(got), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got = append(got, msgs...); len(got) >= n {
			return got
		}
	}
	t.Fatalf("read %d messages of %d", len(got), n)
	return nil
}

func TestNackSetsVisibilityRoundedUpAndDeletesOnlyOnAck(t *testing.T) {
	srv := sqstest.Start(t, sqstest.Options{Queues: []string{"in"}})
	srv.Send(t, "in", []string{"a", "b", "c", "d"})
	src := newSource(t, config(srv, "in"))
	msgs := read(t, src, 4)
	sort.Slice(msgs, func(i, j int) bool { return string(msgs[i].Value) < string(msgs[j].Value) })
	for _, m := range msgs {
		if m.ID == "" || len(m.Keys) != 1 || m.Keys[0] != m.ID {
			t.Errorf("message %q: ID %q, keys %v; want the MessageId as ID and one key", m.Value, m.ID, m.Keys)
		}
		if m.Headers["SentTimestamp"] == "" || m.EventTime.IsZero() {
			t.Errorf("message %q: headers %v, event time %v; want the system attributes and SentTimestamp", m.Value, m.Headers, m.EventTime)
		}
	}
	ctx := context.Background()
	if err := src.Nack(ctx, msgs[0:1], runner.Nack{Delay: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := src.Nack(ctx, msgs[1:2], runner.Nack{}); err != nil {
		t.Fatal(err)
	}
	if err := src.Ack(ctx, msgs[2:4]); err != nil {
		t.Fatal(err)
	}
	var vis, deletes []sqstest.Event
	for _, ev := range srv.Events(t) {
		switch ev.Action {
		case "ChangeMessageVisibility":
			vis = append(vis, ev)
		case "DeleteMessageBatch", "DeleteMessage":
			deletes = append(deletes, ev)
		}
	}
	receipt := func(m *runner.Message) string { return receiptOf(t, srv, string(m.Value)) }
	if len(vis) != 1 || vis[0].VisibilityTimeout != "2" || vis[0].Receipt != receipt(msgs[0]) {
		t.Errorf("visibility changes %+v; want one, of %q's receipt, to 2s (1.5s rounded up), and none for the nack without a delay", vis, msgs[0].Value)
	}
	if len(deletes) != 1 || len(deletes[0].Receipts) != 2 || deletes[0].Receipts[0] != receipt(msgs[2]) || deletes[0].Receipts[1] != receipt(msgs[3]) {
		t.Errorf("deletes %+v; want one batch with the receipts of c and d", deletes)
	}
	if n := srv.Count(t, "in"); n != 2 {
		t.Errorf("queue holds %d messages after 2 acks of 4; want 2", n)
	}
	// a comes back after its 2s; b only after the queue's 30s.
	got := read(t, src, 1)
	if string(got[0].Value) != "a" || got[0].ID != msgs[0].ID {
		t.Errorf("redelivered %q (ID %s); want a with its ID %s", got[0].Value, got[0].ID, msgs[0].ID)
	}
}

// receiptOf finds the receipt handle the server last gave body.
func receiptOf(t *testing.T, srv *sqstest.Server, body string) string {
	t.Helper()
	r := ""
	for _, ev := range srv.Events(t) {
		for _, m := range ev.Messages {
			if ev.Action == "ReceiveMessage" && m.Body == body {
				r = m.Receipt
			}
		}
	}
	if r == "" {
		t.Fatalf("%q was never received", body)
	}
	return r
}

func TestInvalidSettingsNameTheirVariable(t *testing.T) {
	base := sqs.Config{Queue: "q", Region: "us-west-2", Protocol: "json", Visibility: -1, MaxMessages: 10, WaitTime: 20}
	for _, tc := range []struct {
		name string
		set  func(*sqs.Config)
		want string
	}{
		{"no queue", func(c *sqs.Config) { c.Queue = "" }, "MV_SQS_QUEUE_NAME"},
		{"no region", func(c *sqs.Config) { c.Region = " " }, "MV_SQS_REGION"},
		{"bad endpoint", func(c *sqs.Config) { c.Endpoint = "localhost:4566" }, "MV_SQS_ENDPOINT_URL"},
		{"bad protocol", func(c *sqs.Config) { c.Protocol = "xml" }, "MV_SQS_PROTOCOL"},
		{"visibility too long", func(c *sqs.Config) { c.Visibility = 43201 }, "MV_SQS_VISIBILITY_TIMEOUT"},
		{"eleven per receive", func(c *sqs.Config) { c.MaxMessages = 11 }, "MV_SQS_MAX_NUMBER_OF_MESSAGES"},
		{"wait too long", func(c *sqs.Config) { c.WaitTime = 21 }, "MV_SQS_WAIT_TIME_SECONDS"},
		{"assume role not JSON", func(c *sqs.Config) { c.AssumeRole = "arn:aws:iam::1:role/r" }, "MV_SQS_ASSUME_ROLE"},
		{"assume role unknown field", func(c *sqs.Config) { c.AssumeRole = `{"roleArn":"arn:aws:iam::1:role/r","role":"x"}` }, "MV_SQS_ASSUME_ROLE"},
		{"assume role too short", func(c *sqs.Config) { c.AssumeRole = `{"roleArn":"arn:aws:iam::1:role/r","durationSeconds":60}` }, "MV_SQS_ASSUME_ROLE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.set(&c)
			err := c.Validate(runner.RoleSource)
			ce, ok := err.(*runner.ConfigError)
			if !ok || ce.Var != tc.want {
				t.Fatalf("Validate: %v; want a ConfigError naming %s", err, tc.want)
			}
		})
	}
	good := base
	good.AssumeRole = `{"roleArn":"arn:aws:iam::123456789012:role/r","sessionName":"s","durationSeconds":900,"externalID":"x","policy":"{}","policyArns":["arn:aws:iam::aws:policy/p"]}`
	if err := good.Validate(runner.RoleSource); err != nil {
		t.Errorf("Numaflow's full assumeRole refused: %v", err)
	}
}
