package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, Version and Kind of a Numaflow MonoVertex.
const (
	Group      = "numaflow.numaproj.io"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "MonoVertex"
)

// MonoVertex is Numaflow's MonoVertex object. The converter drops Status;
// cmd/controller writes it (Numaflow's controller does in a Numaflow
// cluster).
//
// +genclient
// +resourceName=monovertices
// +genreconciler:krshapedlogic=false
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type MonoVertex struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MonoVertexSpec   `json:"spec"`
	Status            MonoVertexStatus `json:"status,omitempty"`
}

// MonoVertexList is a list of MonoVertex objects.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type MonoVertexList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MonoVertex `json:"items"`
}

// MonoVertexStatus is Numaflow's MonoVertex status, field for field, so
// `kubectl get mvtx` prints the same columns (the CRD's printer columns
// read phase, desiredReplicas, replicas, readyReplicas, reason, message).
type MonoVertexStatus struct {
	// Conditions are metav1.Conditions, as Numaflow's: each has a
	// reason, a message and a transition time.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Phase      MonoVertexPhase    `json:"phase,omitempty"`
	// Replicas counts the pods of the MonoVertex (the scale
	// subresource's status replicas).
	Replicas        uint32 `json:"replicas"`
	DesiredReplicas uint32 `json:"desiredReplicas"`
	// Selector selects the pods (the scale subresource's selector).
	Selector             string      `json:"selector,omitempty"`
	Reason               string      `json:"reason,omitempty"`
	Message              string      `json:"message,omitempty"`
	LastUpdated          metav1.Time `json:"lastUpdated,omitempty"`
	LastScaledAt         metav1.Time `json:"lastScaledAt,omitempty"`
	ObservedGeneration   int64       `json:"observedGeneration,omitempty"`
	ReadyReplicas        uint32      `json:"readyReplicas,omitempty"`
	UpdatedReplicas      uint32      `json:"updatedReplicas,omitempty"`
	UpdatedReadyReplicas uint32      `json:"updatedReadyReplicas,omitempty"`
	CurrentHash          string      `json:"currentHash,omitempty"`
	UpdateHash           string      `json:"updateHash,omitempty"`
}

// Numaflow's values for the enumerations mvctl reads.
const (
	PhasePaused  MonoVertexPhase = "Paused"
	PhaseRunning MonoVertexPhase = "Running"
	PhaseFailed  MonoVertexPhase = "Failed"

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

// GetGroupVersionKind is numaflow.numaproj.io/v1alpha1 MonoVertex: it makes
// a MonoVertex a kmeta.OwnerRefable, the owner of what it is converted into.
func (*MonoVertex) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind(Kind)
}
