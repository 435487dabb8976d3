// Package config reads the runner's settings from the environment (the
// contract docs/configuration.md lists), validates them in one place, and
// prints --help from the same structs.
package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/monovertex/monovertex/internal/textdist"
	"github.com/monovertex/monovertex/runner"
)

// Core holds the settings of the runner itself.
type Core struct {
	Name            string        `envconfig:"MV_NAME" default:"local" desc:"name of this mono vertex (metric label mvtx_name); when unset, NAME where Knative sets it"`
	Replica         int           `envconfig:"MV_REPLICA" default:"0" desc:"replica index (metric label mvtx_replica)"`
	Source          string        `envconfig:"MV_SOURCE" default:"generator" desc:"source kind"`
	Transformer     string        `envconfig:"MV_TRANSFORMER" default:"none" desc:"source transformer kind (Numaflow's source.transformer), or none"`
	UDF             string        `envconfig:"MV_UDF" default:"none" desc:"map UDF stage after the transformer (Numaflow's spec.udf): udmap, or none"`
	Sink            string        `envconfig:"MV_SINK" default:"log" desc:"sink kind"`
	FallbackSink    string        `envconfig:"MV_FALLBACK_SINK" default:"none" desc:"fallback sink kind, or none"`
	OnSuccessSink   string        `envconfig:"MV_ON_SUCCESS_SINK" default:"none" desc:"onSuccess sink kind, written after the sink answers ON_SUCCESS (Numaflow's sink.onSuccess), or none"`
	BypassSink      string        `envconfig:"MV_BYPASS_SINK" desc:"bypass condition of the sink (Numaflow's spec.bypass.sink): operator:tag,tag with operator or, and or not; when set, what matches no condition is dropped at the sink"`
	BypassFallback  string        `envconfig:"MV_BYPASS_FALLBACK" desc:"bypass condition of the fallback sink, operator:tag,tag"`
	BypassOnSuccess string        `envconfig:"MV_BYPASS_ON_SUCCESS" desc:"bypass condition of the onSuccess sink, operator:tag,tag"`
	ReadBatchSize   int           `envconfig:"MV_READ_BATCH_SIZE" default:"500" desc:"messages per read"`
	ReadTimeout     time.Duration `envconfig:"MV_READ_TIMEOUT" default:"1s" desc:"longest wait for a batch to fill"`
	InflightBatches int           `envconfig:"MV_INFLIGHT_BATCHES" default:"4" desc:"read batches being transformed, written or acked at once (batch mode)"`
	Streaming       bool          `envconfig:"MV_STREAMING" default:"false" desc:"streaming mode (Numaflow's spec.streaming): per-message acks, reading again as soon as any message is settled, bounded by MV_CONCURRENCY"`
	Ordering        string        `envconfig:"MV_ORDERING" default:"unordered" desc:"which messages reach the transformer and the sink one at a time in read order: unordered (batches overlap freely), partition (each source partition, as Knative's KafkaSource ordered; a source without partitions is one lane) or key (each key of a partition, different keys in parallel); see docs/delivery.md"`
	Concurrency     int           `envconfig:"MV_CONCURRENCY" default:"0" desc:"Numaflow's spec.limits.concurrency: most messages read but not yet acked in streaming mode, and most requests in flight to a transformer or map container in either mode; 0 means MV_READ_BATCH_SIZE"`
	// Retry is embedded, not nested under a prefix: envconfig would also
	// read a nested field's bare name (STEPS for MV_RETRY_STEPS) from the
	// environment, where any other program's variable could set it.
	Retry
	// RateLimit is embedded for the same reason as Retry.
	RateLimit
	// StageRetries is embedded for the same reason as Retry.
	StageRetries
	OnFailure         string        `envconfig:"MV_ON_FAILURE" default:"retry" desc:"after the retry steps are spent: retry, fallback or drop"`
	ShutdownTimeout   time.Duration `envconfig:"MV_SHUTDOWN_TIMEOUT" default:"20s" desc:"graceful shutdown budget"`
	AdminPort         int           `envconfig:"MV_ADMIN_PORT" default:"2469" desc:"port of /metrics, /livez, /readyz, /status"`
	Port              int           `envconfig:"PORT" default:"8080" desc:"Knative's serving port: /healthz, and the http source"`
	DaemonPort        int           `envconfig:"MV_DAEMON_PORT" default:"0" desc:"port of Numaflow's MonoVertex daemon API (gRPC MonoVertexDaemonService and its REST paths, over TLS with a self-signed certificate, as Numaflow's daemon serves them on 4327), 0 for off"`
	PendingInterval   time.Duration `envconfig:"MV_PENDING_INTERVAL" default:"5s" desc:"how often the source's pending count is read"`
	LookbackSeconds   int           `envconfig:"MV_LOOKBACK_SECONDS" default:"120" desc:"window of the processing rate used for scaling (at most 900)"`
	ScaleTarget       float64       `envconfig:"MV_SCALE_TARGET_SECONDS" default:"20" desc:"backlog drain time the scaling signals aim at (Numaflow's targetProcessingSeconds)"`
	MinScale          int           `envconfig:"MV_MIN_SCALE" default:"1" desc:"lower bound of monovtx_desired_replicas; keep equal to autoscaling.knative.dev/min-scale"`
	MaxScale          int           `envconfig:"MV_MAX_SCALE" default:"0" desc:"upper bound of monovtx_desired_replicas, 0 for none; keep equal to autoscaling.knative.dev/max-scale"`
	ScaleUpCooldown   int           `envconfig:"MV_SCALE_UP_COOLDOWN_SECONDS" default:"90" desc:"seconds after a change of monovtx_desired_replicas before it may rise again (Numaflow's scale.scaleUpCooldownSeconds)"`
	ScaleDownCooldown int           `envconfig:"MV_SCALE_DOWN_COOLDOWN_SECONDS" default:"90" desc:"seconds after a change of monovtx_desired_replicas before it may fall again (scale.scaleDownCooldownSeconds)"`
	ReplicasPerUp     int           `envconfig:"MV_SCALE_REPLICAS_PER_UP" default:"2" desc:"most replicas one rise of monovtx_desired_replicas adds (scale.replicasPerScaleUp)"`
	ReplicasPerDown   int           `envconfig:"MV_SCALE_REPLICAS_PER_DOWN" default:"2" desc:"most replicas one fall of monovtx_desired_replicas removes (scale.replicasPerScaleDown)"`
	LogLevel          string        `envconfig:"MV_LOG_LEVEL" default:"info" desc:"debug, info, warn or error; when unset, the level K_LOGGING_CONFIG gives"`
	PProf             bool          `envconfig:"MV_PPROF" default:"false" desc:"serve /debug/pprof on the admin port"`
	ConfigDir         string        `envconfig:"MV_CONFIG_DIR" desc:"mounted ConfigMap folder; a key paused: \"true\" stops reading until it changes"`
	ConfigPoll        time.Duration `envconfig:"MV_CONFIG_POLL" default:"1s" desc:"how often MV_CONFIG_DIR is read"`
	MessageIDs        string        `envconfig:"MV_MESSAGE_IDS" default:"source" desc:"message IDs sinks see: source (the source's own, -k for each of several outputs) or numaflow (Numaflow's <MV_NAME>-<offset>-<index>)"`
	Strict            bool          `envconfig:"MV_STRICT" default:"true" desc:"an MV_ variable the runner does not know (a typo) exits 2; false only warns"`
	// Knative holds what Knative's controllers inject into an adapter
	// (knative.dev/eventing pkg/adapter/v2/config.go EnvConfig); embedded
	// for the same reason as Retry.
	Knative
}

