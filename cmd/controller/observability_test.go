package main

import (
	"testing"

	"knative.dev/pkg/observability/resource"
)

// TestObservabilityResourceDoesNotPanic: sharedmain builds this resource
// before anything else, and knative.dev/pkg panics when the OpenTelemetry
// SDK's default resource names another semconv schema than its own (SDK
// v1.45+ against pkg's v1.41 schema: the controller crash-looped on the
// cluster). The module pins the SDK where they agree.
func TestObservabilityResourceDoesNotPanic(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("resource.Default panicked: %v", r)
		}
	}()
	r := resource.Default("monovertex-controller")
	if r.SchemaURL() == "" {
		t.Fatalf("resource without a schema URL: %v", r)
	}
	t.Logf("schema %s", r.SchemaURL())
}
