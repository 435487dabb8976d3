package config

import (
	"errors"
	"slices"
	"testing"

	"github.com/monovertex/monovertex/runner"
)

// TestDecodeReadsTheNamesHelpLists: decode looks up, for the runner's
// settings and every registered kind's, exactly the variables --help and
// the unknown-name check list, in the same order. (roles_test registers
// every kind, as the runner does.)
func TestDecodeReadsTheNamesHelpLists(t *testing.T) {
	specs := []any{&Core{}, &Tracing{}}
	for _, k := range runner.AllKinds() {
		if k.Config != nil {
			specs = append(specs, k.Config())
		}
	}
	for _, spec := range specs {
		var looked []string
		e := env{lookup: func(name string) (string, bool) { looked = append(looked, name); return "", false }}
		if err := decode(e, spec); err != nil {
			t.Fatalf("%T: %v", spec, err)
		}
		var listed []string
		for _, v := range variables(spec) {
			listed = append(listed, v.name)
		}
		if !slices.Equal(looked, listed) {
			t.Fatalf("%T: decode reads %v, help lists %v", spec, looked, listed)
		}
	}
}

// TestLoadEnvValidatesAMapAsTheEnvironment: LoadEnv applies the runner's
// validation to a map alone, the process environment playing no part.
func TestLoadEnvValidatesAMapAsTheEnvironment(t *testing.T) {
	t.Setenv("MV_READ_BATCH_SIZE", "0") // would be refused if it were read
	cases := []struct {
		name    string
		vars    map[string]string
		wantVar string
	}{
		{"defaults", map[string]string{}, ""},
		{"generator rate", map[string]string{"MV_GENERATOR_RPU": "4294967296"}, "MV_GENERATOR_RPU"},
		{"a number envconfig cannot read", map[string]string{"MV_READ_TIMEOUT": "soon"}, "MV_READ_TIMEOUT"},
		{"an unknown MV_ name", map[string]string{"MV_RETRY_STEP": "3"}, "MV_RETRY_STEP"},
		{"an adapter's own check", map[string]string{"MV_GENERATOR_MSG_SIZE": "-1"}, "MV_GENERATOR_MSG_SIZE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := LoadEnv(c.vars)
			var ce *runner.ConfigError
			switch {
			case c.wantVar == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.wantVar == "" && cfg.ReadBatchSize != 500:
				t.Fatalf("MV_READ_BATCH_SIZE %d, want the default 500", cfg.ReadBatchSize)
			case c.wantVar != "" && (!errors.As(err, &ce) || ce.Var != c.wantVar):
				t.Fatalf("error %v, want one naming %s", err, c.wantVar)
			}
		})
	}
}