// Knative holds the variables Knative's controllers set for an adapter
// that name it and set its log level; see knativeDefaults.
type Knative struct {
	KnativeName   string `envconfig:"NAME" desc:"the adapter's name as Knative's source controllers set it: MV_NAME when that is not set"`
	LoggingConfig string `envconfig:"K_LOGGING_CONFIG" desc:"Knative's config-logging ConfigMap as JSON: loglevel.<K_COMPONENT>, else zap-logger-config's level, is the log level when MV_LOG_LEVEL is not set"`
	Component     string `envconfig:"K_COMPONENT" default:"monovertex" desc:"component name whose loglevel.<name> key of K_LOGGING_CONFIG applies"`
}

// Retry holds the sink and transformer retry strategy.
type Retry struct {
	Interval time.Duration `envconfig:"MV_RETRY_INTERVAL" default:"1ms" desc:"wait before the first retry"`
	Steps    string        `envconfig:"MV_RETRY_STEPS" default:"unlimited" desc:"retries before MV_ON_FAILURE decides: a positive number or unlimited"`
	// StageSteps: see Config.StageSteps.
	StageSteps string        `envconfig:"MV_STAGE_RETRY_STEPS" desc:"retries of a failing transformer or map UDF before MV_ON_FAILURE decides: a positive number or unlimited; empty takes MV_RETRY_STEPS"`
	Factor     float64       `envconfig:"MV_RETRY_FACTOR" default:"1.0" desc:"backoff multiplier per retry (1 keeps the interval)"`
	Cap        time.Duration `envconfig:"MV_RETRY_CAP" default:"0" desc:"longest wait between retries, 0 for no cap"`
	Jitter     float64       `envconfig:"MV_RETRY_JITTER" default:"0" desc:"random extra fraction of each wait, 0 to 1"`
}

