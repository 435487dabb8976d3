// Package filter is the in-process filter stage: each message, seen as
// the CloudEvent the CloudEvents transformer would post for it (the
// mapping of package cewire, MV_CE_SOURCE and MV_CE_TYPE included), goes
// on only if it matches MV_FILTER, a CloudEvents SQL expression as a
// Knative Trigger's filters[].cesql takes, and MV_FILTERS, a Trigger's
// spec.filters pasted as JSON (exact, prefix, suffix, all, any, not,
// cesql, with Knative's semantics). What does not match is dropped on
// purpose and acked (monovtx_filter_dropped_total).
//
// The filter stands before the transformer (MV_FILTER_POSITION=before,
// seeing messages as read) or after the map UDF (after, seeing what the
// stages made). It passes a message on unchanged, ID included.
//
// Evaluation follows Knative's broker: a CESQL expression whose
// evaluation fails (a missing attribute) does not match, and neither
// does one whose value does not cast to a boolean. A message that cannot
// be a CloudEvent (an ID that is empty or not printable) fails
// permanently, and MV_ON_FAILURE decides, as in the CloudEvents transformer.
package filter

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

// Positions of the filter in the chain (MV_FILTER_POSITION).
const (
	Before = "before"
	After  = "after"
)

// Config holds the filter's settings.
type Config struct {
	Expression string `envconfig:"MV_FILTER" desc:"CloudEvents SQL (CESQL) expression, as a Knative Trigger's cesql filter: only messages that match it, seen as CloudEvents, go on; the rest are dropped and acked. Empty: no CESQL filter"`
	Filters    string `envconfig:"MV_FILTERS" desc:"a Knative Trigger's spec.filters as JSON, e.g. [{\"prefix\":{\"type\":\"order.\"}},{\"not\":{\"exact\":{\"source\":\"test\"}}}] (exact, prefix, suffix, all, any, not, cesql): only messages that match them all go on. Empty: none"`
	Position   string `envconfig:"MV_FILTER_POSITION" default:"before" desc:"where the filter stands: before (on messages as read, before MV_TRANSFORMER) or after (on what the transformer and map UDF made, before the sinks)"`
	cewire.Config

	// compiled is what Validate made of Expression and Filters.
	compiled node
}

// Validate compiles the expressions, so an invalid one stops the runner
// at start (exit 2) with its position.
func (c *Config) Validate(runner.Role) error {
	if c.Position != Before && c.Position != After {
		return &runner.ConfigError{Var: "MV_FILTER_POSITION", Value: c.Position, Reason: "must be before or after"}
	}
	var nodes []node
	if c.Expression != "" {
		e, err := compileCESQL(c.Expression)
		if err != nil {
			return &runner.ConfigError{Var: "MV_FILTER", Value: c.Expression, Reason: err.Error()}
		}
		nodes = append(nodes, cesqlNode{e})
	}
	if c.Filters != "" {
		n, err := compileFilters(c.Filters)
		if err != nil {
			return &runner.ConfigError{Var: "MV_FILTERS", Value: c.Filters, Reason: err.Error()}
		}
		nodes = append(nodes, n)
	}
	c.compiled = nil
	if len(nodes) > 0 {
		c.compiled = joinAll(nodes)
	}
	if err := c.Config.Validate(); err != nil {
		return err
	}
	return nil
}

// Enabled reports whether the settings ask for a filter.
func (c *Config) Enabled() bool { return c.Expression != "" || c.Filters != "" }

func init() {
	runner.RegisterFilter("cesql", func(_ context.Context, env runner.Env, cfg *Config) (runner.Transformer, error) {
		if !cfg.Enabled() {
			return nil, nil
		}
		return New(*cfg, env.Name, env.Logger)
	})
}

// Filter is the filter stage; it is a runner.Transformer whose outputs
// are its inputs or nothing.
type Filter struct {
	match  node
	mapper *cewire.Mapper
	after  bool
}

var _ runner.Transformer = (*Filter)(nil)

// New builds a filter; name is MV_NAME (for the default event source).
func New(cfg Config, name string, log *zap.SugaredLogger) (*Filter, error) {
	if err := cfg.Validate(runner.RoleFilter); err != nil {
		return nil, err
	}
	if cfg.compiled == nil {
		return nil, fmt.Errorf("filter: neither MV_FILTER nor MV_FILTERS is set")
	}
	mapper, err := cewire.New(cfg.Config, name, log)
	if err != nil {
		return nil, err
	}
	return &Filter{match: cfg.compiled, mapper: mapper, after: cfg.Position == After}, nil
}

// After reports whether the filter stands after the other stages.
func (f *Filter) After() bool { return f.after }

// Match reports whether m goes on.
func (f *Filter) Match(m *runner.Message) (bool, error) {
	ev, err := f.mapper.ToEvent(m)
	if err != nil {
		return false, err
	}
	return f.match.eval(&ev) != fail, nil
}

// Transform passes on the messages that match and drops the others.
func (f *Filter) Transform(_ context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	results := make([]runner.TransformResult, len(msgs))
	for i, m := range msgs {
		ok, err := f.Match(m)
		switch {
		case err != nil:
			results[i].Err = runner.Permanent(fmt.Errorf("filter: message %q: %w", m.ID, err))
		case ok:
			results[i].Outputs = []*runner.Message{m}
		}
	}
	return results, nil
}

// Close does nothing: the filter holds no resources.
func (f *Filter) Close(context.Context) error { return nil }
