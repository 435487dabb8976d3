package filter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

// order is the message the tables filter: type order.created from
// /shop, subject 42, extension region=eu, keys k1.
func order() *runner.Message {
	return &runner.Message{
		ID: "o-1", Keys: []string{"k1"}, Value: []byte(`{"n":1}`),
		EventTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Headers: map[string]string{
			cewire.HeaderType: "order.created", cewire.HeaderSource: "/shop", cewire.HeaderSubject: "42",
			cewire.HeaderContentType: "application/json", "region": "eu",
		},
	}
}

func newFilter(t *testing.T, cfg Config) *Filter {
	t.Helper()
	if cfg.Position == "" {
		cfg.Position = Before
	}
	f, err := New(cfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestMatchesAsKnativeTriggers(t *testing.T) {
	for _, tc := range []struct {
		name, cesql, filters string
		want                 bool
	}{
		{name: "cesql type equal", cesql: "type = 'order.created'", want: true},
		{name: "cesql type differs", cesql: "type = 'order.deleted'", want: false},
		{name: "cesql extension", cesql: "region = 'eu' AND subject = '42'", want: true},
		{name: "cesql missing attribute fails", cesql: "tenant = 'a'", want: false},
		{name: "cesql missing attribute in OR", cesql: "tenant = 'a' OR type = 'order.created'", want: false},
		{name: "cesql exists", cesql: "EXISTS region AND NOT EXISTS tenant", want: true},
		{name: "cesql like", cesql: "type LIKE 'order.%'", want: true},
		{name: "cesql partitionkey", cesql: "partitionkey = 'k1'", want: true},
		{name: "cesql non-boolean string true casts", cesql: "'true'", want: true},
		{name: "cesql integer 0 casts to false", cesql: "0", want: false},
		{name: "cesql string that is no boolean fails", cesql: "type", want: false},
		{name: "exact", filters: `[{"exact":{"type":"order.created","source":"/shop"}}]`, want: true},
		{name: "exact one differs", filters: `[{"exact":{"type":"order.created","source":"/other"}}]`, want: false},
		{name: "exact missing extension", filters: `[{"exact":{"tenant":"a"}}]`, want: false},
		{name: "exact time as RFC 3339", filters: `[{"exact":{"time":"2026-01-02T03:04:05Z"}}]`, want: true},
		{name: "prefix", filters: `[{"prefix":{"type":"order."}}]`, want: true},
		{name: "suffix", filters: `[{"suffix":{"type":".created"}}]`, want: true},
		{name: "suffix differs", filters: `[{"suffix":{"type":".deleted"}}]`, want: false},
		{name: "list is all", filters: `[{"prefix":{"type":"order."}},{"exact":{"region":"us"}}]`, want: false},
		{name: "any", filters: `[{"any":[{"exact":{"region":"us"}},{"exact":{"region":"eu"}}]}]`, want: true},
		{name: "any none", filters: `[{"any":[{"exact":{"region":"us"}},{"exact":{"region":"ap"}}]}]`, want: false},
		{name: "all", filters: `[{"all":[{"exact":{"region":"eu"}},{"cesql":"subject = '42'"}]}]`, want: true},
		{name: "not", filters: `[{"not":{"exact":{"region":"us"}}}]`, want: true},
		{name: "not not", filters: `[{"not":{"not":{"exact":{"region":"us"}}}}]`, want: false},
		{name: "empty list passes", filters: `[]`, want: true},
		{name: "empty entry passes", filters: `[{}]`, want: true},
		// Knative's notFilter keeps NoFilter: not of nothing lets through.
		{name: "not of empty passes", filters: `[{"not":{}}]`, want: true},
		{name: "both variables must match", cesql: "region = 'eu'", filters: `[{"exact":{"region":"us"}}]`, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFilter(t, Config{Expression: tc.cesql, Filters: tc.filters})
			got, err := f.Match(order())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInvalidSettingsNameVariableAndPosition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		wantIn []string
	}{
		{"cesql unterminated", Config{Expression: "type = 'a' AND ("}, []string{`invalid MV_FILTER="type = 'a' AND ("`, "at column 17"}},
		{"cesql bad token", Config{Expression: "type = 'a' # b"}, []string{"MV_FILTER", "at column 12", "'#'"}},
		{"cesql second line", Config{Expression: "type = 'a'\nAND AND"}, []string{"MV_FILTER", "at line 2, column 5"}},
		{"blank", Config{Expression: "  "}, []string{"MV_FILTER", "empty"}},
		{"filters not json", Config{Filters: `{"exact":`}, []string{"invalid MV_FILTERS", "JSON list"}},
		{"filters unknown dialect", Config{Filters: `[{"exactly":{"type":"a"}}]`}, []string{"MV_FILTERS", "exactly"}},
		{"filters two dialects", Config{Filters: `[{"exact":{"type":"a"},"cesql":"true"}]`}, []string{"MV_FILTERS", "filters[0]: multiple dialects"}},
		{"filters nested cesql", Config{Filters: `[{"any":[{"exact":{"type":"a"}},{"cesql":"type = "}]}]`}, []string{"MV_FILTERS", "filters[0].any[1].cesql", "at column 8"}},
		{"filters bad name", Config{Filters: `[{"prefix":{"Type":"a"}}]`}, []string{"filters[0].prefix", `"Type"`}},
		{"filters empty value", Config{Filters: `[{"exact":{"type":""}}]`}, []string{"filters[0].exact", "empty"}},
		{"position", Config{Expression: "true", Position: "middle"}, []string{"MV_FILTER_POSITION", "before or after"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Position == "" {
				tc.cfg.Position = Before
			}
			err := tc.cfg.Validate(runner.RoleFilter)
			var ce *runner.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error has more than one line: %q", msg)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestTransformPassesMatchesOnUnchangedAndDropsTheRest(t *testing.T) {
	f := newFilter(t, Config{Expression: "region = 'eu'"})
	in := []*runner.Message{order(), order(), order(), order()}
	in[1].Headers["region"] = "us"
	delete(in[2].Headers, "region")
	in[3].ID = " " // cannot be an event id
	res, err := f.Transform(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4", len(res))
	}
	if len(res[0].Outputs) != 1 || res[0].Outputs[0] != in[0] || res[0].Err != nil {
		t.Errorf("match: %+v, want the input itself as the only output", res[0])
	}
	for i := 1; i <= 2; i++ {
		if len(res[i].Outputs) != 0 || res[i].Err != nil {
			t.Errorf("result %d: %+v, want a drop", i, res[i])
		}
	}
	if !runner.IsPermanent(res[3].Err) {
		t.Errorf("invalid id: err = %v, want a permanent error", res[3].Err)
	}
}
