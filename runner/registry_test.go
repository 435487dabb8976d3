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

type queueTarget struct {
	Queue string `envconfig:"QUEUE" sink:"MV_Q_SINK_QUEUE_NAME"`
	Tries string `envconfig:"TRIES"`
}

func (queueTarget) RoleKind() string { return "Q" }

type queueSettings struct {
	Roles[queueTarget]
}

type untaggedTarget struct{ Queue string }

func (untaggedTarget) RoleKind() string { return "Q" }

func TestRolesAreNamedByOneRule(t *testing.T) {
	var s queueSettings
	for _, c := range []struct {
		field any
		want  string
	}{
		{&s.Sink.Queue, "MV_Q_SINK_QUEUE_NAME"}, // the sink tag keeps an older name
		{&s.Sink.Tries, "MV_Q_SINK_TRIES"},
		{&s.Fallback.Queue, "MV_FALLBACK_Q_QUEUE"},
		{&s.Fallback.Tries, "MV_FALLBACK_Q_TRIES"},
		{&s.OnSuccess.Queue, "MV_ON_SUCCESS_Q_QUEUE"},
		{&s.OnSuccess.Tries, "MV_ON_SUCCESS_Q_TRIES"},
	} {
		if got := s.Var(c.field); got != c.want {
			t.Errorf("Var = %s, want %s", got, c.want)
		}
	}
	s.Sink.Tries, s.OnSuccess.Tries = "3", "5"
	for _, c := range []struct {
		role       Role
		value, src string
	}{
		{RoleSink, "3", "MV_Q_SINK_TRIES"},
		{RoleFallbackSink, "3", "MV_Q_SINK_TRIES"}, // the fallback sets none: the sink's
		{RoleOnSuccessSink, "5", "MV_ON_SUCCESS_Q_TRIES"},
	} {
		if v, src := s.Inherit(c.role, func(t *queueTarget) *string { return &t.Tries }); v != c.value || src != c.src {
			t.Errorf("%s: Inherit = %q from %s, want %q from %s", c.role, v, src, c.value, c.src)
		}
	}
	if v, src := s.Inherit(RoleFallbackSink, func(t *queueTarget) *string { return &t.Queue }); v != "" || src != "MV_Q_SINK_QUEUE_NAME" {
		t.Errorf("nothing set: Inherit = %q from %s, want the sink's variable", v, src)
	}
	mustPanic(t, "does not point to a field", func() { s.Var(&s.Sink) })
}

func TestOnlySinksHaveRolesNamedForThem(t *testing.T) {
	none := func(context.Context, Env, *queueSettings) (Source, error) { return nil, nil }
	mustPanic(t, "only a sink has", func() { typed("source", "q", none) })
	sink := func(context.Context, Env, *queueSettings) (Sink, error) { return nil, nil }
	mustPanic(t, `want "OTHER"`, func() { typed("sink", "other", sink) })
	typed("sink", "q", sink)
	untagged := func(context.Context, Env, *struct{ Roles[untaggedTarget] }) (Sink, error) { return nil, nil }
	mustPanic(t, "needs an envconfig suffix", func() { typed("sink", "q", untagged) })
}
