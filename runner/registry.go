package runner

import (
	"context"
	"fmt"
	"net/http"
	"sort"
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
	// New builds the adapter from its processed settings.
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
)

// RegisterSource makes a source kind selectable with MV_SOURCE. Call it from init.
func RegisterSource(p Plugin[Source]) { sources.register("source", p) }

// RegisterTransformer makes a transformer kind selectable with MV_TRANSFORMER. Call it from init.
func RegisterTransformer(p Plugin[Transformer]) { transformers.register("transformer", p) }

// RegisterSink makes a sink kind selectable with MV_SINK and MV_FALLBACK_SINK. Call it from init.
func RegisterSink(p Plugin[Sink]) { sinks.register("sink", p) }

// LookupSource finds a registered source kind.
func LookupSource(name string) (Plugin[Source], bool) { return sources.lookup(name) }

// LookupTransformer finds a registered transformer kind.
func LookupTransformer(name string) (Plugin[Transformer], bool) { return transformers.lookup(name) }

// LookupSink finds a registered sink kind.
func LookupSink(name string) (Plugin[Sink], bool) { return sinks.lookup(name) }

// SourceNames lists the registered source kinds, sorted.
func SourceNames() []string { return sources.names() }

// TransformerNames lists the registered transformer kinds, sorted.
func TransformerNames() []string { return transformers.names() }

// SinkNames lists the registered sink kinds, sorted.
func SinkNames() []string { return sinks.names() }
