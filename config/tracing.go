package config

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/monovertex/monovertex/runner"
)

// Tracing holds the OpenTelemetry settings. They are the standard OTEL_*
// variables every OpenTelemetry SDK reads, not MV_ ones, so that the
// tracing a platform configures for all its services (the Knative
// observability ConfigMap, an operator's injected environment) applies to
// the runner unchanged; MV_STRICT does not look at them.
type Tracing struct {
	Endpoint   string `envconfig:"OTEL_EXPORTER_OTLP_ENDPOINT" desc:"OTLP/gRPC collector the runner sends its spans to, such as http://otel-collector.observability:4317 (https for TLS); tracing is off when empty"`
	Sampler    string `envconfig:"OTEL_TRACES_SAMPLER" default:"parentbased_always_on" desc:"which batches are traced: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"`
	SamplerArg string `envconfig:"OTEL_TRACES_SAMPLER_ARG" desc:"ratio from 0 to 1 of the traceidratio samplers (default 1)"`
	Service    string `envconfig:"OTEL_SERVICE_NAME" desc:"service.name of the runner's spans (default MV_NAME)"`
}

// Samplers are the OTEL_TRACES_SAMPLER values the runner supports (the
// specification's, without the vendor ones).
var Samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t.Endpoint != "" }

// Ratio is OTEL_TRACES_SAMPLER_ARG for the traceidratio samplers; Validate
// has checked it.
func (t *Tracing) Ratio() float64 {
	if t.SamplerArg == "" {
		return 1
	}
	r, _ := strconv.ParseFloat(strings.TrimSpace(t.SamplerArg), 64)
	return r
}

// Validate checks the tracing settings, also when tracing is off, so a
// typo does not wait for the day the endpoint is set to show.
func (t *Tracing) Validate() error {
	t.Endpoint = strings.TrimSpace(t.Endpoint)
	if t.Endpoint != "" {
		u, err := url.Parse(t.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &runner.ConfigError{Var: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: t.Endpoint,
				Reason: "must be the URL of an OTLP/gRPC collector such as http://otel-collector:4317 (https:// for TLS)"}
		}
	}
	t.Sampler = strings.TrimSpace(t.Sampler)
	known := false
	for _, s := range Samplers {
		known = known || s == t.Sampler
	}
	if !known {
		return &runner.ConfigError{Var: "OTEL_TRACES_SAMPLER", Value: t.Sampler, Reason: "must be one of " + strings.Join(Samplers, ", ")}
	}
	if t.SamplerArg != "" {
		r, err := strconv.ParseFloat(strings.TrimSpace(t.SamplerArg), 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return &runner.ConfigError{Var: "OTEL_TRACES_SAMPLER_ARG", Value: t.SamplerArg, Reason: "must be a ratio from 0 to 1 such as 0.1"}
		}
	}
	return nil
}