// RateLimit holds Numaflow's limits.rateLimit: the read rate limit.
type RateLimit struct {
	Max             int           `envconfig:"MV_RATE_LIMIT_MAX" default:"0" desc:"most messages read per second (Numaflow's limits.rateLimit.max), counted as Numaflow does: read calls per second times MV_READ_BATCH_SIZE; shared by all replicas with MV_RATE_LIMIT_STORE=redis, per replica otherwise; 0 for no limit"`
	Min             int           `envconfig:"MV_RATE_LIMIT_MIN" default:"1" desc:"messages per second at the start of the ramp-up (rateLimit.min)"`
	RampUp          time.Duration `envconfig:"MV_RATE_LIMIT_RAMP_UP" default:"1s" desc:"time to ramp from MV_RATE_LIMIT_MIN to MV_RATE_LIMIT_MAX (rateLimit.rampUpDuration)"`
	Mode            string        `envconfig:"MV_RATE_LIMIT_MODE" default:"relaxed" desc:"ramp-up mode (rateLimit.modes): scheduled, relaxed, onlyIfUsed or goBackN"`
	Threshold       int           `envconfig:"MV_RATE_LIMIT_THRESHOLD_PERCENT" default:"50" desc:"onlyIfUsed and goBackN: percent of the last second's tokens that must be used before the limit grows"`
	Cooldown        time.Duration `envconfig:"MV_RATE_LIMIT_COOLDOWN" default:"5s" desc:"goBackN: a gap between reads longer than this shrinks the limit"`
	RampDownPercent int           `envconfig:"MV_RATE_LIMIT_RAMP_DOWN_PERCENT" default:"50" desc:"goBackN: percent of the ramp-up slope the limit shrinks by per second of a gap"`
	ResumedRampUp   bool          `envconfig:"MV_RATE_LIMIT_RESUMED_RAMP_UP" default:"false" desc:"a replica back within MV_RATE_LIMIT_TTL starts where it left off instead of at the minimum (rateLimit.resumedRampUp; needs the redis store)"`
	TTL             time.Duration `envconfig:"MV_RATE_LIMIT_TTL" default:"180s" desc:"a replica silent this long leaves the shared pool; also the resumed ramp-up's window (rateLimit.ttl)"`
	Store           string        `envconfig:"MV_RATE_LIMIT_STORE" default:"memory" desc:"memory (each replica has the whole limit) or redis (the replicas share it; rateLimit.store.redisStore)"`
	RedisURL        string        `envconfig:"MV_RATE_LIMIT_REDIS_URL" desc:"the redis store's server in single mode: redis://host:6379/0 or rediss://..."`
}

// Config is everything the runner reads from the environment.
type Config struct {
	Core
	// Tracing is the OpenTelemetry settings (OTEL_* variables).
	Tracing Tracing
	// Settings holds the chosen adapters' settings, as their kinds declared
	// them, by the place they fill; a place set to none has no entry.
	Settings map[runner.Role]any
	// Bypass holds the parsed MV_BYPASS_* conditions.
	Bypass runner.Bypass
	// FilterKind is the registered filter kind whose settings are in
	// Settings[runner.RoleFilter]; empty when none is built in.
	FilterKind string
	// Steps is Retry.Steps parsed; 0 means unlimited.
	Steps int
	// StageSteps is Retry.StageSteps parsed: 0 takes Steps, -1 unlimited.
	StageSteps int
}

// None is the value of an optional place (MV_TRANSFORMER, MV_UDF,
// MV_FALLBACK_SINK, MV_ON_SUCCESS_SINK) that selects nothing.
const None = "none"

// Kind is the kind chosen for slot: the Core field read from slot.Var.
func (c *Core) Kind(slot runner.Slot) string {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("envconfig") == slot.Var {
			return v.Field(i).String()
		}
	}
	// Slots and Core are written together; a slot without its field is a
	// programming error, caught by the config tests.
	panic("config: no Core field reads " + slot.Var)
}

// Load reads and validates the environment. Every error it returns is a
// *runner.ConfigError naming one variable.
func Load() (*Config, error) {
	return LoadWarn(func(msg string) { fmt.Fprintln(os.Stderr, "runner: warning: "+msg) })
}

// LoadWarn is Load with the warnings (an unknown variable under
// MV_STRICT=false) sent to warn.
func LoadWarn(warn func(string)) (*Config, error) { return load(osEnv(), warn) }

// LoadEnv reads and validates vars as the runner would if they were its
// whole environment, with the same code as Load: mvctl checks with it
// that the runner takes every value it emits. Warnings are dropped.
func LoadEnv(vars map[string]string) (*Config, error) { return load(mapEnv(vars), func(string) {}) }

