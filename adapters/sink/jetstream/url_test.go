package jetstream_test

import (
	"errors"
	"testing"

	jssink "github.com/monovertex/monovertex/adapters/sink/jetstream"
	"github.com/monovertex/monovertex/runner"
)

func TestValidateNamesTheMalformedURLsVariable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		role   runner.Role
		change func(*jssink.Config)
		bad    string
	}{
		{"shared url", runner.RoleSink, func(c *jssink.Config) { c.URL = "nats://[::1" }, "MV_JETSTREAM_URL"},
		{"sink url", runner.RoleSink, func(c *jssink.Config) { c.SinkURL = "nats://h:99999" }, "MV_JETSTREAM_SINK_URL"},
		{"fallback url", runner.RoleFallbackSink, func(c *jssink.Config) { c.FallbackSubject = "dlq"; c.FallbackURL = "http://h" }, "MV_FALLBACK_JETSTREAM_URL"},
		{"fallback inherits", runner.RoleFallbackSink, func(c *jssink.Config) { c.FallbackSubject = "dlq"; c.URL = "nats://a b" }, "MV_JETSTREAM_URL"},
		{"on-success url", runner.RoleOnSuccessSink, func(c *jssink.Config) { c.OnSuccessSubject = "ok"; c.OnSuccessURL = "nats://%zz" }, "MV_ON_SUCCESS_JETSTREAM_URL"},
		{"good list", runner.RoleSink, func(c *jssink.Config) { c.URL = "nats://a:4222,nats://b:4222" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig("nats://127.0.0.1:4222", "out")
			tc.change(&c)
			err := c.Validate(tc.role)
			var ce *runner.ConfigError
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tc.bad != "" && (!errors.As(err, &ce) || ce.Var != tc.bad):
				t.Fatalf("got %v, want a ConfigError for %s", err, tc.bad)
			}
		})
	}
}
