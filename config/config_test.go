package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/config"
	"github.com/monovertex/monovertex/runner"

	_ "github.com/monovertex/monovertex/adapters/sink/blackhole"
	_ "github.com/monovertex/monovertex/adapters/sink/log"
	_ "github.com/monovertex/monovertex/adapters/source/generator"
)

// load sets env for the test and loads the configuration, failing t if
// Load refuses it.
func load(t *testing.T, env map[string]string) *config.Config {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	c, err := config.Load()
	if err != nil {
		t.Fatalf("load with %v: %v", env, err)
	}
	return c
}

// wantRefused sets env for the test and fails t unless Load refuses it
// with a ConfigError naming key, holding value, whose reason contains
// reason.
func wantRefused(t *testing.T, env map[string]string, key, value, reason string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	_, err := config.Load()
	var ce *runner.ConfigError
	if !errors.As(err, &ce) || ce.Var != key || ce.Value != value || !strings.Contains(ce.Reason, reason) {
		t.Fatalf("error %v, want a ConfigError for %s=%q mentioning %q", err, key, value, reason)
	}
}

// refusal is a setting Load must refuse with a ConfigError naming key,
// holding value, whose reason contains reason.
type refusal struct{ key, value, reason string }

// wantEachRefused runs each refusal as the subtest key=value.
func wantEachRefused(t *testing.T, cases []refusal) {
	for _, tc := range cases {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			wantRefused(t, map[string]string{tc.key: tc.value}, tc.key, tc.value, tc.reason)
		})
	}
}

func TestDefaultsMatchTheContract(t *testing.T) {
	c := load(t, nil)
	o := c.RunnerOptions()
	if c.Name != "local" || c.Source != "generator" || c.Transformer != "none" || c.Sink != "log" || c.FallbackSink != "none" ||
		o.BatchSize != 500 || o.ReadTimeout != time.Second || o.Retry.Interval != time.Millisecond || o.Retry.Steps != 0 ||
		o.Retry.Factor != 1 || o.OnFailure != runner.OnFailureRetry || o.Ordering != runner.OrderingUnordered || o.ShutdownTimeout != 20*time.Second ||
		c.AdminPort != 2469 || c.Port != 8080 || o.Lookback != 120*time.Second {
		t.Fatalf("defaults differ from the documented ones (docs/configuration.md): %+v", c.Core)
	}
}