func load(e env, warn func(string)) (*Config, error) {
	c := &Config{}
	if err := process(e, &c.Core); err != nil {
		return nil, err
	}
	if err := c.knativeDefaults(e); err != nil {
		return nil, err
	}
	if err := c.validateCore(); err != nil {
		return nil, err
	}
	if err := process(e, &c.Tracing); err != nil {
		return nil, err
	}
	if err := c.Tracing.Validate(); err != nil {
		return nil, err
	}
	if err := checkUnknown(e, c.Strict, warn); err != nil {
		return nil, err
	}
	c.Settings = map[runner.Role]any{}
	for _, slot := range runner.Slots {
		kind := c.Kind(slot)
		if slot.Optional && kind == None {
			continue
		}
		k, ok := runner.LookupKind(slot.Role, kind)
		if !ok {
			return nil, unknownKind(slot.Var, kind, slotKinds(slot), slot.Optional)
		}
		cfg, err := loadPlugin(e, k.Config, slot.Role)
		if err != nil {
			return nil, err
		}
		c.Settings[slot.Role] = cfg
	}
	// The filter is chosen by its own settings (MV_FILTER), not by a
	// slot's variable, so they are read whenever a filter kind is built in.
	for _, name := range runner.KindNames(runner.RoleFilter) {
		k, _ := runner.LookupKind(runner.RoleFilter, name)
		cfg, err := loadPlugin(e, k.Config, runner.RoleFilter)
		if err != nil {
			return nil, err
		}
		c.Settings[runner.RoleFilter] = cfg
		c.FilterKind = name
	}
	return c, nil
}

func process(e env, spec any) error {
	if err := checkSyntax(e, spec); err != nil {
		return err
	}
	return decode(e, spec)
}

func typeWord(t string) string {
	switch strings.TrimPrefix(t, "*") {
	case "time.Duration", "Duration":
		return "a duration such as 500ms, 1s or 2m, or ISO 8601 such as PT0.5S"
	case "int", "int64", "int32", "uint", "uint64":
		return "a whole number"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "true or false"
	}
	return "of type " + t
}

