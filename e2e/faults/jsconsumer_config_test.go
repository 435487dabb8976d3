package faults_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestJetStreamSettingsThatCannotWorkExitTwo starts the runner with each
// JetStream setting that can never work: it must exit 2 with one line
// naming the variable. A server that is down at start is not a setting
// error (TestJetStreamServerDownAtStartIsRetried).
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

// TestJetStreamServerDownAtStartIsRetried: a server that is down at start
// is tried again with backoff, each failed attempt logged, while /readyz
// says which adapter is not connected and why and /status shows it
// connecting; the runner does not crash-loop, and SIGTERM stops it with
// exit 0 having read nothing.
func TestJetStreamServerDownAtStartIsRetried(t *testing.T) {
	f := newJS(t)
	env := f.Env("faults")
	env["MV_JETSTREAM_URL"] = "nats://127.0.0.1:1"
	p := testutil.StartRunner(t, env)
	testutil.WaitFor(t, 30*time.Second, "two failed connect attempts logged", func() bool {
		return strings.Count(p.Stderr.String(), `"cannot connect; retrying"`) >= 2
	})
	code, body := testutil.Get(t, p.AdminURL+"/readyz")
	if code != 503 || !strings.Contains(string(body), "source (jetstream) not connected") || !strings.Contains(string(body), "127.0.0.1:1") {
		t.Fatalf("/readyz %d %q, want 503 naming the source and the server", code, body)
	}
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "connecting" || st.Totals.Read != 0 {
		t.Fatalf("/status state %q, read %d; want connecting, 0", st.State, st.Totals.Read)
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM while connecting, want 0:\n%s", code, p.Stderr.String())
	}
}
