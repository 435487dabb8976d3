package cloudevents_test

import (
	"errors"
	"testing"
	"time"

	cesink "github.com/monovertex/monovertex/adapters/sink/cloudevents"
	_ "github.com/monovertex/monovertex/adapters/source/generator"
	"github.com/monovertex/monovertex/config"
	"github.com/monovertex/monovertex/runner"
)

// TestKnativeVariables: what Knative's controllers inject (NAME,
// K_LOGGING_CONFIG, K_SINK_TIMEOUT) stands in for the runner's own
// settings the user left unset, and never over one the user set.
func TestKnativeVariables(t *testing.T) {
	base := func(kv ...string) map[string]string {
		m := map[string]string{"MV_SINK": "cloudevents", "K_SINK": "http://broker.example/ns/default"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	zapWarn := `{"zap-logger-config":"{\"level\":\"warn\",\"encoding\":\"json\"}"}`
	cases := []struct {
		name             string
		env              map[string]string
		wantName, wantLv string
		wantTimeout      time.Duration
	}{
		{"nothing from Knative", base(), "local", "info", 30 * time.Second},
		{"NAME names the runner", base("NAME", "orders"), "orders", "info", 30 * time.Second},
		{"MV_NAME wins over NAME", base("NAME", "orders", "MV_NAME", "mine"), "mine", "info", 30 * time.Second},
		{"zap-logger-config level", base("K_LOGGING_CONFIG", zapWarn), "local", "warn", 30 * time.Second},
		{"loglevel of the component wins", base("K_LOGGING_CONFIG", `{"zap-logger-config":"{\"level\":\"warn\"}","loglevel.monovertex":"debug"}`), "local", "debug", 30 * time.Second},
		{"K_COMPONENT picks the key", base("K_COMPONENT", "orders-source", "K_LOGGING_CONFIG", `{"loglevel.orders-source":"error","loglevel.monovertex":"debug"}`), "local", "error", 30 * time.Second},
		{"zap's fatal is error", base("K_LOGGING_CONFIG", `{"loglevel.monovertex":"fatal"}`), "local", "error", 30 * time.Second},
		{"Knative's empty config", base("K_LOGGING_CONFIG", `{}`), "local", "info", 30 * time.Second},
		{"MV_LOG_LEVEL wins", base("K_LOGGING_CONFIG", zapWarn, "MV_LOG_LEVEL", "debug"), "local", "debug", 30 * time.Second},
		{"K_SINK_TIMEOUT in seconds", base("K_SINK_TIMEOUT", "7"), "local", "info", 7 * time.Second},
		{"K_SINK_TIMEOUT 0 is none", base("K_SINK_TIMEOUT", "0"), "local", "info", 0},
		{"MV_CE_SINK_TIMEOUT wins", base("K_SINK_TIMEOUT", "7", "MV_CE_SINK_TIMEOUT", "2s"), "local", "info", 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.LoadEnv(c.env)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Name != c.wantName || cfg.LogLevel != c.wantLv {
				t.Errorf("name %q, level %q; want %q, %q", cfg.Name, cfg.LogLevel, c.wantName, c.wantLv)
			}
			sink := cfg.Settings[runner.RoleSink].(*cesink.Config)
			if got := sink.DeliveryTimeout(); got != c.wantTimeout {
				t.Errorf("delivery timeout %v, want %v", got, c.wantTimeout)
			}
		})
	}
	for _, bad := range []struct{ env map[string]string }{
		{base("K_LOGGING_CONFIG", `{"loglevel.monovertex":`)},
		{base("K_LOGGING_CONFIG", `{"loglevel.monovertex":"loud"}`)},
		{base("K_LOGGING_CONFIG", `{"zap-logger-config":"level: info"}`)},
		{base("K_SINK_TIMEOUT", "-1")},
		{base("K_SINK_TIMEOUT", "30s")},
	} {
		_, err := config.LoadEnv(bad.env)
		var ce *runner.ConfigError
		want := "K_LOGGING_CONFIG"
		if _, ok := bad.env["K_SINK_TIMEOUT"]; ok {
			want = "K_SINK_TIMEOUT"
		}
		if !errors.As(err, &ce) || ce.Var != want {
			t.Errorf("%v: error %v, want one naming %s", bad.env, err, want)
		}
	}
}