func loadPlugin(e env, newConfig func() any, role runner.Role) (any, error) {
	if newConfig == nil {
		return nil, nil
	}
	cfg := newConfig()
	if err := process(e, cfg); err != nil {
		return nil, err
	}
	if v, ok := cfg.(runner.Validator); ok {
		if err := v.Validate(role); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func unknownKind(variable, value string, names []string, allowNone bool) error {
	if allowNone {
		names = append([]string{None}, names...)
	}
	return &runner.ConfigError{Var: variable, Value: value, Reason: "must be one of " + strings.Join(names, ", ")}
}

// Upper bounds of the runner's counts: a batch, the batches and the
// messages in flight size the memory a runner needs, so a typo past these
// would take the pod down rather than tune it.
const (
	maxBatchSize       = 100_000
	maxInflightBatches = 256
	maxConcurrency     = 1_000_000
	maxNameLen         = 253 // a Kubernetes object name
)

// validateCore checks the runner's own settings, concern by concern, and
// derives the parsed forms (retry steps, bypass conditions) from them.
func (c *Config) validateCore() error {
	for _, check := range []func() error{
		c.validatePipeline, c.validateRetryPolicy, c.validateServing, c.validateScaling,
		c.RateLimit.validate, c.validateRouting, c.validateLogLevel, c.parseRetrySteps,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validatePipeline checks the name, message IDs, the read batch and what
// may be in flight, and the stage kinds' places.
func (c *Config) validatePipeline() error {
	itoa := strconv.Itoa
	switch {
	case c.Name == "":
		return &runner.ConfigError{Var: "MV_NAME", Value: c.Name, Reason: "must not be empty"}
	case !utf8.ValidString(c.Name) || strings.ContainsFunc(c.Name, unicode.IsControl) || len(c.Name) > maxNameLen:
		// It labels every metric; Prometheus refuses label values that are
		// not UTF-8.
		return &runner.ConfigError{Var: "MV_NAME", Value: c.Name, Reason: "must be printable UTF-8 text of at most 253 bytes"}
	case c.MessageIDs != string(runner.SourceIDs) && c.MessageIDs != string(runner.NumaflowIDs):
		return &runner.ConfigError{Var: "MV_MESSAGE_IDS", Value: c.MessageIDs, Reason: "must be source or numaflow"}
	case c.Replica < 0:
		return &runner.ConfigError{Var: "MV_REPLICA", Value: itoa(c.Replica), Reason: "must be 0 or more"}
	case c.ReadBatchSize <= 0 || c.ReadBatchSize > maxBatchSize:
		return &runner.ConfigError{Var: "MV_READ_BATCH_SIZE", Value: itoa(c.ReadBatchSize), Reason: "must be a positive whole number, at most " + itoa(maxBatchSize)}
	case c.ReadTimeout <= 0:
		return &runner.ConfigError{Var: "MV_READ_TIMEOUT", Value: c.ReadTimeout.String(), Reason: "must be a positive duration such as 1s"}
	case !runner.Ordering(c.Ordering).Valid():
		return &runner.ConfigError{Var: "MV_ORDERING", Value: c.Ordering, Reason: "must be unordered, partition or key"}
	case c.Concurrency < 0 || c.Concurrency > maxConcurrency:
		return &runner.ConfigError{Var: "MV_CONCURRENCY", Value: itoa(c.Concurrency), Reason: "must be 0 (the read batch size) or a positive whole number, at most " + itoa(maxConcurrency)}
	case c.Transformer == misplaced[runner.RoleTransformer]:
		return &runner.ConfigError{Var: "MV_TRANSFORMER", Value: c.Transformer, Reason: "udmap is a map UDF, not a source transformer: set MV_UDF=udmap"}
	case c.UDF == misplaced[runner.RoleUDF]:
		return &runner.ConfigError{Var: "MV_UDF", Value: c.UDF, Reason: "udtransformer is a source transformer: set MV_TRANSFORMER=udtransformer, and MV_UDF to a map UDF (udmap) or none"}
	case c.UDF != None && c.UDF == c.Transformer:
		return &runner.ConfigError{Var: "MV_UDF", Value: c.UDF, Reason: "is already the transformer (MV_TRANSFORMER); one adapter of a kind per pipeline"}
	case c.InflightBatches <= 0 || c.InflightBatches > maxInflightBatches:
		return &runner.ConfigError{Var: "MV_INFLIGHT_BATCHES", Value: itoa(c.InflightBatches), Reason: "must be a positive whole number, at most " + itoa(maxInflightBatches)}
	}
	return nil
}

// validateRetryPolicy checks the sink retry backoff (MV_RETRY_*).
func (c *Config) validateRetryPolicy() error {
	switch {
	case c.Retry.Interval <= 0:
		return &runner.ConfigError{Var: "MV_RETRY_INTERVAL", Value: c.Retry.Interval.String(), Reason: "must be a positive duration such as 1ms"}
	case c.Retry.Factor < 1:
		return &runner.ConfigError{Var: "MV_RETRY_FACTOR", Value: fmt.Sprint(c.Retry.Factor), Reason: "must be 1 or more"}
	case c.Retry.Cap < 0:
		return &runner.ConfigError{Var: "MV_RETRY_CAP", Value: c.Retry.Cap.String(), Reason: "must be 0 (no cap) or a positive duration"}
	case c.Retry.Jitter < 0 || c.Retry.Jitter > 1:
		return &runner.ConfigError{Var: "MV_RETRY_JITTER", Value: fmt.Sprint(c.Retry.Jitter), Reason: "must be between 0 and 1"}
	}
	return nil
}

// validateServing checks the shutdown budget and the ports the process
// serves on, which must differ from each other and from Knative's.
func (c *Config) validateServing() error {
	itoa := strconv.Itoa
	switch {
	case c.ShutdownTimeout <= 0:
		return &runner.ConfigError{Var: "MV_SHUTDOWN_TIMEOUT", Value: c.ShutdownTimeout.String(), Reason: "must be a positive duration such as 20s"}
	case c.AdminPort < 1 || c.AdminPort > 65535:
		return &runner.ConfigError{Var: "MV_ADMIN_PORT", Value: itoa(c.AdminPort), Reason: "must be a port between 1 and 65535"}
	case c.Port < 1 || c.Port > 65535:
		return &runner.ConfigError{Var: "PORT", Value: itoa(c.Port), Reason: "must be a port between 1 and 65535"}
	case c.AdminPort == c.Port:
		return &runner.ConfigError{Var: "MV_ADMIN_PORT", Value: itoa(c.AdminPort), Reason: "must differ from PORT"}
	case c.AdminPort == 9090 || c.AdminPort == 9091:
		return &runner.ConfigError{Var: "MV_ADMIN_PORT", Value: itoa(c.AdminPort), Reason: "9090 and 9091 are reserved by Knative's queue-proxy; pick another port"}
	case c.DaemonPort < 0 || c.DaemonPort > 65535:
		return &runner.ConfigError{Var: "MV_DAEMON_PORT", Value: itoa(c.DaemonPort), Reason: "must be 0 (off) or a port between 1 and 65535"}
	case c.DaemonPort != 0 && (c.DaemonPort == c.Port || c.DaemonPort == c.AdminPort):
		return &runner.ConfigError{Var: "MV_DAEMON_PORT", Value: itoa(c.DaemonPort), Reason: "must differ from PORT and MV_ADMIN_PORT"}
	case c.DaemonPort == 9090 || c.DaemonPort == 9091:
		return &runner.ConfigError{Var: "MV_DAEMON_PORT", Value: itoa(c.DaemonPort), Reason: "9090 and 9091 are reserved by Knative's queue-proxy; pick another port"}
	}
	return nil
}

// validateScaling checks the pending poll, the replica recommendation's
// bounds and targets, and the config poll.
func (c *Config) validateScaling() error {
	itoa := strconv.Itoa
	switch {
	case c.PendingInterval <= 0:
		return &runner.ConfigError{Var: "MV_PENDING_INTERVAL", Value: c.PendingInterval.String(), Reason: "must be a positive duration"}
	case c.ScaleTarget <= 0:
		return &runner.ConfigError{Var: "MV_SCALE_TARGET_SECONDS", Value: fmt.Sprint(c.ScaleTarget), Reason: "must be a positive number of seconds"}
	case c.MinScale < 0:
		return &runner.ConfigError{Var: "MV_MIN_SCALE", Value: itoa(c.MinScale), Reason: "must be 0 or more"}
	case c.MaxScale < 0:
		return &runner.ConfigError{Var: "MV_MAX_SCALE", Value: itoa(c.MaxScale), Reason: "must be 0 (no bound) or more"}
	case c.MaxScale > 0 && c.MaxScale < c.MinScale:
		return &runner.ConfigError{Var: "MV_MAX_SCALE", Value: itoa(c.MaxScale), Reason: "must not be below MV_MIN_SCALE=" + itoa(c.MinScale)}
	case c.ConfigPoll <= 0:
		return &runner.ConfigError{Var: "MV_CONFIG_POLL", Value: c.ConfigPoll.String(), Reason: "must be a positive duration"}
	case c.LookbackSeconds < 1 || c.LookbackSeconds > 900:
		return &runner.ConfigError{Var: "MV_LOOKBACK_SECONDS", Value: itoa(c.LookbackSeconds), Reason: "must be between 1 and 900"}
	case c.ScaleUpCooldown < 0:
		return &runner.ConfigError{Var: "MV_SCALE_UP_COOLDOWN_SECONDS", Value: itoa(c.ScaleUpCooldown), Reason: "must be 0 or more seconds"}
	case c.ScaleDownCooldown < 0:
		return &runner.ConfigError{Var: "MV_SCALE_DOWN_COOLDOWN_SECONDS", Value: itoa(c.ScaleDownCooldown), Reason: "must be 0 or more seconds"}
	case c.ReplicasPerUp < 1:
		return &runner.ConfigError{Var: "MV_SCALE_REPLICAS_PER_UP", Value: itoa(c.ReplicasPerUp), Reason: "must be 1 or more"}
	case c.ReplicasPerDown < 1:
		return &runner.ConfigError{Var: "MV_SCALE_REPLICAS_PER_DOWN", Value: itoa(c.ReplicasPerDown), Reason: "must be 1 or more"}
	}
	return nil
}

// validateRouting checks MV_ON_FAILURE and parses the bypass conditions,
// each of which must route to a sink that is set.
func (c *Config) validateRouting() error {
	switch runner.OnFailure(c.OnFailure) {
	case runner.OnFailureRetry, runner.OnFailureFallback, runner.OnFailureDrop:
	default:
		return &runner.ConfigError{Var: "MV_ON_FAILURE", Value: c.OnFailure, Reason: "must be retry, fallback or drop"}
	}
	if runner.OnFailure(c.OnFailure) == runner.OnFailureFallback && c.FallbackSink == None {
		return &runner.ConfigError{Var: "MV_ON_FAILURE", Value: c.OnFailure, Reason: "fallback needs a fallback sink: set MV_FALLBACK_SINK"}
	}
	for _, b := range []struct {
		variable, value, sink, sinkVar string
		dst                            **runner.TagCondition
	}{
		{"MV_BYPASS_SINK", c.BypassSink, c.Sink, "MV_SINK", &c.Bypass.Sink},
		{"MV_BYPASS_FALLBACK", c.BypassFallback, c.FallbackSink, "MV_FALLBACK_SINK", &c.Bypass.Fallback},
		{"MV_BYPASS_ON_SUCCESS", c.BypassOnSuccess, c.OnSuccessSink, "MV_ON_SUCCESS_SINK", &c.Bypass.OnSuccess},
	} {
		cond, err := runner.ParseTagCondition(b.value)
		if err != nil {
			return &runner.ConfigError{Var: b.variable, Value: b.value, Reason: err.Error()}
		}
		if cond != nil && b.sink == None {
			return &runner.ConfigError{Var: b.variable, Value: b.value, Reason: "routes to a sink that is not set: set " + b.sinkVar}
		}
		*b.dst = cond
	}
	return nil
}

func (c *Config) validateLogLevel() error {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
		return nil
	}
	return &runner.ConfigError{Var: "MV_LOG_LEVEL", Value: c.LogLevel, Reason: "must be debug, info, warn or error"}
}

// parseRetrySteps parses MV_RETRY_STEPS and MV_STAGE_RETRY_STEPS and
// checks each stage's own retry strategy.
func (c *Config) parseRetrySteps() error {
	switch s := strings.TrimSpace(c.Retry.Steps); s {
	case "unlimited", "":
		c.Steps = 0
	default:
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return &runner.ConfigError{Var: "MV_RETRY_STEPS", Value: c.Retry.Steps, Reason: "must be a positive whole number or unlimited"}
		}
		c.Steps = n
	}
	switch s := strings.TrimSpace(c.Retry.StageSteps); s {
	case "":
		c.StageSteps = 0
	case "unlimited":
		c.StageSteps = -1
	default:
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return &runner.ConfigError{Var: "MV_STAGE_RETRY_STEPS", Value: c.Retry.StageSteps, Reason: "must be a positive whole number or unlimited (empty: MV_RETRY_STEPS)"}
		}
		c.StageSteps = n
	}
	for _, role := range []runner.Role{runner.RoleTransformer, runner.RoleUDF} {
		if _, err := c.StageRetry(role); err != nil {
			return err
		}
	}
	return nil
}

// StageConcurrency is the most requests a stage may have in flight to its
// container: MV_CONCURRENCY, or the read batch size when it is 0, as
// Numaflow's spec.limits.concurrency defaults.
func (c *Config) StageConcurrency() int {
	if c.Concurrency > 0 {
		return c.Concurrency
	}
	return c.ReadBatchSize
}

// RunnerOptions turns the settings into engine options.
func (c *Config) RunnerOptions() runner.Options {
	return runner.Options{
		Name:            c.Name,
		Replica:         c.Replica,
		BatchSize:       c.ReadBatchSize,
		ReadTimeout:     c.ReadTimeout,
		InflightBatches: c.InflightBatches,
		Streaming:       c.Streaming,
		Concurrency:     c.Concurrency,
		Ordering:        runner.Ordering(c.Ordering),
		MessageIDs:      runner.MessageIDs(c.MessageIDs),
		Retry: runner.RetryPolicy{
			Interval: c.Retry.Interval, Steps: c.Steps, StageSteps: c.StageSteps, Factor: c.Retry.Factor,
			Cap: c.Retry.Cap, Jitter: c.Retry.Jitter,
		},
		OnFailure:       runner.OnFailure(c.OnFailure),
		ShutdownTimeout: c.ShutdownTimeout,
		PendingInterval: c.PendingInterval,
		Lookback:        time.Duration(c.LookbackSeconds) * time.Second,
		Scaling: runner.Scaling{
			TargetSeconds: c.ScaleTarget, Min: c.MinScale, Max: c.MaxScale,
			UpCooldown:   time.Duration(c.ScaleUpCooldown) * time.Second,
			DownCooldown: time.Duration(c.ScaleDownCooldown) * time.Second,
			PerUp:        c.ReplicasPerUp, PerDown: c.ReplicasPerDown,
		},
	}
}

// misplaced is, per transformer slot, the registered kind that belongs in
// the other one (Numaflow's source transformer and map UDF speak different
// protocols): Validate refuses it there and --help does not offer it.
var misplaced = map[runner.Role]string{runner.RoleTransformer: "udmap", runner.RoleUDF: "udtransformer"}

// slotKinds lists the kinds slot accepts.
func slotKinds(slot runner.Slot) []string {
	return slices.DeleteFunc(runner.KindNames(slot.Role), func(n string) bool { return n == misplaced[slot.Role] })
}

// Usage writes every variable with its default and meaning: the runner's
// own, then each registered adapter kind's, as settingsOf names them.
func Usage(w io.Writer) {
	prog := filepath.Base(os.Args[0])
	fmt.Fprintf(w, "Usage: %s [--help [--markdown]] [--version]\n\nA stream runner: source -> transformer -> sink, acking the source only after each message reached a final state.\nAll settings come from the environment.\n", prog)
	usage(w, func(title string, spec any) {
		fmt.Fprintf(w, "\n%s\n", title)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, s := range settingsOf(spec) {
			def := s.def
			if def == "" {
				def = "(none)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.name, def, s.desc)
		}
		tw.Flush()
	}, func(kinds string) { fmt.Fprint(w, kinds) })
}

// UsageMarkdown writes what Usage writes as Markdown tables, one per
// section: docs/configuration.md carries it, so the page cannot drift from
// the structs that read the variables (a test compares them).
func UsageMarkdown(w io.Writer) {
	usage(w, func(title string, spec any) {
		fmt.Fprintf(w, "\n## %s\n\n| variable | default | meaning |\n|---|---|---|\n", strings.TrimSuffix(title, ":"))
		cell := strings.NewReplacer("|", `\|`, "\n", " ").Replace
		for _, s := range settingsOf(spec) {
			def := "(none)"
			if s.def != "" {
				def = "`" + cell(s.def) + "`"
			}
			fmt.Fprintf(w, "| `%s` | %s | %s |\n", s.name, def, cell(s.desc))
		}
	}, func(kinds string) { fmt.Fprintf(w, "\n## Kinds\n\n```\n%s```\n", strings.TrimPrefix(kinds, "\n")) })
}

// usage walks the sections Usage and UsageMarkdown print: the runner's
// settings, tracing, the kinds each slot takes, then each kind's settings.
func usage(w io.Writer, section func(title string, spec any), kinds func(string)) {
	section("Runner:", &Core{})
	section("Tracing (OpenTelemetry's standard variables; see docs/operations.md, \"Tracing\"):", &Tracing{})
	var k strings.Builder
	fmt.Fprintf(&k, "\nThe chain: source -> transformer (MV_TRANSFORMER) -> map UDF (MV_UDF) -> sink, with the fallback and onSuccess sinks beside it;\nthe filter (MV_FILTER, MV_FILTERS) stands before the transformer or after the map UDF (MV_FILTER_POSITION).\nKinds:\n")
	for _, slot := range runner.Slots {
		names := slotKinds(slot)
		if slot.Optional {
			names = append([]string{None}, names...)
		}
		fmt.Fprintf(&k, "  %s: %s\n", slot.Var, strings.Join(names, ", "))
	}
	kinds(k.String())
	seen := map[reflect.Type]bool{}
	for _, k := range runner.AllKinds() {
		if k.Config == nil {
			continue
		}
		spec := k.Config()
		if t := reflect.TypeOf(spec); !seen[t] {
			seen[t] = true
			section(fmt.Sprintf("%s%s %s:", strings.ToUpper(k.Category[:1]), k.Category[1:], k.Name), spec)
		}
	}
}

type variable struct{ name, typ string }

// variables lists the variables of a settings struct with envconfig's word
// for the numbers among them (Integer, Unsigned Integer, Float), which
// checkSyntax reads strictly.
func variables(spec any) []variable {
	var out []variable
	for _, s := range settingsOf(spec) {
		t := s.field.Type()
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		typ := ""
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if t != durationType {
				typ = "Integer"
			}
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			typ = "Unsigned Integer"
		case reflect.Float32, reflect.Float64:
			typ = "Float"
		}
		out = append(out, variable{s.name, typ})
	}
	return out
}

var (
	decimalInt = regexp.MustCompile(`^[+-]?(0|[1-9][0-9]*)$`)
	plainFloat = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)
)

