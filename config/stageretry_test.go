package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// TestStageRetriesDefaultToTheSinks: a stage without any of its variables
// has no strategy of its own (the sink's, as before); one with some takes
// the sink's values for the rest and retry as its onFailure.
func TestStageRetriesDefaultToTheSinks(t *testing.T) {
	c := load(t, map[string]string{
		"MV_RETRY_INTERVAL": "5ms", "MV_RETRY_STEPS": "7", "MV_RETRY_FACTOR": "2", "MV_RETRY_CAP": "1s", "MV_RETRY_JITTER": "0.5",
		"MV_UDF_RETRY_STEPS": "3", "MV_UDF_RETRY_INTERVAL": "20ms", "MV_UDF_ON_FAILURE": "drop",
	})
	if r, err := c.StageRetry(runner.RoleTransformer); r != nil || err != nil {
		t.Errorf("transformer without its own variables: %+v, %v; want none (the sink's)", r, err)
	}
	r, err := c.StageRetry(runner.RoleUDF)
	want := &runner.StageRetry{Policy: runner.RetryPolicy{Interval: 20 * time.Millisecond, Steps: 3, Factor: 2, Cap: time.Second, Jitter: 0.5}, OnFailure: runner.OnFailureDrop}
	if err != nil || !reflect.DeepEqual(r, want) {
		t.Errorf("map UDF: %+v, %v; want %+v", r, err, want)
	}
	c = load(t, map[string]string{"MV_TRANSFORMER_RETRY_STEPS": "unlimited"})
	if r, _ := c.StageRetry(runner.RoleTransformer); r == nil || r.Policy.Steps != 0 || r.OnFailure != runner.OnFailureRetry {
		t.Errorf("transformer with unlimited steps: %+v; want steps 0 (unlimited) and onFailure retry", r)
	}
}

func TestStageRetriesRefuseBadValues(t *testing.T) {
	wantEachRefused(t, []refusal{
		{"MV_TRANSFORMER_RETRY_INTERVAL", "0s", "positive duration"},
		{"MV_TRANSFORMER_RETRY_STEPS", "0", "positive whole number"},
		{"MV_UDF_RETRY_FACTOR", "0.5", "1 or more"},
		{"MV_UDF_RETRY_CAP", "-1s", "positive duration"},
		{"MV_TRANSFORMER_RETRY_JITTER", "2", "between 0 and 1"},
		{"MV_UDF_ON_FAILURE", "fallback", "fallback is for sinks"},
	})
}
