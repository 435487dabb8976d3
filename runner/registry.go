package runner

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Role says in which place of the pipeline an adapter is built, so that one
// sink kind can read different settings as primary and as fallback sink.
type Role string

// The roles an adapter can be built for.
const (
	RoleSource      Role = "source"
	RoleTransformer Role = "transformer"
	// RoleUDF is a map UDF stage after the source transformer (Numaflow's spec.udf).
	RoleUDF          Role = "udf"
	RoleSink         Role = "sink"
	RoleFallbackSink Role = "fallback-sink"
	// RoleOnSuccessSink is the sink written after a primary sink answered
	// ON_SUCCESS (Numaflow's spec.sink.onSuccess).
	RoleOnSuccessSink Role = "onsuccess-sink"
	// RoleFilter is the in-process filter stage (MV_FILTER), which is no
	// slot: its settings are read whatever the slots hold.
	RoleFilter Role = "filter"
)

// Env is what the runner hands an adapter constructor.
type Env struct {
	// Name and Replica identify this mono vertex (MV_NAME, MV_REPLICA).
	Name    string
	Replica int
	// Role is where the adapter sits.
	Role Role
	// Logger is the runner's structured logger, named for the adapter.
	Logger *zap.SugaredLogger
	// Mux serves $PORT, the port Knative routes and probes; adapters that
	// take HTTP traffic (the http source) mount their handlers on it.
	Mux *http.ServeMux
	// Metrics registers adapter-specific collectors beside the engine's.
	Metrics prometheus.Registerer
	// Concurrency is the most requests a stage may have in flight to its
	// container at once (MV_CONCURRENCY, else MV_READ_BATCH_SIZE), which is
	// what numaflow-core gives a transformer or a unary or stream map UDF.
	Concurrency int
	// Errors takes the runtime errors of the containers the adapter talks
	// to (Numaflow sidecars); the engine shows them on /status and the
	// status page. It may be nil (adapters built outside the runner).
	Errors ErrorReporter
	// Connection takes the adapter's reports of its connection to its
	// peer (monovtx_connection_*); never nil. For a Connector the engine
	// reports the Connect attempts, and the adapter what follows.
	Connection Connection
	// MessageIDs is how the engine forms message IDs (MV_MESSAGE_IDS).
	// Under NumaflowIDs a source gives each message as its ID the offset
	// string numaflow-core puts in its MessageID (see NumaflowIDs), and,
	// where numaflow-core derives the outputs from another, gives that
	// one as a NumaflowOffsetter; the engine names the message
	// <Name>-<offset>-0 while it holds it, and hands it to Ack and Nack
	// under the source's ID again.
	MessageIDs MessageIDs
}

// Plugin describes one adapter kind that configuration can select, the way
// a Caddy module declares its ID and constructor.
type Plugin[T any] struct {
	// Name is the value of MV_SOURCE, MV_TRANSFORMER or MV_SINK that selects it.
	Name string
	// Config returns a pointer to a fresh settings struct with envconfig tags
	// (full variable names, `default` and `desc` tags), or nil if the adapter
	// has no settings. If the struct implements Validator, Validate runs
	// after the environment was read.
	Config func() any
	// New builds the adapter from its processed settings. It waits for
	// no peer: an adapter that needs one implements Connector.
	New func(ctx context.Context, env Env, cfg any) (T, error)
}

// Validator is implemented by adapter settings that need checks beyond
// parsing, such as a URL required only for the chosen role.
type Validator interface {
	Validate(role Role) error
}

// ConfigError is a configuration value that cannot be used. The runner
// prints it as one line and exits with status 2.
type ConfigError struct {
	Var    string // the environment variable
	Value  string // the value found
	Reason string // what is allowed
}

// Error is the one line the runner prints before exiting with status 2.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid %s=%q: %s", e.Var, e.Value, e.Reason)
}

type registry[T any] struct {
	mu      sync.RWMutex
	plugins map[string]Plugin[T]
}

