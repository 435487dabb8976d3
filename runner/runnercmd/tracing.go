package runnercmd

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/config"
	"github.com/monovertex/monovertex/internal/version"
	"github.com/monovertex/monovertex/runner"
)

// startTracing builds the tracer the engine gets, or nil when tracing is
// off (no OTEL_EXPORTER_OTLP_ENDPOINT): the engine then skips every span
// step. stop flushes the spans still buffered; it is never nil.
func startTracing(ctx context.Context, cfg *config.Config, log *zap.SugaredLogger) (tracer trace.Tracer, stop func(), err error) {
	tc := cfg.Tracing
	if !tc.Enabled() {
		return nil, func() {}, nil
	}
	// WithEndpointURL takes the scheme as the standard says: http is
	// plain text, https is TLS. The exporter connects lazily, so a
	// collector that is not up yet does not stop the runner.
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(tc.Endpoint))
	if err != nil {
		return nil, nil, &runner.ConfigError{Var: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: tc.Endpoint, Reason: fmt.Sprintf("cannot build the OTLP/gRPC exporter: %v", err)}
	}
	service := tc.Service
	if service == "" {
		service = cfg.Name
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("service.version", version.Version),
		attribute.String(runner.LabelName, cfg.Name),
		attribute.String(runner.LabelReplica, strconv.Itoa(cfg.Replica)),
	)
	// The batcher reads OTEL_BSP_* (queue size, export delay) itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler(tc)))
	// Export errors (a collector away) are logged, not fatal: tracing
	// must never stop the data path.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warnw("tracing", zap.Error(err)) }))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log.Infow("tracing on", "endpoint", tc.Endpoint, "sampler", tc.Sampler, "service", service)
	return tp.Tracer("github.com/monovertex/monovertex/runner"), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warnw("tracing: spans not flushed at exit", zap.Error(err))
		}
	}, nil
}

// sampler is OTEL_TRACES_SAMPLER as the specification defines it; config
// has checked the name and the ratio.
func sampler(tc config.Tracing) sdktrace.Sampler {
	switch tc.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(tc.Ratio())
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tc.Ratio()))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}
