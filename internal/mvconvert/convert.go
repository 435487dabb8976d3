package mvconvert

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

// Scalers the converter wires a MonoVertex to.
const (
	ScalerHPA  = "hpa"
	ScalerKEDA = "keda"
)

// DefaultRunnerImage is the runner's image as ko builds it from this module.
const DefaultRunnerImage = "ko://github.com/monovertex/monovertex/cmd/runner"

// DefaultPrometheusAddress is where KEDA queries Prometheus unless told
// otherwise (kube-prometheus-stack's operated service).
const DefaultPrometheusAddress = "http://prometheus-operated.monitoring.svc:9090"

// Paths inside the pod.
const (
	udsDir        = "/var/run/numaflow"
	udsVolume     = "var-run-numaflow"
	configDir     = "/etc/monovertex/config"
	configVolume  = "monovertex-config"
	kafkaTLSDir   = "/etc/monovertex/kafka"
	jetstreamDir  = "/etc/monovertex/jetstream"
	natsDir       = "/etc/monovertex/nats"
	runnerName    = "runner"
	adminPort     = 2469
	servingPort   = 8080
	backlogMetric = "monovtx_backlog_seconds"
)

// Options choose how the output is wired.
type Options struct {
	// Scaler is ScalerHPA or ScalerKEDA.
	Scaler string
	// RunnerImage is the runner container's image.
	RunnerImage string
	// PrometheusAddress is the Prometheus KEDA queries.
	PrometheusAddress string
	// PodMonitor adds a Prometheus Operator PodMonitor for the admin port.
	PodMonitor bool
	// RolloutDuration, when set, spreads a new revision's rollout over it
	// (serving.knative.dev/rollout-duration).
	RolloutDuration string
	// TransformerFilter, when set, replaces spec.source.transformer (a
	// container that only filters) by the runner's in-process filter:
	// MV_FILTER, a CESQL expression.
	TransformerFilter string
	// TransformerJSONata and UDFJSONata, when set, replace
	// spec.source.transformer or spec.udf (a container that reshapes
	// messages) by the in-process JSONata transformer running this
	// expression, carried in the ConfigMap.
	TransformerJSONata, UDFJSONata string
}

// Result is the conversion of one MonoVertex.
type Result struct {
	// ConfigMap holds the pause switch; Service runs the runner and the
	// user's containers; PodMonitor (when asked for) scrapes the runner.
	ConfigMap  *corev1.ConfigMap
	Service    *servingv1.Service
	PodMonitor map[string]any
	// Features are the Knative config-features flags the Service needs
	// enabled, each with the path that needs it.
	Features map[string]string
	// Warnings are one line each: a field dropped or changed on purpose.
	Warnings []string
}

// Objects returns the output objects in the order to apply them.
func (r *Result) Objects() []any {
	out := []any{r.ConfigMap, r.Service}
	if r.PodMonitor != nil {
		out = append(out, r.PodMonitor)
	}
	return out
}

type converter struct {
	mv   *nf.MonoVertex
	opts Options
	res  *Result

	env         []corev1.EnvVar // the runner's environment
	envFrom     map[string]string
	sidecars    []corev1.Container
	volumes     []corev1.Volume
	mounts      []corev1.VolumeMount // the runner's extra mounts
	podAnns     map[string]string
	paused      bool
	kafkaShared *kafkaAuthSpec
	// kafkaSinks are the Kafka sinks' settings from their config, which
	// the runner's Kafka sinks share (kafkaSinkSettings).
	kafkaSinks []kafkaSinkConf
	// configData are ConfigMap keys besides paused (JSONata expressions).
	configData map[string]string
}

// Convert converts one decoded MonoVertex. A *FieldError names a field that
// cannot be carried over and why.
func Convert(mv *nf.MonoVertex, opts Options) (res *Result, err error) {
	if opts.Scaler == "" {
		opts.Scaler = ScalerHPA
	}
	if opts.Scaler != ScalerHPA && opts.Scaler != ScalerKEDA {
		return nil, fmt.Errorf("scaler %q: want %s or %s", opts.Scaler, ScalerHPA, ScalerKEDA)
	}
	if opts.RunnerImage == "" {
		opts.RunnerImage = DefaultRunnerImage
	}
	if opts.PrometheusAddress == "" {
		opts.PrometheusAddress = DefaultPrometheusAddress
	}
	c := &converter{mv: mv, opts: opts, res: &Result{Features: map[string]string{}}, envFrom: map[string]string{}, podAnns: map[string]string{}}
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(*FieldError)
			if !ok {
				panic(r)
			}
			res, err = nil, fe
		}
	}()
	c.convert()
	return c.res, nil
}

// fail stops the conversion with a refusal.
func (c *converter) fail(path, format string, args ...any) {
	panic(refuse(path, format, args...))
}