func (r *registry[T]) register(kind string, p Plugin[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plugins == nil {
		r.plugins = map[string]Plugin[T]{}
	}
	if _, dup := r.plugins[p.Name]; dup {
		panic(fmt.Sprintf("runner: %s plugin %q registered twice", kind, p.Name))
	}
	r.plugins[p.Name] = p
}

func (r *registry[T]) lookup(name string) (Plugin[T], bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.plugins[name]
	return p, ok
}

func (r *registry[T]) names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.plugins))
	for n := range r.plugins {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var (
	sources      registry[Source]
	transformers registry[Transformer]
	sinks        registry[Sink]
	filters      registry[Transformer]
)

var validatorType = reflect.TypeFor[Validator]()

// typed turns a constructor taking its own settings type into a Plugin.
// It panics at init, not at the first start of a runner, when C is not a
// struct or has a Validate method the runner would not call (a signature
// other than Validator's).
func typed[T, C any](kind, name string, build func(context.Context, Env, *C) (T, error)) Plugin[T] {
	ct := reflect.TypeFor[C]()
	if ct.Kind() != reflect.Struct {
		panic(fmt.Sprintf("runner: %s %q: settings type %s is not a struct", kind, name, ct))
	}
	pt := reflect.PointerTo(ct)
	if m, ok := pt.MethodByName("Validate"); ok && !pt.Implements(validatorType) {
		panic(fmt.Sprintf("runner: %s %q: %s.Validate has type %s; the runner calls only Validate(runner.Role) error", kind, name, ct, m.Type))
	}
	checkRoles(kind, name, ct)
	p := Plugin[T]{Name: name}
	if ct.NumField() > 0 {
		p.Config = func() any { return new(C) }
	}
	p.New = func(ctx context.Context, env Env, cfg any) (T, error) {
		var zero T
		c, ok := cfg.(*C)
		switch {
		case cfg == nil && p.Config == nil:
			c = new(C)
		case !ok:
			return zero, fmt.Errorf("runner: %s %q was given settings of type %T; want *%s", kind, name, cfg, ct)
		}
		v, err := build(ctx, env, c)
		if err != nil {
			// A typed nil in the interface would pass callers' nil checks.
			return zero, err
		}
		return v, nil
	}
	return p
}

var roleBlockType = reflect.TypeFor[RoleBlock]()

// checkRoles panics at init when settings type ct holds a Roles and is not
// a sink's (only sinks have roles), names a KIND other than the sink's
// name upper-cased (or none), or has a per-role field the rule of RoleVar
// cannot name: one without an envconfig suffix, or a nested struct.
func checkRoles(kind, name string, ct reflect.Type) {
	for i := range ct.NumField() {
		ft := ct.Field(i).Type
		if !reflect.PointerTo(ft).Implements(roleBlockType) {
			continue
		}
		if kind != "sink" {
			panic(fmt.Sprintf("runner: %s %q: settings %s hold per-role settings %s, which only a sink has", kind, name, ct, ft))
		}
		k, parts := reflect.New(ft).Interface().(RoleBlock).RoleParts()
		if k != "" && k != strings.ToUpper(name) {
			panic(fmt.Sprintf("runner: sink %q: %s.RoleKind is %q; want %q (or empty)", name, ft, k, strings.ToUpper(name)))
		}
		pt := reflect.TypeOf(parts[0].Settings).Elem()
		for j := range pt.NumField() {
			if f := pt.Field(j); f.Tag.Get("envconfig") == "" || f.Type.Kind() == reflect.Struct {
				panic(fmt.Sprintf("runner: sink %q: per-role field %s.%s needs an envconfig suffix and must not be a struct", name, pt, f.Name))
			}
		}
	}
}

// RegisterSource makes a source kind selectable with MV_SOURCE. Call it
// from init. C is the kind's settings struct (envconfig tags with full
// variable names, `default` and `desc`; struct{} for none); the runner reads
// it once, runs its Validate if it is a Validator, and hands it to build.
func RegisterSource[C any](name string, build func(ctx context.Context, env Env, cfg *C) (Source, error)) {
	sources.register("source", typed("source", name, build))
}

// RegisterTransformer makes a transformer kind selectable with
// MV_TRANSFORMER or MV_UDF. Call it from init; C as for RegisterSource.
func RegisterTransformer[C any](name string, build func(ctx context.Context, env Env, cfg *C) (Transformer, error)) {
	transformers.register("transformer", typed("transformer", name, build))
}

// RegisterSink makes a sink kind selectable with MV_SINK, MV_FALLBACK_SINK
// and MV_ON_SUCCESS_SINK. Call it from init; C as for RegisterSource. The
// settings that differ by role go in a Roles embedded in C, declared once:
// the runner derives the fallback's and onSuccess sink's variables.
func RegisterSink[C any](name string, build func(ctx context.Context, env Env, cfg *C) (Sink, error)) {
	sinks.register("sink", typed("sink", name, build))
}

// RegisterFilter makes an in-process filter kind available. Unlike the
// other kinds no variable selects it: the runner reads its settings
// always, and build returns a nil Transformer when they ask for no
// filter. The runner places it as a RoleFilter stage. C as for RegisterSource.
func RegisterFilter[C any](name string, build func(ctx context.Context, env Env, cfg *C) (Transformer, error)) {
	filters.register("filter", typed("filter", name, build))
}

// Slot is one place in the pipeline that an adapter fills, and the
// variable that picks its kind. The runner's settings, start-up and help all
// walk Slots, so a place is described once.
type Slot struct {
	Role Role
	// Var is the variable naming the kind (MV_SOURCE, ...).
	Var string
	// Title is how logs and errors name the place ("fallback sink").
	Title string
	// Optional places may be "none".
	Optional bool
}

// Slots lists the pipeline's places in Numaflow's order: source, source
// transformer, map UDF, then the sink tiers.
var Slots = []Slot{
	{RoleSource, "MV_SOURCE", "source", false},
	{RoleTransformer, "MV_TRANSFORMER", "transformer", true},
	{RoleUDF, "MV_UDF", "map UDF", true},
	{RoleSink, "MV_SINK", "sink", false},
	{RoleFallbackSink, "MV_FALLBACK_SINK", "fallback sink", true},
	{RoleOnSuccessSink, "MV_ON_SUCCESS_SINK", "onSuccess sink", true},
}

// Kind is a registered adapter kind seen from start-up, whatever its role:
// the runner reads its settings and builds it without knowing its type.
type Kind struct {
	// Category is source, transformer or sink.
	Category string
	Name     string
	Config   func() any
	New      func(ctx context.Context, env Env, cfg any) (any, error)
}

func erase[T any](category string, p Plugin[T], ok bool) (Kind, bool) {
	if !ok {
		return Kind{}, false
	}
	return Kind{Category: category, Name: p.Name, Config: p.Config, New: func(ctx context.Context, env Env, cfg any) (any, error) {
		v, err := p.New(ctx, env, cfg)
		if err != nil {
			return nil, err
		}
		return v, nil
	}}, true
}

// LookupKind finds the kind name among the adapters that can fill role.
func LookupKind(role Role, name string) (Kind, bool) {
	switch role {
	case RoleSource:
		p, ok := sources.lookup(name)
		return erase("source", p, ok)
	case RoleTransformer, RoleUDF:
		p, ok := transformers.lookup(name)
		return erase("transformer", p, ok)
	case RoleFilter:
		p, ok := filters.lookup(name)
		return erase("filter", p, ok)
	default:
		p, ok := sinks.lookup(name)
		return erase("sink", p, ok)
	}
}

// KindNames lists, sorted, the kinds that can fill role.
func KindNames(role Role) []string {
	switch role {
	case RoleSource:
		return sources.names()
	case RoleTransformer, RoleUDF:
		return transformers.names()
	case RoleFilter:
		return filters.names()
	default:
		return sinks.names()
	}
}

// AllKinds lists every registered kind once, sources first, for help texts
// and for the list of known variables.
func AllKinds() []Kind {
	var out []Kind
	for _, role := range []Role{RoleSource, RoleFilter, RoleTransformer, RoleSink} {
		for _, n := range KindNames(role) {
			k, _ := LookupKind(role, n)
			out = append(out, k)
		}
	}
	return out
}

// Roles holds the settings of a sink kind that differ by the place the
// sink fills: T once for the sink, once for the fallback sink and once for
// the onSuccess sink. A sink's settings struct embeds it and declares T's
// fields once, named by their suffix (envconfig:"TOPIC"); the runner reads
// each part under the names RoleVar derives, so no sink spells out its
// fallback and onSuccess variables. A default tag applies to the sink's
// variable only: the other roles' are zero when unset, and the sink takes
// the sink's value where it means to (Inherit).
type Roles[T RoleTarget] struct {
	Sink      T
	Fallback  T
	OnSuccess T
}

// RoleTarget is the per-role part of a sink's settings: a flat struct whose
// RoleKind is the KIND segment of its variables' names (RoleVar).
type RoleTarget interface {
	RoleKind() string
}

// RoleBlock is how the settings reader sees a Roles: the kind segment and
// a pointer to each role's part, in the order of Slots.
type RoleBlock interface {
	RoleParts() (kind string, parts []RolePart)
}

// RolePart is one role's part of a Roles.
type RolePart struct {
	Role Role
	// Settings points to the role's T.
	Settings any
}

// RoleParts lists the parts, sink first.
func (r *Roles[T]) RoleParts() (string, []RolePart) {
	var zero T
	return zero.RoleKind(), []RolePart{{RoleSink, &r.Sink}, {RoleFallbackSink, &r.Fallback}, {RoleOnSuccessSink, &r.OnSuccess}}
}

// Of is role's part.
func (r *Roles[T]) Of(role Role) *T {
	switch role {
	case RoleFallbackSink:
		return &r.Fallback
	case RoleOnSuccessSink:
		return &r.OnSuccess
	}
	return &r.Sink
}

// Var names the variable that sets field, a pointer to a field of one of
// the parts: Var(&c.Fallback.Topic) is MV_FALLBACK_KAFKA_TOPIC.
func (r *Roles[T]) Var(field any) string {
	p := reflect.ValueOf(field).Pointer()
	kind, parts := r.RoleParts()
	for _, part := range parts {
		v := reflect.ValueOf(part.Settings).Elem()
		base := v.Addr().Pointer()
		if p < base || p >= base+v.Type().Size() {
			continue
		}
		for i := range v.NumField() {
			if sf := v.Type().Field(i); base+sf.Offset == p && reflect.TypeOf(field).Elem() == sf.Type {
				return RoleVar(part.Role, kind, sf)
			}
		}
	}
	panic(fmt.Sprintf("runner: Roles.Var: %T does not point to a field of a role's settings", field))
}

// Inherit returns role's value of a string setting, or, where the fallback
// or onSuccess sink sets none, the sink's, with the variable it came from
// (the sink's when neither is set).
func (r *Roles[T]) Inherit(role Role, field func(*T) *string) (value, variable string) {
	if own := field(r.Of(role)); *own != "" {
		return *own, r.Var(own)
	}
	sink := field(&r.Sink)
	return *sink, r.Var(sink)
}

// RoleVar is the one rule naming a per-role setting (f, a field of a
// RoleTarget whose envconfig tag is the suffix SUFFIX) for role:
// MV_<KIND>_SINK_<SUFFIX> for the sink, unless f's sink tag names the
// variable it has always had (K_SINK); MV_FALLBACK_<KIND>_<SUFFIX> for the
// fallback sink and MV_ON_SUCCESS_<KIND>_<SUFFIX> for the onSuccess sink.
// An empty kind drops its segment (MV_FALLBACK_SINK_URL).
func RoleVar(role Role, kind string, f reflect.StructField) string {
	suffix := f.Tag.Get("envconfig")
	if kind != "" {
		kind += "_"
	}
	switch role {
	case RoleFallbackSink:
		return "MV_FALLBACK_" + kind + suffix
	case RoleOnSuccessSink:
		return "MV_ON_SUCCESS_" + kind + suffix
	}
	if name := f.Tag.Get("sink"); name != "" {
		return name
	}
	return "MV_" + kind + "SINK_" + suffix
}
