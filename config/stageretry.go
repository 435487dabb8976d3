package config

import (
	"strconv"
	"strings"

	"github.com/monovertex/monovertex/runner"
)

// StageRetries are the transformer's and the map UDF's own retry
// strategies (Numaflow's spec.source.transformer.retryStrategy and
// spec.udf.retryStrategy). A stage none of whose variables is set is
// retried with the sink's, as before; a variable left empty beside a set
// one takes the sink's value. Embedded in Core for the reason Retry is.
type StageRetries struct {
	TransformerInterval  string `envconfig:"MV_TRANSFORMER_RETRY_INTERVAL" desc:"the source transformer's own retry strategy: wait before the first retry; empty: MV_RETRY_INTERVAL"`
	TransformerSteps     string `envconfig:"MV_TRANSFORMER_RETRY_STEPS" desc:"retries of a failing transformer message before MV_TRANSFORMER_ON_FAILURE decides: a positive number or unlimited; empty: MV_RETRY_STEPS"`
	TransformerFactor    string `envconfig:"MV_TRANSFORMER_RETRY_FACTOR" desc:"the transformer's backoff multiplier per retry; empty: MV_RETRY_FACTOR"`
	TransformerCap       string `envconfig:"MV_TRANSFORMER_RETRY_CAP" desc:"the transformer's longest wait between retries, 0 for none; empty: MV_RETRY_CAP"`
	TransformerJitter    string `envconfig:"MV_TRANSFORMER_RETRY_JITTER" desc:"the transformer's random extra fraction of each wait, 0 to 1; empty: MV_RETRY_JITTER"`
	TransformerOnFailure string `envconfig:"MV_TRANSFORMER_ON_FAILURE" desc:"after the transformer's retries are spent: retry (hand the input back to the source, as numaflow-core does) or drop; empty: retry"`
	UDFInterval          string `envconfig:"MV_UDF_RETRY_INTERVAL" desc:"the map UDF's own retry strategy: wait before the first retry; empty: MV_RETRY_INTERVAL"`
	UDFSteps             string `envconfig:"MV_UDF_RETRY_STEPS" desc:"retries of a failing map UDF message before MV_UDF_ON_FAILURE decides: a positive number or unlimited; empty: MV_RETRY_STEPS"`
	UDFFactor            string `envconfig:"MV_UDF_RETRY_FACTOR" desc:"the map UDF's backoff multiplier per retry; empty: MV_RETRY_FACTOR"`
	UDFCap               string `envconfig:"MV_UDF_RETRY_CAP" desc:"the map UDF's longest wait between retries, 0 for none; empty: MV_RETRY_CAP"`
	UDFJitter            string `envconfig:"MV_UDF_RETRY_JITTER" desc:"the map UDF's random extra fraction of each wait, 0 to 1; empty: MV_RETRY_JITTER"`
	UDFOnFailure         string `envconfig:"MV_UDF_ON_FAILURE" desc:"after the map UDF's retries are spent: retry (hand the input back to the source, as numaflow-core does) or drop; empty: retry"`
}

// StageRetry is the own retry strategy of the stage in role
// (RoleTransformer or RoleUDF), or nil when none of its variables is set.
func (c *Config) StageRetry(role runner.Role) (*runner.StageRetry, error) {
	prefix, v := "MV_TRANSFORMER_", []string{c.TransformerInterval, c.TransformerSteps, c.TransformerFactor, c.TransformerCap, c.TransformerJitter, c.TransformerOnFailure}
	if role == runner.RoleUDF {
		prefix, v = "MV_UDF_", []string{c.UDFInterval, c.UDFSteps, c.UDFFactor, c.UDFCap, c.UDFJitter, c.UDFOnFailure}
	}
	set := false
	for i := range v {
		v[i] = strings.TrimSpace(v[i])
		set = set || v[i] != ""
	}
	if !set {
		return nil, nil
	}
	r := &runner.StageRetry{
		Policy:    runner.RetryPolicy{Interval: c.Retry.Interval, Steps: c.Steps, Factor: c.Retry.Factor, Cap: c.Retry.Cap, Jitter: c.Retry.Jitter},
		OnFailure: runner.OnFailureRetry,
	}
	bad := func(name, value, reason string) error {
		return &runner.ConfigError{Var: prefix + name, Value: value, Reason: reason}
	}
	if s := v[0]; s != "" {
		d, err := parseDuration(s)
		if err != nil || d <= 0 {
			return nil, bad("RETRY_INTERVAL", s, "must be a positive duration such as 1ms")
		}
		r.Policy.Interval = d
	}
	switch s := v[1]; s {
	case "":
	case "unlimited":
		r.Policy.Steps = 0
	default:
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, bad("RETRY_STEPS", s, "must be a positive whole number or unlimited")
		}
		r.Policy.Steps = n
	}
	if s := v[2]; s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f >= 1) {
			return nil, bad("RETRY_FACTOR", s, "must be 1 or more")
		}
		r.Policy.Factor = f
	}
	if s := v[3]; s != "" {
		d, err := parseDuration(s)
		if err != nil || d < 0 {
			return nil, bad("RETRY_CAP", s, "must be 0 (no cap) or a positive duration")
		}
		r.Policy.Cap = d
	}
	if s := v[4]; s != "" {
		j, err := strconv.ParseFloat(s, 64)
		if err != nil || !(j >= 0 && j <= 1) {
			return nil, bad("RETRY_JITTER", s, "must be between 0 and 1")
		}
		r.Policy.Jitter = j
	}
	switch s := v[5]; s {
	case "", "retry":
	case "drop":
		r.OnFailure = runner.OnFailureDrop
	default:
		return nil, bad("ON_FAILURE", s, "must be retry (hand the input back to the source) or drop; fallback is for sinks, as in Numaflow")
	}
	return r, nil
}