func (c *converter) warn(path, format string, args ...any) {
	c.res.Warnings = append(c.res.Warnings, path+": "+fmt.Sprintf(format, args...))
}

// feature records a Knative feature flag the output needs, with a warning
// naming it.
func (c *converter) feature(flag, path, what string) {
	if _, ok := c.res.Features[flag]; !ok {
		c.res.Features[flag] = path
	}
	c.warn(path, "%s; Knative needs the feature flag %s: enabled in the config-features ConfigMap (knative-serving namespace)", what, flag)
}

// setEnv sets a runner variable from a field.
func (c *converter) setEnv(name, value, from string) {
	c.env = append(c.env, corev1.EnvVar{Name: name, Value: value})
	c.envFrom[name] = from
}

func (c *converter) setSecretEnv(name string, sel *corev1.SecretKeySelector, from string) {
	if sel == nil || sel.Name == "" || sel.Key == "" {
		c.fail(from, "want a secret reference with name and key")
	}
	c.env = append(c.env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: sel.DeepCopy()}})
	c.envFrom[name] = from
}

func dur(d *metav1.Duration) string { return d.Duration.String() }

func (c *converter) nonNegative(path string, d *metav1.Duration) {
	if d != nil && d.Duration < 0 {
		c.fail(path, "must not be negative, got %s", d.Duration)
	}
}

// setPositiveDuration sets env to d, if set, after failing path unless d
// is more than 0 (a pace of 0 would spin).
func (c *converter) setPositiveDuration(env, path string, d *metav1.Duration) {
	if d == nil {
		return
	}
	if d.Duration <= 0 {
		c.fail(path, "must be positive, got %s", d.Duration)
	}
	c.setEnv(env, dur(d), path)
}

func (c *converter) convert() {
	mv := c.mv
	if mv.Name == "" {
		c.fail("metadata.name", "required: it names the Knative Service, its ConfigMap and the mvtx_name metric label")
	}
	if errs := validation.IsDNS1035Label(mv.Name); len(errs) > 0 {
		c.fail("metadata.name", "%q: %s (Numaflow and Knative both require it)", mv.Name, strings.Join(errs, "; "))
	}
	c.metadata()
	spec := &mv.Spec
	c.setEnv("MV_NAME", mv.Name, "metadata.name")
	// A sink sees <name>-<offset>-<index>, as Numaflow's do, so one that
	// de-duplicates on IDs goes on doing so across the move.
	c.setEnv("MV_MESSAGE_IDS", "numaflow", "metadata.name")
	c.source()
	c.udf()
	c.sink()
	c.retry()
	c.limits()
	c.bypass()
	if spec.Streaming != nil {
		c.setEnv("MV_STREAMING", strconv.FormatBool(*spec.Streaming), "spec.streaming")
	}
	c.setEnv("MV_UDS_DIR", udsDir, "")
	c.setEnv("MV_CONFIG_DIR", configDir, "")
	c.setEnv("MV_ADMIN_PORT", strconv.Itoa(adminPort), "")
	c.setEnv("MV_SHUTDOWN_TIMEOUT", "45s", "")
	c.lifecycle()
	c.build()
}

func (c *converter) metadata() {
	md := &c.mv.ObjectMeta
	server := []struct {
		set  bool
		path string
	}{
		{md.GenerateName != "", "metadata.generateName"},
		{md.UID != "", "metadata.uid"},
		{md.ResourceVersion != "", "metadata.resourceVersion"},
		{md.Generation != 0, "metadata.generation"},
		{!md.CreationTimestamp.IsZero(), "metadata.creationTimestamp"},
		{md.DeletionTimestamp != nil, "metadata.deletionTimestamp"},
		{md.DeletionGracePeriodSeconds != nil, "metadata.deletionGracePeriodSeconds"},
		{len(md.ManagedFields) > 0, "metadata.managedFields"},
		{md.SelfLink != "", "metadata.selfLink"},
		{len(md.OwnerReferences) > 0, "metadata.ownerReferences"},
		{len(md.Finalizers) > 0, "metadata.finalizers"},
	}
	for _, f := range server {
		if f.set {
			c.warn(f.path, "dropped: it belongs to the MonoVertex object in the API server, not to what it is converted into")
		}
	}
	if _, ok := md.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		c.warn(fmt.Sprintf("metadata.annotations[%q]", corev1.LastAppliedConfigAnnotation), "dropped: kubectl's record of the MonoVertex, not of the Service")
	}
	if !reflect.DeepEqual(c.mv.Status, nf.MonoVertexStatus{}) {
		c.warn("status", "dropped: written by the Numaflow controller")
	}
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// SortedFeatures returns the feature flags the output needs, sorted.
func (r *Result) SortedFeatures() []string {
	out := make([]string, 0, len(r.Features))
	for f := range r.Features {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}
