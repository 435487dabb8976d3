package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/sink/sqs"
	"github.com/monovertex/monovertex/internal/sqstest"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func config(srv *sqstest.Server, queue string) *sqs.Config {
	return &sqs.Config{Roles: runner.Roles[sqs.Target]{Sink: sqs.Target{Queue: queue, Region: sqstest.Region, Endpoint: srv.Endpoint}}, Protocol: "query"}
}

func newSink(t *testing.T, cfg *sqs.Config, role runner.Role) *sqs.Sink {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	if err := cfg.Validate(role); err != nil {
		t.Fatal(err)
	}
	s, err := sqs.New(context.Background(), cfg.Target(role), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	if err := s.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	var queues []string
	for i := range 40 {
		queues = append(queues, "q"+strconv.Itoa(i))
	}
	srv := sqstest.Start(t, sqstest.Options{Queues: queues, FailRegex: "^fail"})
	var mu sync.Mutex
	next := 0
	current := map[string]string{}
	got := map[string][]*runner.Message{}
	queueOf := func(t *testing.T) string {
		mu.Lock()
		defer mu.Unlock()
		if q, ok := current[t.Name()]; ok {
			return q
		}
		q := queues[next]
		next++
		current[t.Name()] = q
		return q
	}
	conformance.RunSink(t, conformance.SinkCase{
		New: func(t *testing.T) runner.Sink { return newSink(t, config(srv, queueOf(t)), runner.RoleSink) },
		Received: func(t *testing.T) []*runner.Message {
			q := queueOf(t)
			for _, b := range srv.Drain(t, q) {
				// SQS keeps the body only; the suite's values start
				// with their message's ID and a colon.
				id, _, _ := strings.Cut(b, ":")
				got[q] = append(got[q], &runner.Message{ID: id, Value: []byte(b)})
			}
			return got[q]
		},
		Features: conformance.SinkFeatures{
			Lifecycle:      conformance.Lifecycle{CloseTwice: true, ContinuesAfterErrors: true},
			AnswersFailure: true,
			// SQS takes messages of up to 256 KiB.
			MaxPayload: 200 << 10,
		},
	})
}

func TestRefusedEntriesFailAloneAndHeadersSetEntryFields(t *testing.T) {
	srv := sqstest.Start(t, sqstest.Options{Queues: []string{"out", "fb"}, FailRegex: "^bad"})
	cfg := config(srv, "out")
	cfg.Fallback.Queue = "fb"
	s := newSink(t, cfg, runner.RoleSink)
	var msgs []*runner.Message
	for i := range 25 {
		v := fmt.Sprintf("ok-%d", i)
		if i%7 == 3 {
			v = fmt.Sprintf("bad-%d", i)
		}
		msgs = append(msgs, &runner.Message{ID: strconv.Itoa(i), Value: []byte(v)})
	}
	msgs[0].Headers = map[string]string{sqs.HeaderDelaySeconds: "1"}
	res, err := s.Write(context.Background(), msgs)
	if err != nil {
		t.Fatalf("Write failed as a whole: %v", err)
	}
	failed := 0
	for i, r := range res {
		bad := strings.HasPrefix(string(msgs[i].Value), "bad")
		switch {
		case bad && (r.Status != runner.WriteFailed || r.Err == nil || !strings.Contains(r.Err.Error(), "InjectedFailure")):
			t.Errorf("message %d (%s): %v %v; want failed with the entry's code", i, msgs[i].Value, r.Status, r.Err)
		case !bad && r.Status != runner.WriteOK:
			t.Errorf("message %d (%s): %v %v; want written", i, msgs[i].Value, r.Status, r.Err)
		}
		if bad {
			failed++
		}
	}
	if failed != 4 {
		t.Fatalf("%d refused; the test expects 4", failed)
	}
	if got := srv.Drain(t, "out"); len(got) != 21 {
		t.Errorf("%d messages in the queue; want the 21 not refused", len(got))
	}
	delays := map[string]string{}
	for _, ev := range srv.Events(t) {
		for _, m := range ev.Messages {
			if ev.Action == "SendMessageBatch" {
				delays[m.Body] = m.DelaySeconds
			}
		}
	}
	if delays["ok-0"] != "1" || delays["ok-1"] != "" {
		t.Errorf("DelaySeconds sent: ok-0 %q, ok-1 %q; want 1 from ok-0's header and none for ok-1", delays["ok-0"], delays["ok-1"])
	}
	// The fallback role sends to its own queue, on the sink's endpoint.
	fb := newSink(t, cfg, runner.RoleFallbackSink)
	if res, err := fb.Write(context.Background(), msgs[1:2]); err != nil || res[0].Status != runner.WriteOK {
		t.Fatalf("fallback write: %v %v", res, err)
	}
	if got := srv.Drain(t, "fb"); len(got) != 1 || got[0] != "ok-1" {
		t.Errorf("fallback queue holds %v; want [ok-1]", got)
	}
}

func TestInvalidSettingsNameTheirVariable(t *testing.T) {
	for _, tc := range []struct {
		name string
		role runner.Role
		cfg  sqs.Config
		want string
	}{
		{"no queue", runner.RoleSink, sqs.Config{Roles: runner.Roles[sqs.Target]{Sink: sqs.Target{Region: "r"}}, Protocol: "json"}, "MV_SQS_SINK_QUEUE_NAME"},
		{"no region", runner.RoleSink, sqs.Config{Roles: runner.Roles[sqs.Target]{Sink: sqs.Target{Queue: "q"}}, Protocol: "json"}, "MV_SQS_SINK_REGION"},
		{"no fallback queue", runner.RoleFallbackSink, sqs.Config{Roles: runner.Roles[sqs.Target]{Sink: sqs.Target{Queue: "q", Region: "r"}}, Protocol: "json"}, "MV_FALLBACK_SQS_QUEUE_NAME"},
		{"bad onSuccess endpoint", runner.RoleOnSuccessSink, sqs.Config{Roles: runner.Roles[sqs.Target]{Sink: sqs.Target{Region: "r"}, OnSuccess: sqs.Target{Queue: "o", Endpoint: "ftp://x"}}, Protocol: "json"}, "MV_ON_SUCCESS_SQS_ENDPOINT_URL"},
		{"bad fallback role", runner.RoleFallbackSink, sqs.Config{Roles: runner.Roles[sqs.Target]{Sink: sqs.Target{Region: "r"}, Fallback: sqs.Target{Queue: "f", AssumeRole: "{}"}}, Protocol: "json"}, "MV_FALLBACK_SQS_ASSUME_ROLE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate(tc.role)
			ce, ok := err.(*runner.ConfigError)
			if !ok || ce.Var != tc.want {
				t.Fatalf("Validate: %v; want a ConfigError naming %s", err, tc.want)
			}
		})
	}
}

// New sends nothing: a queue service that is down fails Connect, which
// the engine retries, and a queue that does not exist too (it may be
// created).
func TestConnectLooksTheQueueUp(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	down := &sqs.Config{Roles: runner.Roles[sqs.Target]{Sink: sqs.Target{Queue: "q", Region: sqstest.Region, Endpoint: "http://127.0.0.1:1"}}, Protocol: "query"}
	s, err := sqs.New(context.Background(), down.Target(runner.RoleSink), nil)
	if err != nil {
		t.Fatalf("new with the service down: %v, want no error before Connect", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err == nil || errors.As(err, new(*runner.ConfigError)) {
		t.Fatalf("connect with the service down: %v, want an error that is retried", err)
	}
	srv := sqstest.Start(t, sqstest.Options{Queues: []string{"out"}})
	missing, err := sqs.New(context.Background(), config(srv, "no-such-queue").Target(runner.RoleSink), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Connect(ctx); err == nil || !strings.Contains(err.Error(), "no-such-queue") {
		t.Fatalf("connect to a missing queue: %v, want an error naming it", err)
	}
}
