package jetstream_test

import (
	"context"
	"strings"
	"testing"

	jssink "github.com/monovertex/monovertex/adapters/sink/jetstream"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/runner"
)

// TestWritesOverMutualTLSWithAnNKey: the sink and the fallback sink reach
// a server that speaks only TLS and wants a client certificate and an NKey
// signature through the shared MV_JETSTREAM_TLS_* and _NKEY_FILE
// settings; every message is stored once with its value, and the same
// settings without the NKey are refused by the server.
func TestWritesOverMutualTLSWithAnNKey(t *testing.T) {
	sec := natstest.WriteSecrets(t)
	srv := natstest.StartWith(t, natstest.TLS(t, sec.PKI, true), natstest.NKeyUser(t, sec.Seed))
	_, js := srv.Connect(t)
	createStream(t, js, "OUT")
	createStream(t, js, "FB")
	cfg := testConfig(srv.URL(), "OUT.x")
	cfg.Fallback.Subject = "FB.x"
	cfg.Auth = sec.Auth()
	for role, prefix := range map[runner.Role]string{runner.RoleSink: "primary", runner.RoleFallbackSink: "fallback"} {
		if err := cfg.Validate(role); err != nil {
			t.Fatal(err)
		}
		allOK(t, write(t, newSink(t, cfg, role), batch(prefix, 50)))
	}
	for stream, prefix := range map[string]string{"OUT": "primary-", "FB": "fallback-"} {
		got := received(t, js, stream)
		seen := map[string]bool{}
		for _, m := range got {
			if !strings.HasPrefix(m.ID, prefix) || seen[m.ID] {
				t.Fatalf("stream %s holds %s twice or from the other sink", stream, m.ID)
			}
			seen[m.ID] = true
		}
		if len(seen) != 50 {
			t.Fatalf("stream %s holds %d messages, want 50", stream, len(seen))
		}
	}

	cfg.NKeyFile = ""
	s, err := jssink.New(cfg, runner.RoleSink, t.Name(), nil)
	if err != nil {
		t.Fatalf("new without the NKey: %v, want the refusal from Connect", err)
	}
	defer s.Close(context.Background())
	if err := s.Connect(context.Background()); err == nil || !strings.Contains(err.Error(), "Authorization") {
		t.Fatalf("without the NKey: %v, want an authorization error", err)
	}
}
