package cloudevents

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/adapters/internal/cewire/cewiretest"
	"github.com/monovertex/monovertex/runner"
)

func TestOverridesAreDecodedStrictly(t *testing.T) {
	ok := Config{Roles: runner.Roles[Target]{Sink: Target{URL: "http://broker-ingress.knative-eventing.svc/ns/default"}}, Mode: "binary", Concurrency: 1, Timeout: ptr(time.Second)}
	cases := []struct {
		name, value, says string
	}{
		{"typo in extensions", `{"extension":{"team":"payments"}}`, `unknown field "extension"`},
		{"unknown field beside extensions", `{"extensions":{"team":"payments"},"ttl":3}`, `unknown field "ttl"`},
		{"a second object", `{"extensions":{"team":"a"}}{"extensions":{"team":"b"}}`, "after the JSON object"},
		{"trailing garbage", `{"extensions":{"team":"a"}} x`, "after the JSON object"},
		{"non-string value", `{"extensions":{"team":1}}`, "cannot unmarshal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			cfg.Overrides = c.value
			var ce *runner.ConfigError
			err := cfg.Validate(runner.RoleSink)
			if !errors.As(err, &ce) || ce.Var != "K_CE_OVERRIDES" || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("err %v, want a K_CE_OVERRIDES error saying %q", err, c.says)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
	for _, v := range []string{`{"extensions":{"team":"payments"}}`, ` {"extensions":{}} `, `{}`, `{"extensions":null}`} {
		cfg := ok
		cfg.Overrides = v
		if err := cfg.Validate(runner.RoleSink); err != nil {
			t.Errorf("%s rejected: %v", v, err)
		}
	}
}

func TestRedirectIsNotPostedAgainWithinTheFloor(t *testing.T) {
	url, calls := cewiretest.RedirectingReceiver(t)
	s := newSink(t, runner.RoleSink, url, nil)
	msgs := []*runner.Message{{ID: "a", Value: []byte("x")}, {ID: "b", Value: []byte("y")}}
	start := time.Now()
	// What MV_ON_FAILURE=retry with MV_RETRY_INTERVAL=1ms does: write the
	// failed messages again at once, here for 2 floors.
	for time.Since(start) < 2*cewire.PermanentRetryFloor {
		res, err := s.Write(context.Background(), msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if !runner.IsPermanent(r.Err) || !strings.Contains(r.Err.Error(), "301") {
				t.Fatalf("want a permanent 301 failure, got %v", r.Err)
			}
		}
	}
	// 2 messages, tried at 0, 1s and 2s at most.
	if c := calls.Load(); c > 6 {
		t.Fatalf("the sink got %d posts of 2 messages answered 301 in %v", c, time.Since(start).Round(time.Millisecond))
	}
}
