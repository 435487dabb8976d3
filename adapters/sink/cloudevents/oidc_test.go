package cloudevents

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/monovertex/monovertex/runner"
)

// TestOIDCTokenPerRole: each sink role sends the token of its own file
// (a projected token for its receiver's audience), and none is sent to a
// role without one; an audience with no way to a token is refused at
// start, naming its variable.
func TestOIDCTokenPerRole(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // path -> Authorization
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Get("Authorization")
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	dir := t.TempDir()
	write := func(name, tok string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sinkTok, dlqTok := write("sink", "sink-token"), write("dlq", "dlq-token")
	for _, c := range []struct {
		role runner.Role
		path string
		want string
	}{
		{runner.RoleSink, "/broker", "Bearer sink-token"},
		{runner.RoleFallbackSink, "/dlq", "Bearer dlq-token"},
		{runner.RoleOnSuccessSink, "/done", ""},
	} {
		s := newSink(t, c.role, srv.URL+c.path, func(cfg *Config) {
			cfg.Sink.TokenPath, cfg.Fallback.TokenPath = sinkTok, dlqTok
			cfg.OnSuccess.URL = srv.URL + "/done"
		})
		res, err := s.Write(context.Background(), []*runner.Message{{ID: "m", Value: []byte("x")}})
		if err != nil || res[0].Status != runner.WriteOK {
			t.Fatalf("%v: %v %v", c.role, res, err)
		}
		mu.Lock()
		if got := seen[c.path]; got != c.want {
			t.Errorf("%v: Authorization %q, want %q", c.role, got, c.want)
		}
		mu.Unlock()
	}
	for _, bad := range []struct {
		role    runner.Role
		edit    func(*Config)
		wantVar string
	}{
		{runner.RoleSink, func(c *Config) { c.Sink.Audience, c.Sink.TokenPath = "broker:shop:default", filepath.Join(dir, "none") }, "K_AUDIENCE"},
		{runner.RoleFallbackSink, func(c *Config) { c.Fallback.Audience = "broker:shop:dlq" }, "MV_FALLBACK_SINK_AUDIENCE"},
		{runner.RoleFallbackSink, func(c *Config) { c.Fallback.TokenPath = filepath.Join(dir, "none") }, "MV_FALLBACK_OIDC_TOKEN_PATH"},
		{runner.RoleOnSuccessSink, func(c *Config) { c.OnSuccess.Audience = "broker:shop:done" }, "MV_ON_SUCCESS_SINK_AUDIENCE"},
	} {
		cfg := Config{Roles: runner.Roles[Target]{Sink: Target{URL: srv.URL}, Fallback: Target{URL: srv.URL}, OnSuccess: Target{URL: srv.URL}}, Mode: "binary", Concurrency: 1}
		bad.edit(&cfg)
		var ce *runner.ConfigError
		if err := cfg.Validate(bad.role); !errors.As(err, &ce) || ce.Var != bad.wantVar {
			t.Errorf("%v: %v, want an error naming %s", bad.role, err, bad.wantVar)
		}
	}
}
