package faults_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestJetStreamSettingsThatCannotWorkExitTwo starts the runner with each
// JetStream setting that can never work: it must exit 2 with one line
// naming the variable. A server that is down at start is not a setting
// error: exit 1.
func TestJetStreamSettingsThatCannotWorkExitTwo(t *testing.T) {
	f := newJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.JS.CreateOrUpdateConsumer(ctx, inStream, jetstream.ConsumerConfig{Durable: "ackall", AckPolicy: jetstream.AckAllPolicy}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, variable, value string
		code                  int
	}{
		{"stream that does not exist", "MV_JETSTREAM_STREAM", "NOPE", 2},
		{"consumer with AckAll", "MV_JETSTREAM_CONSUMER", "ackall", 2},
		{"consumer name with a slash", "MV_JETSTREAM_CONSUMER", "a/b", 2},
		{"filter subject with an empty token", "MV_JETSTREAM_FILTER_SUBJECT", "in..x", 2},
		// The server creates a consumer filtering outside its stream
		// (on in.>), which would then read nothing, silently.
		{"filter subject outside the stream", "MV_JETSTREAM_FILTER_SUBJECT", "other.x", 2},
		{"malformed URL", "MV_JETSTREAM_URL", "nats://[::1", 2},
		{"port out of range", "MV_JETSTREAM_URL", "nats://127.0.0.1:99999", 2},
		{"server down", "MV_JETSTREAM_URL", "nats://127.0.0.1:1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := f.Env("faults")
			env[tc.variable] = tc.value
			if tc.variable == "MV_JETSTREAM_FILTER_SUBJECT" {
				// A filter is only used for a consumer the runner creates.
				env["MV_JETSTREAM_CONSUMER"] = "filtered"
			}
			p := testutil.StartRunner(t, env)
			code := p.Wait(30 * time.Second)
			stderr := strings.TrimSpace(p.Stderr.String())
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, stderr)
			}
			if tc.code == 2 && (strings.Count(stderr, "\n") != 0 || !strings.Contains(stderr, tc.variable)) {
				t.Fatalf("want one line naming %s, got:\n%s", tc.variable, stderr)
			}
			t.Logf("exit %d: %.300s", code, stderr)
		})
	}
}
