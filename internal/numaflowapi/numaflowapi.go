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

// GetScaleUpCooldownSeconds is scaleUpCooldownSeconds or Numaflow's default.
func (s Scale) GetScaleUpCooldownSeconds() int {
	if s.ScaleUpCooldownSeconds != nil {
		return int(*s.ScaleUpCooldownSeconds)
	}
	return DefaultCooldownSeconds
}

// GetScaleDownCooldownSeconds is scaleDownCooldownSeconds or Numaflow's
// default.
func (s Scale) GetScaleDownCooldownSeconds() int {
	if s.ScaleDownCooldownSeconds != nil {
		return int(*s.ScaleDownCooldownSeconds)
	}
	return DefaultCooldownSeconds
}

// GetReplicasPerScaleUp is replicasPerScaleUp, else the deprecated
// replicasPerScale, else Numaflow's default.
func (s Scale) GetReplicasPerScaleUp() int {
	if s.ReplicasPerScaleUp != nil {
		return int(*s.ReplicasPerScaleUp)
	}
	if s.DeprecatedReplicasPerScale != nil {
		return int(*s.DeprecatedReplicasPerScale)
	}
	return DefaultReplicasPerScale
}

// GetReplicasPerScaleDown is replicasPerScaleDown, else the deprecated
// replicasPerScale, else Numaflow's default.
func (s Scale) GetReplicasPerScaleDown() int {
	if s.ReplicasPerScaleDown != nil {
		return int(*s.ReplicasPerScaleDown)
	}
	if s.DeprecatedReplicasPerScale != nil {
		return int(*s.DeprecatedReplicasPerScale)
	}
	return DefaultReplicasPerScale
}

// GetMaxReplicas is max or Numaflow's default.
func (s Scale) GetMaxReplicas() int32 {
	if s.Max != nil {
		return *s.Max
	}
	return DefaultMaxReplicas
}
