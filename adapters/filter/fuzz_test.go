package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/monovertex/monovertex/runner"
)

// FuzzSettings: whatever MV_FILTER and MV_FILTERS hold, Validate either
// compiles them or refuses them with one line naming the variable, and a
// compiled filter evaluates a message without panicking.
func FuzzSettings(f *testing.F) {
	for _, seed := range []struct{ expr, filters string }{
		{"type = 'a'", ""},
		{"type = 'a' AND (", `[{"exact":{"type":"a"}}]`},
		{"EXISTS region AND region LIKE 'e%'", `[{"any":[{"not":{"prefix":{"type":"x"}}},{"cesql":"subject = '1'"}]}]`},
		{"ABS(-5) > 2 OR CONCAT(type, 'x') = 'ax'", `[{"all":[{"suffix":{"id":"1"}},{}]}]`},
		{"'\\u0000' # \u00e9", `[{"not":{}}]`},
	} {
		f.Add(seed.expr, seed.filters)
	}
	f.Fuzz(func(t *testing.T, expr, filters string) {
		cfg := Config{Expression: expr, Filters: filters, Position: Before}
		err := cfg.Validate(runner.RoleFilter)
		if err != nil {
			var ce *runner.ConfigError
			if !errors.As(err, &ce) || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("err = %v, want a one-line ConfigError", err)
			}
			return
		}
		if !cfg.Enabled() {
			return
		}
		flt, err := New(cfg, "fuzz", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := flt.Match(order()); err != nil {
			t.Fatal(err)
		}
	})
}
