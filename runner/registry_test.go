package runner

import (
	"context"
	"strings"
	"testing"
)

type badValidate struct{ X string }

// Validate has the wrong signature: the runner would never call it.
func (*badValidate) Validate() error { return nil }

type goodSettings struct{ X string }

func (*goodSettings) Validate(Role) error { return nil }

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), want) {
			t.Fatalf("panic = %v; want one containing %q", r, want)
		}
	}()
	f()
}

func TestTypedRegistrationRefusesAValidateTheRunnerWouldNotCall(t *testing.T) {
	build := func(context.Context, Env, *badValidate) (Sink, error) { return nil, nil }
	mustPanic(t, "badValidate.Validate has type", func() { typed("sink", "bad", build) })
	mustPanic(t, "is not a struct", func() {
		typed("sink", "str", func(context.Context, Env, *string) (Sink, error) { return nil, nil })
	})
}

func TestTypedRegistrationHandsTheSettingsOver(t *testing.T) {
	var got *goodSettings
	p := typed("source", "good", func(_ context.Context, _ Env, c *goodSettings) (Source, error) {
		got = c
		return nil, nil
	})
	if p.Config == nil {
		t.Fatal("a settings struct with fields must give the plugin a Config")
	}
	cfg := p.Config().(*goodSettings)
	cfg.X = "set"
	if _, err := p.New(context.Background(), Env{}, cfg); err != nil || got != cfg {
		t.Fatalf("New: err %v, settings %p; want %p", err, got, cfg)
	}
	if _, err := p.New(context.Background(), Env{}, &badValidate{}); err == nil || !strings.Contains(err.Error(), "want *runner.goodSettings") {
		t.Fatalf("settings of another type: err %v", err)
	}
	none := typed("sink", "none", func(_ context.Context, _ Env, c *struct{}) (Sink, error) {
		if c == nil {
			t.Error("a kind without settings got a nil pointer")
		}
		return nil, nil
	})
	if none.Config != nil {
		t.Fatal("struct{} settings must leave Config nil (no variables to read)")
	}
	if _, err := none.New(context.Background(), Env{}, nil); err != nil {
		t.Fatal(err)
	}
}

type failingSink struct{}

func (*failingSink) Write(context.Context, []*Message) ([]WriteResult, error) { return nil, nil }
func (*failingSink) Close(context.Context) error                              { return nil }

func TestTypedRegistrationReturnsANilInterfaceOnError(t *testing.T) {
	p := typed("sink", "typed-nil", func(context.Context, Env, *struct{}) (Sink, error) {
		var s *failingSink // a typed nil, as `return New(...)` gives
		return s, context.Canceled
	})
	s, err := p.New(context.Background(), Env{}, nil)
	if err == nil || s != nil {
		t.Fatalf("got (%v, %v); want a nil interface and the error", s, err)
	}
}

func TestEverySlotIsDescribed(t *testing.T) {
	seen := map[Role]bool{}
	for _, s := range Slots {
		if s.Var == "" || s.Title == "" || seen[s.Role] {
			t.Fatalf("slot %+v: every role once, with a variable and a title", s)
		}
		seen[s.Role] = true
	}
	for _, r := range []Role{RoleSource, RoleTransformer, RoleUDF, RoleSink, RoleFallbackSink, RoleOnSuccessSink} {
		if !seen[r] {
			t.Fatalf("role %s has no slot", r)
		}
	}
}
