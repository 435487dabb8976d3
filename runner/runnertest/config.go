package runnertest

import (
	"errors"
	"strings"
	"testing"

	"github.com/monovertex/monovertex/runner"
)

// ConfigCase is an edit that makes a valid configuration invalid, and the
// variable its *runner.ConfigError must name.
type ConfigCase[C any] struct {
	Name string
	Edit func(*C)
	Var  string
}

// ConfigErrors checks that valid passes Validate(role) and that each case,
// applied to a copy of it, fails with a one-line *runner.ConfigError naming
// the case's variable, as the runner prints it before exiting with status 2.
// check, when non-nil, sees every edited configuration and its error.
func ConfigErrors[C any, P interface {
	*C
	Validate(runner.Role) error
}](t *testing.T, valid C, role runner.Role, cases []ConfigCase[C], check func(t *testing.T, cfg *C, err error)) {
	t.Helper()
	if err := P(&valid).Validate(role); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			cfg := valid
			c.Edit(&cfg)
			err := P(&cfg).Validate(role)
			var ce *runner.ConfigError
			if !errors.As(err, &ce) || ce.Var != c.Var {
				t.Fatalf("err %v, want a ConfigError on %s", err, c.Var)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("the error is more than one line: %q", err)
			}
			if check != nil {
				check(t, &cfg, err)
			}
		})
	}
}
