// Package numaflowapi holds the Numaflow MonoVertex API types
// (numaflow.numaproj.io/v1alpha1) that mvctl reads. The module
// github.com/numaproj/numaflow is not served by the Go module proxy, so the
// types are mirrored here with Numaflow's JSON names (zz_types.go); the
// Kubernetes types they embed come from k8s.io/api.
package numaflowapi

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Group, Version and Kind of a Numaflow MonoVertex.
const (
	Group      = "numaflow.numaproj.io"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "MonoVertex"
)

// MonoVertex is Numaflow's MonoVertex object. Status is kept as free-form
// data: the converter drops it (the Numaflow controller writes it).
type MonoVertex struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MonoVertexSpec `json:"spec"`
	Status            map[string]any `json:"status,omitempty"`
}

// Numaflow's values for the enumerations mvctl reads.
const (
	PhasePaused  MonoVertexPhase = "Paused"
	PhaseRunning MonoVertexPhase = "Running"

	OnFailureRetry    OnFailureRetryStrategy = "retry"
	OnFailureFallback OnFailureRetryStrategy = "fallback"
	OnFailureDrop     OnFailureRetryStrategy = "drop"

	RollingUpdate UpdateStrategyType = "RollingUpdate"
)

// Numaflow's defaults for the fields the converter has to fill in
// (pkg/apis/numaflow/v1alpha1/const.go).
const (
	DefaultMaxReplicas             = 50
	DefaultCooldownSeconds         = 90
	DefaultReplicasPerScale        = 2
	DefaultTargetProcessingSeconds = 20
	MaxLookbackSeconds             = 600
)

// firstSet is the first of ps that is set, else def: the fields below fall
// back through deprecated names to Numaflow's defaults.
func firstSet(def int, ps ...*uint32) int {
	for _, p := range ps {
		if p != nil {
			return int(*p)
		}
	}
	return def
}

// GetScaleUpCooldownSeconds is scaleUpCooldownSeconds or Numaflow's default.
func (s Scale) GetScaleUpCooldownSeconds() int {
	return firstSet(DefaultCooldownSeconds, s.ScaleUpCooldownSeconds)
}

// GetScaleDownCooldownSeconds is scaleDownCooldownSeconds or Numaflow's
// default.
func (s Scale) GetScaleDownCooldownSeconds() int {
	return firstSet(DefaultCooldownSeconds, s.ScaleDownCooldownSeconds)
}

// GetReplicasPerScaleUp is replicasPerScaleUp, else the deprecated
// replicasPerScale, else Numaflow's default.
func (s Scale) GetReplicasPerScaleUp() int {
	return firstSet(DefaultReplicasPerScale, s.ReplicasPerScaleUp, s.DeprecatedReplicasPerScale)
}

// GetReplicasPerScaleDown is replicasPerScaleDown, else the deprecated
// replicasPerScale, else Numaflow's default.
func (s Scale) GetReplicasPerScaleDown() int {
	return firstSet(DefaultReplicasPerScale, s.ReplicasPerScaleDown, s.DeprecatedReplicasPerScale)
}

// GetMaxReplicas is max or Numaflow's default.
func (s Scale) GetMaxReplicas() int32 {
	if s.Max != nil {
		return *s.Max
	}
	return DefaultMaxReplicas
}