func TestValuesReachTheEngineOptions(t *testing.T) {
	o := load(t, map[string]string{
		"MV_RETRY_STEPS": "7", "MV_RETRY_FACTOR": "2.5", "MV_RETRY_CAP": "3s", "MV_ON_FAILURE": "drop",
		"MV_SCALE_TARGET_SECONDS": "45", "MV_MAX_SCALE": "9", "MV_STAGE_RETRY_STEPS": "unlimited", "MV_ORDERING": "key",
	}).RunnerOptions()
	if o.Retry.Steps != 7 || o.Retry.StageSteps != -1 || o.Retry.Factor != 2.5 || o.Retry.Cap != 3*time.Second || o.OnFailure != runner.OnFailureDrop ||
		o.Scaling.TargetSeconds != 45 || o.Scaling.Max != 9 || o.Scaling.Min != 1 || o.Ordering != runner.OrderingKey {
		t.Fatalf("options %+v", o)
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	wantEachRefused(t, []refusal{
		{"MV_READ_BATCH_SIZE", "x", "whole number"},
		{"MV_READ_TIMEOUT", "1 second", "duration"},
		{"MV_SINK", "kafka2", "must be one of blackhole, cloudevents, jetstream, kafka, log, sqs, udsink"},
		{"MV_MAX_SCALE", "-2", "0 (no bound)"},
		{"MV_GENERATOR_RPU", "-1", "positive"},
		{"MV_STAGE_RETRY_STEPS", "0", "positive whole number or unlimited"},
		{"MV_DAEMON_PORT", "70000", "0 (off) or a port"},
		{"MV_DAEMON_PORT", "2469", "must differ from PORT and MV_ADMIN_PORT"},
		{"MV_DAEMON_PORT", "9091", "reserved by Knative"},
		{"MV_ORDERING", "ordered", "must be unordered, partition or key"},
	})
}

func TestUsageListsNestedAndAdapterVariables(t *testing.T) {
	var b strings.Builder
	config.Usage(&b)
	for _, want := range []string{"MV_RETRY_INTERVAL", "MV_RETRY_JITTER", "MV_GENERATOR_TOTAL", "MV_LOG_MAX_VALUE", "MV_FALLBACK_SINK: none, blackhole, cloudevents, jetstream, kafka, log, sqs, udsink"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}

func TestUnknownVariableExitsWithTheNearestName(t *testing.T) {
	t.Setenv("MV_RETRY_STEP", "3")
	_, err := config.Load()
	var ce *runner.ConfigError
	if !errors.As(err, &ce) || ce.Var != "MV_RETRY_STEP" || !strings.Contains(ce.Reason, "did you mean MV_RETRY_STEPS?") {
		t.Fatalf("error %v, want MV_RETRY_STEP refused with MV_RETRY_STEPS suggested", err)
	}
	if strings.Count(err.Error(), "\n") != 0 {
		t.Fatalf("error is not one line: %q", err)
	}

	t.Setenv("MV_STRICT", "false")
	var warnings []string
	if _, err := config.LoadWarn(func(m string) { warnings = append(warnings, m) }); err != nil {
		t.Fatalf("MV_STRICT=false: %v", err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "MV_RETRY_STEP ") {
		t.Fatalf("warnings %q, want one about MV_RETRY_STEP", warnings)
	}
}

func TestOnlyFullNamesAreRead(t *testing.T) {
	// envconfig would read a nested field's bare name; a pod's STEPS=1
	// must not change the retry strategy.
	c := load(t, map[string]string{"STEPS": "1", "FACTOR": "9", "INTERVAL": "1h", "JITTER": "1", "CAP": "1s"})
	if o := c.RunnerOptions(); o.Retry.Steps != 0 || o.Retry.Factor != 1 || o.Retry.Interval != time.Millisecond || o.Retry.Jitter != 0 || o.Retry.Cap != 0 {
		t.Fatalf("bare names changed the retry strategy: %+v", o.Retry)
	}
}

func TestNumbersAreReadAsWritten(t *testing.T) {
	// Any reason will do: the value must not be read as another number.
	wantEachRefused(t, []refusal{
		{"PORT", "010000", ""}, {"PORT", "0x4e20", ""}, {"PORT", "1_8084", ""},
		{"MV_READ_BATCH_SIZE", "1e3", ""}, {"MV_RETRY_FACTOR", "NaN", ""}, {"MV_RETRY_FACTOR", "Inf", ""},
		{"MV_RETRY_JITTER", "-Inf", ""}, {"MV_SCALE_TARGET_SECONDS", "NaN", ""}, {"MV_SCALE_TARGET_SECONDS", "0x10", ""},
	})
	if c := load(t, map[string]string{"PORT": "18080"}); c.Port != 18080 {
		t.Fatalf("PORT=18080: port %d", c.Port)
	}
}

func TestEverySlotIsReadFromItsVariable(t *testing.T) {
	c := load(t, map[string]string{"MV_SINK": "blackhole", "MV_FALLBACK_SINK": "log"})
	want := map[runner.Role]string{runner.RoleSource: "generator", runner.RoleTransformer: "none", runner.RoleUDF: "none",
		runner.RoleSink: "blackhole", runner.RoleFallbackSink: "log", runner.RoleOnSuccessSink: "none"}
	for _, slot := range runner.Slots {
		if got := c.Kind(slot); got != want[slot.Role] {
			t.Errorf("%s: kind %q, want %q", slot.Var, got, want[slot.Role])
		}
		_, chosen := c.Settings[slot.Role]
		if chosen != (want[slot.Role] != config.None) {
			t.Errorf("%s: settings present %v for kind %q", slot.Var, chosen, want[slot.Role])
		}
	}
}
