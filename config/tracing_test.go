package config_test

import (
	"strings"
	"testing"

	"github.com/monovertex/monovertex/config"
)

func TestTracingSettings(t *testing.T) {
	t.Run("off by default", func(t *testing.T) {
		if c := load(t, nil); c.Tracing.Enabled() || c.Tracing.Sampler != "parentbased_always_on" {
			t.Fatalf("config %+v: want tracing off with the spec's default sampler", c.Tracing)
		}
	})
	t.Run("on with an endpoint", func(t *testing.T) {
		c := load(t, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
			"OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_SERVICE_NAME": "orders",
		})
		if !c.Tracing.Enabled() || c.Tracing.Ratio() != 0.25 || c.Tracing.Service != "orders" {
			t.Fatalf("config %+v", c.Tracing)
		}
	})
	wantEachRefused(t, []refusal{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317", "URL of an OTLP/gRPC collector"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://collector:4317", "URL of an OTLP/gRPC collector"},
		{"OTEL_TRACES_SAMPLER", "jaeger_remote", "must be one of always_on"},
		{"OTEL_TRACES_SAMPLER_ARG", "1.5", "ratio from 0 to 1"},
		{"OTEL_TRACES_SAMPLER_ARG", "half", "ratio from 0 to 1"},
	})
	t.Run("listed in --help", func(t *testing.T) {
		var b strings.Builder
		config.Usage(&b)
		for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME"} {
			if !strings.Contains(b.String(), name) {
				t.Errorf("--help lacks %s", name)
			}
		}
	})
}
