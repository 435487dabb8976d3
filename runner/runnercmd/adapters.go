package runnercmd

import (
	"context"
	"fmt"
	"time"

	"github.com/monovertex/monovertex/config"
	"github.com/monovertex/monovertex/runner"
)

// built holds the adapters by the place they fill; a place set to none has
// no entry.
type built map[runner.Role]any

func (b built) source() runner.Source { s, _ := b[runner.RoleSource].(runner.Source); return s }
func (b built) sink(role runner.Role) runner.Sink {
	s, _ := b[role].(runner.Sink)
	return s
}
func (b built) transformer(role runner.Role) runner.Transformer {
	t, _ := b[role].(runner.Transformer)
	return t
}

// pipeline is the engine's view of what was built: the chain of stages in
// Numaflow's order (source transformer, then map UDF) and the sink tiers.
func (b built) pipeline(cfg *config.Config) runner.Pipeline {
	p := runner.Pipeline{Source: b.source(), Sink: b.sink(runner.RoleSink), Fallback: b.sink(runner.RoleFallbackSink),
		OnSuccess: b.sink(runner.RoleOnSuccessSink), Bypass: cfg.Bypass}
	for _, st := range []struct {
		role runner.Role
		kind string
	}{{runner.RoleTransformer, cfg.Transformer}, {runner.RoleUDF, cfg.UDF}} {
		if t := b.transformer(st.role); t != nil {
			// Validate parsed it already: no error here.
			retry, _ := cfg.StageRetry(st.role)
			p.Stages = append(p.Stages, runner.Stage{Kind: st.kind, Role: st.role, Transformer: t, Retry: retry})
		}
	}
	if f := b.transformer(runner.RoleFilter); f != nil {
		st := runner.Stage{Kind: cfg.FilterKind, Role: runner.RoleFilter, Transformer: f}
		if a, ok := f.(runner.FilterPlacement); ok && a.After() {
			p.Stages = append(p.Stages, st)
		} else {
			p.Stages = append([]runner.Stage{st}, p.Stages...)
		}
	}
	p.Kinds.Source, p.Kinds.Sink = cfg.Source, cfg.Sink
	if p.Fallback != nil {
		p.Kinds.Fallback = cfg.FallbackSink
	}
	if p.OnSuccess != nil {
		p.Kinds.OnSuccess = cfg.OnSuccessSink
	}
	return p
}

func (b built) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, slot := range runner.Slots {
		if c, ok := b[slot.Role].(interface{ Close(context.Context) error }); ok {
			c.Close(ctx)
		}
	}
	if c, ok := b[runner.RoleFilter].(interface{ Close(context.Context) error }); ok {
		c.Close(ctx)
	}
}

// build constructs the chosen adapters in the order of runner.Slots;
// config.Load has checked that every chosen kind is registered and read
// its settings.
func build(ctx context.Context, cfg *config.Config, env func(runner.Role) runner.Env) (built, error) {
	b := built{}
	for _, slot := range runner.Slots {
		settings, chosen := cfg.Settings[slot.Role]
		if !chosen {
			continue
		}
		kind := cfg.Kind(slot)
		k, _ := runner.LookupKind(slot.Role, kind)
		a, err := k.New(ctx, env(slot.Role), settings)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("%s %s: %w", slot.Title, kind, err)
		}
		b[slot.Role] = a
	}
	if settings, ok := cfg.Settings[runner.RoleFilter]; ok {
		k, _ := runner.LookupKind(runner.RoleFilter, cfg.FilterKind)
		a, err := k.New(ctx, env(runner.RoleFilter), settings)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("filter %s: %w", cfg.FilterKind, err)
		}
		if a != nil {
			b[runner.RoleFilter] = a
		}
	}
	return b, nil
}