// checkSyntax refuses numbers that envconfig would read in a way nobody
// means: it parses whole numbers with base prefixes (PORT=010000 is octal
// 4096, 0x4e20 and 1_8084 pass) and floats including NaN and Inf. A
// leading zero is refused rather than guessed at.
func checkSyntax(e env, spec any) error {
	for _, v := range variables(spec) {
		raw, ok := e.lookup(v.name)
		if !ok {
			continue
		}
		value := strings.TrimSpace(raw)
		if value == "" {
			continue
		}
		switch v.typ {
		case "Integer", "Unsigned Integer":
			if !decimalInt.MatchString(value) {
				return &runner.ConfigError{Var: v.name, Value: raw, Reason: "must be a whole number in decimal digits without leading zeros"}
			}
		case "Float":
			if !plainFloat.MatchString(value) {
				return &runner.ConfigError{Var: v.name, Value: raw, Reason: "must be a finite decimal number such as 1.5"}
			}
		}
	}
	return nil
}

// knownNames lists every variable the runner reads: its own and those of
// every registered adapter kind, chosen or not (a setting of an adapter
// not in use is no typo).
func knownNames() map[string]bool {
	known := map[string]bool{}
	add := func(spec any) {
		for _, v := range variables(spec) {
			known[v.name] = true
		}
	}
	add(&Core{})
	for _, k := range runner.AllKinds() {
		if k.Config != nil {
			add(k.Config())
		}
	}
	return known
}

// checkUnknown refuses (or, when not strict, warns about) MV_ variables the
// runner does not read, as Caddy refuses unknown keys: MV_RETRY_STEP set
// instead of MV_RETRY_STEPS would otherwise be ignored without a word.
func checkUnknown(e env, strict bool, warn func(string)) error {
	known := knownNames()
	var unknown []string
	for _, name := range e.names {
		if strings.HasPrefix(name, "MV_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		reason := "is not a setting of this runner"
		if near := nearest(name, known); near != "" {
			reason += "; did you mean " + near + "?"
		}
		reason += " (see --help; MV_STRICT=false only warns)"
		if strict {
			value, _ := e.lookup(name)
			return &runner.ConfigError{Var: name, Value: value, Reason: reason}
		}
		warn(name + " " + reason)
	}
	return nil
}

// nearest returns the known name closest to name by edit distance, if it
// is close enough to be a typo of it.
func nearest(name string, known map[string]bool) string {
	best, bestD := "", len(name)/3+2
	for k := range known {
		if d := textdist.Levenshtein(name, k); d < bestD || (d == bestD && best != "" && k < best) {
			best, bestD = k, d
		}
	}
	return best
}
