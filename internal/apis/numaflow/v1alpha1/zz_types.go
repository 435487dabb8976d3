// Code mirrored from github.com/numaproj/numaflow pkg/apis/numaflow/v1alpha1
// (Apache License 2.0, Copyright 2022 The Numaproj Authors) at commit
// 63ba4e8c8692b8f797e446af1a144f2291d19d14: the type declarations reachable
// from MonoVertexSpec, with the same JSON names, and no methods. Regenerate
// rather than edit by hand when Numaflow's CRD changes.

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	resource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// AWSAssumeRole contains the configuration for AWS STS assume role authentication
// This can be used with any AWS service (SQS, S3, DynamoDB, etc.)
type AWSAssumeRole struct {
	// RoleARN is the Amazon Resource Name (ARN) of the role to assume.
	// This is a required field when assume role is enabled.
	// Example: "arn:aws:iam::123456789012:role/CrossAccount-Service-Role"
	RoleARN string `json:"roleArn"`

	// SessionName is an identifier for the assumed role session.
	// This appears in AWS CloudTrail logs to help identify the source of API calls.
	// If not specified, a default session name will be generated based on the service context.
	SessionName *string `json:"sessionName,omitempty"`

	// DurationSeconds is the duration (in seconds) of the role session.
	// Valid values: 900-43200 (15 minutes to 12 hours)
	// Defaults to 3600 (1 hour) if not specified.
	// The actual session duration is constrained by the maximum session duration
	// setting of the IAM role being assumed.
	DurationSeconds *int32 `json:"durationSeconds,omitempty"`

	// ExternalID is a unique identifier that might be required when you assume a role
	// in another account. This is commonly used as an additional security measure
	// for cross-account role access.
	ExternalID *string `json:"externalID,omitempty"`

	// Policy is an IAM policy document (JSON string) that you want to use as an inline session policy.
	// This parameter is optional. When specified, the session permissions are the intersection of
	// the IAM role's identity-based policy and the session policies.
	// This allows further restriction of permissions for the specific service operations.
	Policy *string `json:"policy,omitempty"`

	// PolicyARNs is a list of Amazon Resource Names (ARNs) of IAM managed policies
	// that you want to use as managed session policies.
	// The policies must exist in the same account as the role.
	// This allows attaching existing managed policies to further restrict session permissions.
	PolicyARNs []string `json:"policyArns,omitempty"`
}

// AbstractPodTemplate provides a template for pod customization in vertices, daemon deployments and so on.
type AbstractPodTemplate struct {
	// Metadata sets the pods's metadata, i.e. annotations and labels
	Metadata *Metadata `json:"metadata,omitempty"`
	// NodeSelector is a selector which must be true for the pod to fit on a node.
	// Selector which must match a node's labels for the pod to be scheduled on that node.
	// More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// If specified, the pod's tolerations.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// SecurityContext holds pod-level security attributes and common container settings.
	// Optional: Defaults to empty.  See type description for default values of each field.
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`
	// ImagePullSecrets is an optional list of references to secrets in the same namespace to use for pulling any of the images used by this PodSpec.
	// If specified, these secrets will be passed to individual puller implementations for them to use. For example,
	// in the case of docker, only DockerConfig type secrets are honored.
	// More info: https://kubernetes.io/docs/concepts/containers/images#specifying-imagepullsecrets-on-a-pod
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// If specified, indicates the pod's priority. "system-node-critical"
	// and "system-cluster-critical" are two special keywords which indicate the
	// highest priorities with the former being the highest priority. Any other
	// name must be defined by creating a PriorityClass object with that name.
	// If not specified, the pod priority will be default or zero if there is no
	// default.
	// More info: https://kubernetes.io/docs/concepts/configuration/pod-priority-preemption/
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// The priority value. Various system components use this field to find the
	// priority of the pod. When Priority Admission Controller is enabled,
	// it prevents users from setting this field. The admission controller populates
	// this field from PriorityClassName.
	// The higher the value, the higher the priority.
	// More info: https://kubernetes.io/docs/concepts/configuration/pod-priority-preemption/
	Priority *int32 `json:"priority,omitempty"`
	// The pod's scheduling constraints
	// More info: https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// ServiceAccountName applied to the pod
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// RuntimeClassName refers to a RuntimeClass object in the node.k8s.io group, which should be used
	// to run this pod.  If no RuntimeClass resource matches the named class, the pod will not be run.
	// If unset or empty, the "legacy" RuntimeClass will be used, which is an implicit class with an
	// empty definition that uses the default runtime handler.
	// More info: https://git.k8s.io/enhancements/keps/sig-node/585-runtime-class
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
	// AutomountServiceAccountToken indicates whether a service account token should be automatically mounted.
	AutomountServiceAccountToken *bool `json:"automountServiceAccountToken,omitempty"`
	// Set DNS policy for the pod.
	// Defaults to "ClusterFirst".
	// Valid values are 'ClusterFirstWithHostNet', 'ClusterFirst', 'Default' or 'None'.
	// DNS parameters given in DNSConfig will be merged with the policy selected with DNSPolicy.
	// To have DNS options set along with hostNetwork, you have to specify DNS policy
	// explicitly to 'ClusterFirstWithHostNet'.
	DNSPolicy corev1.DNSPolicy `json:"dnsPolicy,omitempty"`
	// Specifies the DNS parameters of a pod.
	// Parameters specified here will be merged to the generated DNS
	// configuration based on DNSPolicy.
	DNSConfig *corev1.PodDNSConfig `json:"dnsConfig,omitempty"`
	// ResourceClaims defines which ResourceClaims must be allocated and reserved
	// before the Pod is allowed to start. The resources will be made available to those
	// containers which consume them by name.
	ResourceClaims []corev1.PodResourceClaim `json:"resourceClaims,omitempty"`
}

type AbstractSink struct {
	// Log sink is used to write the data to the log.
	Log *Log `json:"log,omitempty"`
	// Kafka sink is used to write the data to the Kafka.
	Kafka *KafkaSink `json:"kafka,omitempty"`
	// Blackhole sink is used to write the data to the blackhole sink,
	// which is a sink that discards all the data written to it.
	Blackhole *Blackhole `json:"blackhole,omitempty"`
	// UDSink sink is used to write the data to the user-defined sink.
	UDSink *UDSink `json:"udsink,omitempty"`
	// Serve sink is used to return results when working with a ServingPipeline.
	Serve *ServeSink `json:"serve,omitempty"`
	// SQS sink is used to write the data to the AWS SQS.
	Sqs *SqsSink `json:"sqs,omitempty"`
	// Pulsar sink is used to write the data to the Apache Pulsar.
	Pulsar *PulsarSink `json:"pulsar,omitempty"`
}

// AccumulatorWindow describes a special kind of SessionWindow (similar to Global Window) where output should
// always have monotonically increasing WM but it can be manipulated through event-time by reordering the messages.
// NOTE: Quite powerful, should not be abused; it can cause stalling of pipelines and leaks.
type AccumulatorWindow struct {
	// Timeout is the duration of inactivity after which the state of the accumulator is removed.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

type Authorization struct {
	// A secret selector which contains bearer token
	// To use this, the client needs to add "Authorization: Bearer <token>" in the header
	Token *corev1.SecretKeySelector `json:"token"`
}

// Backoff defines parameters used to systematically configure the retry strategy.
type Backoff struct {
	// Interval sets the initial retry duration, after a failure occurs.
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Steps defines the maximum number of retry attempts
	Steps *uint32 `json:"steps,omitempty"`
	// Interval is multiplied by factor each iteration, if factor is not zero
	// and the limits imposed by Steps and Cap have not been reached.
	Factor *float64 `json:"factor,omitempty"`
	// A limit on revised values of the interval parameter. If a
	// multiplication by the factor parameter would make the interval
	// exceed the cap then the interval is set to the cap and the
	// steps parameter is set to zero.
	Cap *metav1.Duration `json:"cap,omitempty"`
	// The sleep at each iteration is the interval plus an additional
	// amount chosen uniformly at random from the interval between
	// zero and `jitter*interval`.
	Jitter *float64 `json:"jitter,omitempty"`
}

// BasicAuth represents the basic authentication approach which contains a user name and a password.
type BasicAuth struct {
	// Secret for auth user
	User *corev1.SecretKeySelector `json:"user,omitempty"`
	// Secret for auth password
	Password *corev1.SecretKeySelector `json:"password,omitempty"`
}

// Blackhole is a sink to emulate /dev/null
type Blackhole struct {
}

// Container is used to define the container properties for user-defined functions, sinks, etc.
type Container struct {
	Image           string                      `json:"image"`
	Command         []string                    `json:"command,omitempty"`
	Args            []string                    `json:"args,omitempty"`
	Env             []corev1.EnvVar             `json:"env,omitempty"`
	EnvFrom         []corev1.EnvFromSource      `json:"envFrom,omitempty"`
	VolumeMounts    []corev1.VolumeMount        `json:"volumeMounts,omitempty"`
	Resources       corev1.ResourceRequirements `json:"resources,omitempty"`
	SecurityContext *corev1.SecurityContext     `json:"securityContext,omitempty"`
	ImagePullPolicy *corev1.PullPolicy          `json:"imagePullPolicy,omitempty"`
	ReadinessProbe  *Probe                      `json:"readinessProbe,omitempty"`
	LivenessProbe   *Probe                      `json:"livenessProbe,omitempty"`
	Ports           []corev1.ContainerPort      `json:"ports,omitempty"`
}

// ContainerTemplate defines customized spec for a container
type ContainerTemplate struct {
	Resources       corev1.ResourceRequirements `json:"resources,omitempty"`
	ImagePullPolicy corev1.PullPolicy           `json:"imagePullPolicy,omitempty"`
	SecurityContext *corev1.SecurityContext     `json:"securityContext,omitempty"`
	Env             []corev1.EnvVar             `json:"env,omitempty"`
	EnvFrom         []corev1.EnvFromSource      `json:"envFrom,omitempty"`
	ReadinessProbe  *Probe                      `json:"readinessProbe,omitempty"`
	LivenessProbe   *Probe                      `json:"livenessProbe,omitempty"`
}

type CronSchedule struct {
	// Start of the cron window. Extended cron format (Second Minute Hour Dom Month Dow).
	Start string `json:"start"`
	// End of the cron window. Same format as Start. Must differ from Start.
	End string `json:"end"`
	// Minimum replicas during this window. Overrides scale.min.
	Min *int32 `json:"min"`
	// Maximum replicas during this window. Overrides scale.max.
	Max *int32 `json:"max"`
}

// CronScheduling defines cron-based autoscaling overrides.
type CronScheduling struct {
	// Timezone for interpreting cron expressions. IANA Time Zone Database format. Defaults to UTC.
	Timezone string `json:"timezone,omitempty"`
	// Schedules are evaluated in order; the first active schedule takes precedence when windows overlap.
	Schedules []CronSchedule `json:"schedules"`
}

type DaemonTemplate struct {
	AbstractPodTemplate `json:",inline"`
	// Replicas is the number of desired replicas of the Deployment.
	// This is a pointer to distinguish between explicit zero and unspecified.
	// Defaults to 1.
	// More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller
	Replicas              *int32             `json:"replicas,omitempty"`
	ContainerTemplate     *ContainerTemplate `json:"containerTemplate,omitempty"`
	InitContainerTemplate *ContainerTemplate `json:"initContainerTemplate,omitempty"`
}

// FixedWindow describes a fixed window
type FixedWindow struct {
	// Length is the duration of the fixed window.
	Length *metav1.Duration `json:"length,omitempty"`
	// Streaming should be set to true if the reduce udf is streaming.
	Streaming bool `json:"streaming,omitempty"`
}

type ForwardConditions struct {
	// Tags used to specify tags for conditional forwarding
	Tags TagConditions `json:"tags"`
}

// GSSAPI represents a SASL GSSAPI config
type GSSAPI struct {
	ServiceName string `json:"serviceName"`
	Realm       string `json:"realm"`
	// UsernameSecret refers to the secret that contains the username
	UsernameSecret *corev1.SecretKeySelector `json:"usernameSecret"`
	// valid inputs - KRB5_USER_AUTH, KRB5_KEYTAB_AUTH
	AuthType *KRB5AuthType `json:"authType"`
	// PasswordSecret refers to the secret that contains the password
	PasswordSecret *corev1.SecretKeySelector `json:"passwordSecret,omitempty"`
	// KeytabSecret refers to the secret that contains the keytab
	KeytabSecret *corev1.SecretKeySelector `json:"keytabSecret,omitempty"`
	// KerberosConfigSecret refers to the secret that contains the kerberos config
	KerberosConfigSecret *corev1.SecretKeySelector `json:"kerberosConfigSecret,omitempty"`
}

type GeneratorSource struct {
	RPU      *int64           `json:"rpu,omitempty"`
	Duration *metav1.Duration `json:"duration,omitempty"`
	// Size of each generated message
	MsgSize *int32 `json:"msgSize,omitempty"`
	// KeyCount is the number of unique keys in the payload
	KeyCount *int32 `json:"keyCount,omitempty"`
	// Value is an optional uint64 value to be written in to the payload
	Value *uint64 `json:"value,omitempty"`
	// Jitter is the jitter for the message generation, used to simulate out of order messages
	// for example if the jitter is 10s, then the message's event time will be delayed by a random
	// time between 0 and 10s which will result in the message being out of order by 0 to 10s
	Jitter *metav1.Duration `json:"jitter,omitempty"`
	// ValueBlob is an optional string which is the base64 encoding of direct payload to send.
	// This is useful for attaching a GeneratorSource to a true pipeline to test load behavior
	// with true messages without requiring additional work to generate messages through
	// the external source
	// if present, the Value and MsgSize fields will be ignored.
	ValueBlob *string `json:"valueBlob,omitempty"`
}

// GroupBy indicates it is a reducer UDF
type GroupBy struct {
	// Window describes the windowing strategy.
	Window Window `json:"window"`
	Keyed  bool   `json:"keyed"`
	// AllowedLateness allows late data to be included for the Reduce operation as long as the late data is not later
	// than (Watermark - AllowedLateness).
	AllowedLateness *metav1.Duration `json:"allowedLateness,omitempty"`
	// Storage is used to define the PBQ storage for a reduce vertex.
	Storage *PBQStorage `json:"storage,omitempty"`
}

type HTTPSource struct {
	Auth *Authorization `json:"auth"`
	// Whether to create a ClusterIP Service
	Service bool `json:"service"`
	// Ports to listen on. HTTPS always runs on port 8443 by default.
	// To enable plain HTTP, set ports.http explicitly.
	Ports *Ports `json:"ports,omitempty"`
}

type JetStreamSource struct {
	// URL to connect to NATS cluster, multiple urls could be separated by comma.
	URL string `json:"url"`
	// Stream represents the name of the stream.
	Stream string `json:"stream"`
	// Consumer represents the name of the consumer of the stream
	// If not specified, a consumer with name `numaflow-pipeline_name-vertex_name-stream_name` will be created.
	// If a consumer name is specified, a consumer with that name will be created if it doesn't exist on the stream.
	Consumer string `json:"consumer"`
	// The point in the stream from which to receive messages.
	// https://docs.nats.io/nats-concepts/jetstream/consumers#deliverpolicy
	// Valid options are: "all", "new", "last", "last_per_subject", "by_start_sequence 42", "by_start_time 1753428483000".
	// The second value to "by_start_time" is unix epoch time in milliseconds.
	DeliverPolicy string `json:"deliver_policy"`
	// A set of subjects that overlap with the subjects bound to the stream to filter delivery to subscribers.
	// https://docs.nats.io/nats-concepts/jetstream/consumers#filtesubjects
	FilterSubjects []string `json:"filter_subjects"`
	// TLS configuration for the nats client.
	TLS *TLS `json:"tls"`
	// Auth information
	Auth *NatsAuth `json:"auth,omitempty"`
}

// KRB5AuthType describes the kerberos auth type
type KRB5AuthType string

type KafkaSink struct {
	Brokers []string `json:"brokers,omitempty"`
	Topic   string   `json:"topic"`
	// SetKey sets the Kafka key to the keys passed in the Message.
	// When the key is null (default), the record is sent randomly to one of the available partitions of the topic.
	// If a key exists, Kafka hashes the key, and the result is used to map the message to a specific partition. This
	// ensures that messages with the same key end up in the same partition.
	SetKey bool `json:"setKey"`
	// TLS user to configure TLS connection for kafka broker
	// TLS.enable=true default for TLS.
	TLS    *TLS   `json:"tls"`
	Config string `json:"config,omitempty"`
	// SASL user to configure SASL connection for kafka broker
	// SASL.enable=true default for SASL.
	SASL *SASL `json:"sasl"`
}

type KafkaSource struct {
	Brokers           []string `json:"brokers,omitempty"`
	Topic             string   `json:"topic"`
	ConsumerGroupName string   `json:"consumerGroup,omitempty"`
	// TLS user to configure TLS connection for kafka broker
	// TLS.enable=true default for TLS.
	TLS    *TLS   `json:"tls"`
	Config string `json:"config,omitempty"`
	// SASL user to configure SASL connection for kafka broker
	// SASL.enable=true default for SASL.
	SASL         *SASL  `json:"sasl"`
	KafkaVersion string `json:"kafkaVersion,omitempty"`
}

type Lifecycle struct {
	// DeletionGracePeriodSeconds used to delete pipeline gracefully
	DeletionGracePeriodSeconds *int64 `json:"deletionGracePeriodSeconds,omitempty"`
	// DesiredPhase used to bring the pipeline from current phase to desired phase
	DesiredPhase PipelinePhase `json:"desiredPhase,omitempty"`
	// PauseGracePeriodSeconds used to pause pipeline gracefully
	PauseGracePeriodSeconds *int64 `json:"pauseGracePeriodSeconds,omitempty"`
	// DeleteGracePeriodSeconds used to delete pipeline gracefully
	// Deprecated: Use DeletionGracePeriodSeconds instead
	DeprecatedDeleteGracePeriodSeconds *int64 `json:"deleteGracePeriodSeconds,omitempty"`
}

type Log struct {
}

type LogicOperator string

type Metadata struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

type MonoVertexBypassCondition struct {
	// Conditions to trigger bypass to primary sink component.
	// Definition is similar to "conditions" in pipeline spec for edges.
	Sink *ForwardConditions `json:"sink"`
	// Conditions to trigger bypass to fallback sink component.
	// Definition is similar to "conditions" in pipeline spec for edges.
	Fallback *ForwardConditions `json:"fallback"`
	// Conditions to trigger bypass to onSuccess sink component.
	// Definition is similar to "conditions" in pipeline spec for edges.
	OnSuccess *ForwardConditions `json:"onSuccess"`
}

type MonoVertexLifecycle struct {
	// DesiredPhase used to bring the MonoVertex from current phase to desired phase
	DesiredPhase MonoVertexPhase `json:"desiredPhase,omitempty"`
}

type MonoVertexLimits struct {
	// Read batch size from the source.
	// ReadBatchSize controls only how many messages are fetched in a single read call from the source;
	// it is not a cap on how many messages may be in-flight (use `concurrency` for that).
	ReadBatchSize *uint64 `json:"readBatchSize,omitempty"`
	// ReadTimeout is the read timeout duration from the source.
	ReadTimeout *metav1.Duration `json:"readTimeout,omitempty"`
	// RateLimit for MonoVertex defines how many messages can be read from Source. This is computed by number of
	// `read` calls per second multiplied by the `readBatchSize`. This is how RateLimit is calculated for MonoVertex and
	// for Source vertices.
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
	// Concurrency defines the maximum number of messages that can be actively in-flight (read but not
	// yet acknowledged) at any given time. With read-ahead enabled, the data plane keeps reading new
	// batches from the source until the number of in-flight messages reaches `concurrency`; once that
	// ceiling is hit, one more batch may be pre-fetched and held ready so that completed messages can
	// be replaced immediately. Therefore the maximum in-flight count is at most
	// `concurrency + readBatchSize`. With read-ahead disabled (the default for MonoVertex, since the
	// MonoVertex always reads from a source), the data plane drains the current batch fully before
	// the next read, so the upper bound becomes `min(concurrency, readBatchSize)`.
	// `readBatchSize` controls only the size of an individual read; `concurrency` controls how many
	// messages can be processed in parallel. To force strictly sequential processing, set
	// `concurrency` to 1 (read-ahead is already off by default for MonoVertex).
	Concurrency *uint64 `json:"concurrency,omitempty"`
}

type MonoVertexPhase string

type MonoVertexSpec struct {
	Replicas            *int32  `json:"replicas,omitempty"`
	Source              *Source `json:"source,omitempty"`
	Sink                *Sink   `json:"sink,omitempty"`
	UDF                 *UDF    `json:"udf,omitempty"`
	AbstractPodTemplate `json:",inline"`
	// Container template for the main numa container.
	ContainerTemplate *ContainerTemplate `json:"containerTemplate,omitempty"`
	Volumes           []corev1.Volume    `json:"volumes,omitempty"`
	// Limits define the limitations such as read batch size for the mono vertex.
	Limits *MonoVertexLimits `json:"limits,omitempty"`
	// Settings for autoscaling
	Scale Scale `json:"scale,omitempty"`
	// List of customized init containers belonging to the pod.
	// More info: https://kubernetes.io/docs/concepts/workloads/pods/init-containers/
	InitContainers []corev1.Container `json:"initContainers,omitempty"`
	// List of customized sidecar containers belonging to the pod.
	Sidecars []corev1.Container `json:"sidecars,omitempty"`
	// Template for the daemon service deployment.
	DaemonTemplate *DaemonTemplate `json:"daemonTemplate,omitempty"`
	// The strategy to use to replace existing pods with new ones.
	UpdateStrategy UpdateStrategy `json:"updateStrategy,omitempty"`
	// Lifecycle defines the Lifecycle properties of a MonoVertex
	Lifecycle MonoVertexLifecycle `json:"lifecycle,omitempty"`
	// Bypass defines the bypass destination and conditions to trigger bypass for the mono vertex components.
	// If specified, the bypass will be triggered if the conditions are met at any of the components.
	// The first level of the bypass spec specifies the destination to which the message will be forwarded to,
	// and the next level specifies the conditions to trigger the said bypass.
	Bypass *MonoVertexBypassCondition `json:"bypass,omitempty"`
	// Streaming enables per-message, out-of-order source acknowledgement instead of the default
	// whole-batch barrier. When true, the source reads continuously bounded by `spec.limits.concurrency`
	// (in-flight messages) rather than one batch at a time. This is off by default.
	Streaming *bool `json:"streaming,omitempty"`
}

// NatsAuth defines how to authenticate the nats access
type NatsAuth struct {
	// Basic auth which contains a username and a password
	Basic *BasicAuth `json:"basic,omitempty"`
	// Token auth
	Token *corev1.SecretKeySelector `json:"token,omitempty"`
	// NKey auth
	NKey *corev1.SecretKeySelector `json:"nkey,omitempty"`
}

type NatsSource struct {
	// URL to connect to NATS cluster, multiple urls could be separated by comma.
	URL string `json:"url"`
	// Subject holds the name of the subject onto which messages are published.
	Subject string `json:"subject"`
	// Queue is used for queue subscription.
	Queue string `json:"queue"`
	// TLS configuration for the nats client.
	TLS *TLS `json:"tls"`
	// Auth information
	Auth *NatsAuth `json:"auth,omitempty"`
}

// NoStore means there will be no persistence storage and there will be data loss during pod restarts.
// Use this option only if you do not care about correctness (e.g., approx statistics pipeline like sampling rate, etc.).
type NoStore struct{}

type OnFailureRetryStrategy string

// PBQStorage defines the persistence configuration for a vertex.
type PBQStorage struct {
	PersistentVolumeClaim *PersistenceStrategy         `json:"persistentVolumeClaim,omitempty"`
	EmptyDir              *corev1.EmptyDirVolumeSource `json:"emptyDir,omitempty"`
	NoStore               *NoStore                     `json:"no_store,omitempty"`
}

// PersistenceStrategy defines the strategy of persistence
type PersistenceStrategy struct {
	// Name of the StorageClass required by the claim.
	// More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#class-1
	StorageClassName *string `json:"storageClassName,omitempty"`
	// Available access modes such as ReadWriteOncePod, ReadWriteOnce, ReadWriteMany
	// https://kubernetes.io/docs/concepts/storage/persistent-volumes/#access-modes
	AccessMode *corev1.PersistentVolumeAccessMode `json:"accessMode,omitempty"`
	// Volume size, e.g. 50Gi
	VolumeSize *resource.Quantity `json:"volumeSize,omitempty"`
}

type PipelinePhase string

type Ports struct {
	HTTPS *int32 `json:"https,omitempty"`
	HTTP  *int32 `json:"http,omitempty"`
}

// Probe is used to customize the configuration for Readiness and Liveness probes.
type Probe struct {
	// Number of seconds after the container has started before liveness probes are initiated.
	// More info: https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle#container-probes
	InitialDelaySeconds *int32 `json:"initialDelaySeconds,omitempty"`
	// Number of seconds after which the probe times out.
	// More info: https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle#container-probes
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
	// How often (in seconds) to perform the probe.
	PeriodSeconds *int32 `json:"periodSeconds,omitempty"`
	// Minimum consecutive successes for the probe to be considered successful after having failed.
	// Defaults to 1. Must be 1 for liveness and startup. Minimum value is 1.
	SuccessThreshold *int32 `json:"successThreshold,omitempty"`
	// Minimum consecutive failures for the probe to be considered failed after having succeeded.
	// Defaults to 3. Minimum value is 1.
	FailureThreshold *int32 `json:"failureThreshold,omitempty"`
}

// PulsarAuth defines how to authenticate with Pulsar
type PulsarAuth struct {
	// JWT Token auth
	Token *corev1.SecretKeySelector `json:"token,omitempty"`
	// Authentication using HTTP basic https://pulsar.apache.org/docs/4.0.x/security-basic-auth/
	BasicAuth *PulsarBasicAuth `json:"basicAuth,omitempty"`
}

type PulsarBasicAuth struct {
	Username *corev1.SecretKeySelector `json:"username,omitempty"`
	Password *corev1.SecretKeySelector `json:"password,omitempty"`
}

type PulsarDeadLetterPolicy struct {
	// Topic where messages exceeding the max redelivery count will be sent.
	Topic string `json:"topic"`

	// Maximum number of redelivery attempts before routing to the dead letter topic.
	MaxRedelivery uint32 `json:"maxRedelivery"`
}

type PulsarSink struct {
	ServerAddr   string `json:"serverAddr"`
	Topic        string `json:"topic"`
	ProducerName string `json:"producerName"`
	// Auth information
	Auth *PulsarAuth `json:"auth,omitempty"`
}

type PulsarSource struct {
	ServerAddr       string `json:"serverAddr"`
	Topic            string `json:"topic"`
	ConsumerName     string `json:"consumerName"`
	SubscriptionName string `json:"subscriptionName"`

	// Maximum number of messages that are in not yet acked state. Once this limit is crossed, futher read requests will return empty list.
	MaxUnack uint32 `json:"maxUnack,omitempty"`

	// Auth information
	Auth *PulsarAuth `json:"auth,omitempty"`

	// Consumer level dead letter policy.
	DeadLetterPolicy *PulsarDeadLetterPolicy `json:"deadLetterPolicy,omitempty"`
}

type RateLimit struct {
	// Max is the maximum TPS that this vertex can process give a distributed `Store` is configured. Otherwise, it will
	// be the maximum TPS for a single replica.
	Max *uint64 `json:"max,omitempty"`
	// Minimum TPS allowed during initial bootup. This value will be distributed across all the replicas if a distributed
	// `Store` is configured. Otherwise, it will be the minimum TPS for a single replica.
	Min *uint64 `json:"min,omitempty"`
	// RampUpDuration is the duration to reach the maximum TPS from the minimum TPS. The min unit of ramp up is 1 in
	// 1 second.
	RampUpDuration *metav1.Duration `json:"rampUpDuration,omitempty"`
	// Store is used to define the Distributed Store for the rate limiting. We also support in-memory store if no store
	// is configured. This means that every replica will have its own rate limit and the actual TPS will be the sum of all
	// the replicas.
	RateLimiterStore *RateLimiterStore `json:"store,omitempty"`
	// RateLimiterModes is used to define the modes for rate limiting.
	RateLimiterModes *RateLimiterModes `json:"modes,omitempty"`
	// ResumedRampUp is used to enable the resume mode for rate limiting.
	//
	// This, if true, will allow the processor to
	// resume the ramp-up process from the last known state of the rate limiter, i.e., if the processor was allowed X tokens
	// before shutting down, it will be allowed X tokens again after the processor restarts.
	//
	// The resumed ramp-up process will be allowed until TTL time after the processor first deregisters with the rate limiter.
	ResumedRampUp *bool `json:"resumedRampUp,omitempty"`
	// TTL is used to define the duration after which a pod is considered stale and removed from the pool of pods if it
	// doesn't sync with the rate limiter.
	//
	// Furthermore, if the ResumedRampUp is true, then TTL also defines the amount of time within which, if a pod
	// re-registers / registers with the same name, with the rate limiter, it will be assigned the same rate limit as
	// the previous pod with that name.
	TTL *metav1.Duration `json:"ttl,omitempty"`
}

// RateLimiterGoBackN is for the GoBackN mode.
// Releases additional tokens only when previously released tokens have been utilized above the configured threshold
// otherwise triggers a ramp-down. Ramp-down is also triggered when the request is made after quite a while.
type RateLimiterGoBackN struct {
	// CoolDownPeriod is the duration after which the rate limiter will start ramping down if the request is made after
	// the cool-down period.
	CoolDownPeriod *metav1.Duration `json:"coolDownPeriod,omitempty"`
	// RampDownStrength is the strength of the ramp-down. It is a value between 0 and 1. 0 means no ramp-down and 1 means
	// token pool is ramped down at the rate of slope=(max - min)/duration.
	RampDownPercentage *uint32 `json:"rampDownPercentage,omitempty"`
	// ThresholdPercentage specifies the minimum percentage of capacity, availed by the rate limiter,
	// that should be consumed at any instance to allow the rate limiter to unlock additional capacity.
	// For example, given the following configuration:
	// - max = 100
	// - min = 10
	// - rampUpDuration = 10s i.e.--> slope = 10 messages/second
	// - thresholdPercentage = 50
	// at t = 0, the rate limiter will release 10 messages and at least 5 of those should be consumed to unlock
	// additional capacity of 10 messages at t = 1 to make the total capacity of 20.
	ThresholdPercentage *uint32 `json:"thresholdPercentage,omitempty"`
}

type RateLimiterInMemoryStore struct{}

// RateLimiterModes defines the modes for rate limiting.
type RateLimiterModes struct {
	// Irrespective of the traffic, the rate limiter releases max possible tokens based on ramp-up duration.
	RateLimiterScheduled *RateLimiterScheduled `json:"scheduled,omitempty"`
	// If there is some traffic, then release the max possible tokens.
	RateLimiterRelaxed *RateLimiterRelaxed `json:"relaxed,omitempty"`
	// Releases additional tokens only when previously released tokens have been utilized above the configured threshold
	RateLimiterOnlyIfUsed *RateLimiterOnlyIfUsed `json:"onlyIfUsed,omitempty"`
	// Releases additional tokens only when previously released tokens have been utilized above the configured threshold
	// otherwise triggers a ramp-down. Ramp-down is also triggered when the request is made after quite a while.
	RateLimiterGoBackN *RateLimiterGoBackN `json:"goBackN,omitempty"`
}

// RateLimiterOnlyIfUsed is for the OnlyIfUsed mode.
// Releases additional tokens only when previously released tokens have been utilized above the configured threshold
type RateLimiterOnlyIfUsed struct {
	// ThresholdPercentage specifies the minimum percentage of capacity, availed by the rate limiter,
	// that should be consumed at any instance to allow the rate limiter to unlock additional capacity.
	//
	// Defaults to 50%
	//
	// For example, given the following configuration:
	// - max = 100
	// - min = 10
	// - rampUpDuration = 10s i.e.--> slope = 10 messages/second
	// - thresholdPercentage = 50
	// at t = 0, the rate limiter will release 10 messages and at least 5 of those should be consumed to unlock
	// additional capacity of 10 messages at t = 1 to make the total capacity of 20.
	ThresholdPercentage *uint32 `json:"thresholdPercentage,omitempty"`
}

type RateLimiterRedisStore struct {
	// Choose how to connect to Redis.
	// - Single: use a single URL (redis://... or rediss://...)
	// - Sentinel: discover the node via Redis Sentinel
	Mode string `json:"mode"`

	// SINGLE MODE: Full connection URL, e.g. redis://host:6379/0 or rediss://host:port/0
	// Mutually exclusive with .sentinel
	URL *string `json:"url,omitempty"`

	// SENTINEL MODE: Settings to reach Sentinel and the selected Redis node
	// Mutually exclusive with .url
	Sentinel *RedisSentinelConfig `json:"sentinel,omitempty"`

	// COMMON: Optional DB index (default 0)
	DB *int32 `json:"db,omitempty"`
}

// RateLimiterRelaxed is for the relaxed mode. It will release the max possible tokens if there is some traffic.
type RateLimiterRelaxed struct{}

// RateLimiterScheduled is for the scheduled mode.
// It will release the max possible tokens based on ramp-up duration irrespective of traffic encountered.
type RateLimiterScheduled struct{}

type RateLimiterStore struct {
	// RedisStore is used to define the redis store for the rate limit.
	RateLimiterRedisStore *RateLimiterRedisStore `json:"redisStore,omitempty"`
	// InMemoryStore is used to define the in-memory store for the rate limit.
	RateLimiterInMemoryStore *RateLimiterInMemoryStore `json:"inMemoryStore,omitempty"`
}

type RedisAuth struct {
	// For Redis 6+ ACLs. If Username omitted, password-only is also supported.
	Username *corev1.SecretKeySelector `json:"username,omitempty"`
	Password *corev1.SecretKeySelector `json:"password,omitempty"`
}

type RedisSentinelConfig struct {
	// Required Sentinel "service name" (aka master name) from sentinel.conf
	MasterName string `json:"masterName"`

	// At least one Sentinel endpoint; 2–3 recommended. Use host:port pairs.
	// Example: ["sentinel-0.redis.svc:26379", "sentinel-1.redis.svc:26379"]
	Endpoints []string `json:"endpoints"`

	// Auth to talk to the Sentinel daemons (control-plane). Optional.
	SentinelAuth *RedisAuth `json:"sentinelAuth,omitempty"`

	// Auth to talk to the Redis data nodes (data-plane). Optional.
	RedisAuth *RedisAuth `json:"redisAuth,omitempty"`

	// TLS for Sentinel connections (if your Sentinels expose TLS).
	SentinelTLS *TLS `json:"sentinelTLS,omitempty"`

	// TLS for Redis data nodes (redis). Often enabled even if Sentinel is plaintext.
	RedisTLS *TLS `json:"redisTLS,omitempty"`
}

// The RetryStrategy struct defines the configuration for handling operation retries in case of failures.
// It incorporates an Exponential BackOff strategy to control retry timing and specifies the actions to take upon failure.
type RetryStrategy struct {
	// BackOff specifies the parameters for the exponential backoff strategy, controlling how delays between retries should increase.
	BackOff *Backoff `json:"backoff,omitempty"`
	// OnFailure specifies the action to take when the specified retry strategy fails.
	// The possible values are:
	// 1. "retry": start another round of retrying the operation,
	// 2. "fallback": re-route the operation to a fallback sink and
	// 3. "drop": drop the operation and perform no further action.
	// The default action is to retry.
	OnFailure *OnFailureRetryStrategy `json:"onFailure,omitempty"`
}

// RollingUpdateStrategy is used to communicate parameter for RollingUpdateStrategyType.
type RollingUpdateStrategy struct {
	// The maximum number of pods that can be unavailable during the update.
	// Value can be an absolute number (ex: 5) or a percentage of desired pods (ex: 10%).
	// Absolute number is calculated from percentage by rounding down.
	// Defaults to 25%.
	// Example: when this is set to 30%, the old pods can be scaled down to 70% of desired pods
	// immediately when the rolling update starts. Once new pods are ready, old pods
	// can be scaled down further, followed by scaling up the new pods, ensuring
	// that the total number of pods available at all times during the update is at
	// least 70% of desired pods.
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

type SASL struct {
	// SASL mechanism to use
	Mechanism *SASLType `json:"mechanism"`
	// GSSAPI contains the kerberos config
	GSSAPI *GSSAPI `json:"gssapi"`
	// SASLPlain contains the sasl plain config
	Plain *SASLPlain `json:"plain"`
	// SASLSCRAMSHA256 contains the sasl plain config
	SCRAMSHA256 *SASLPlain `json:"scramsha256"`
	// SASLSCRAMSHA512 contains the sasl plain config
	SCRAMSHA512 *SASLPlain `json:"scramsha512"`
	// OAuth contains the oauth config
	OAuth *SASLOAuth `json:"oauth"`
}

type SASLOAuth struct {
	// ClientID refers to the secret that contains the client id
	ClientID *corev1.SecretKeySelector `json:"clientID"`
	// ClientSecret refers to the secret that contains the client secret
	ClientSecret *corev1.SecretKeySelector `json:"clientSecret"`
	// TokenEndpoint refers to the token endpoint
	TokenEndpoint string `json:"tokenEndpoint"`
}

type SASLPlain struct {
	// UserSecret refers to the secret that contains the user
	UserSecret *corev1.SecretKeySelector `json:"userSecret"`
	// PasswordSecret refers to the secret that contains the password
	PasswordSecret *corev1.SecretKeySelector `json:"passwordSecret"`
	Handshake      bool                      `json:"handshake"`
}

// SASLType describes the SASL type
type SASLType string

// Scale defines the parameters for autoscaling.
type Scale struct {
	// Whether to disable autoscaling.
	// Set to "true" when using Kubernetes HPA or any other 3rd party autoscaling strategies.
	Disabled bool `json:"disabled,omitempty"`
	// Minimum replicas.
	Min *int32 `json:"min,omitempty"`
	// Maximum replicas.
	Max *int32 `json:"max,omitempty"`
	// Lookback seconds to calculate the average pending messages and processing rate.
	LookbackSeconds *uint32 `json:"lookbackSeconds,omitempty"`
	// After scaling down the source vertex to 0, sleep how many seconds before scaling the source vertex back up to peek.
	ZeroReplicaSleepSeconds *uint32 `json:"zeroReplicaSleepSeconds,omitempty"`
	// TargetProcessingSeconds is used to tune the aggressiveness of autoscaling for source vertices, it measures how fast
	// you want the vertex to process all the pending messages. Typically increasing the value, which leads to lower processing
	// rate, thus less replicas. It's only effective for source vertices.
	TargetProcessingSeconds *uint32 `json:"targetProcessingSeconds,omitempty"`
	// TargetBufferAvailability is used to define the target percentage of the buffer availability.
	// A valid and meaningful value should be less than the BufferUsageLimit defined in the Edge spec (or Pipeline spec), for example, 50.
	// It only applies to UDF and Sink vertices because only they have buffers to read.
	TargetBufferAvailability *uint32 `json:"targetBufferAvailability,omitempty"`
	// DeprecatedReplicasPerScale defines the number of maximum replicas that can be changed in a single scale up or down operation.
	// The is use to prevent from too aggressive scaling operations
	// Deprecated: Use ReplicasPerScaleUp and ReplicasPerScaleDown instead
	DeprecatedReplicasPerScale *uint32 `json:"replicasPerScale,omitempty"`
	// ScaleUpCooldownSeconds defines the cooldown seconds after a scaling operation, before a follow-up scaling up.
	// It defaults to the CooldownSeconds if not set.
	ScaleUpCooldownSeconds *uint32 `json:"scaleUpCooldownSeconds,omitempty"`
	// ScaleDownCooldownSeconds defines the cooldown seconds after a scaling operation, before a follow-up scaling down.
	// It defaults to the CooldownSeconds if not set.
	ScaleDownCooldownSeconds *uint32 `json:"scaleDownCooldownSeconds,omitempty"`
	// ReplicasPerScaleUp defines the number of maximum replicas that can be changed in a single scaled up operation.
	// The is use to prevent from too aggressive scaling up operations
	ReplicasPerScaleUp *uint32 `json:"replicasPerScaleUp,omitempty"`
	// ReplicasPerScaleDown defines the number of maximum replicas that can be changed in a single scaled down operation.
	// The is use to prevent from too aggressive scaling down operations
	ReplicasPerScaleDown *uint32 `json:"replicasPerScaleDown,omitempty"`
	// Cron defines time-based autoscaling overrides. During active cron windows, the window's
	// min/max replace the base min/max for scaling decisions.
	Cron *CronScheduling `json:"cron,omitempty"`
}

type ServeSink struct {
}

// ServingSource is the source vertex for ServingPipeline and should be used only with ServingPipeline.
type ServingSource struct {
}

// SessionWindow describes a session window
type SessionWindow struct {
	// Timeout is the duration of inactivity after which a session window closes.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

type Sink struct {
	AbstractSink `json:",inline"`
	// Fallback sink can be imagined as DLQ for primary Sink. The writes to Fallback sink will only be
	// initiated if the ud-sink response field sets it.
	Fallback *AbstractSink `json:"fallback,omitempty"`
	// OnSuccess sink allows triggering a secondary sink operation only after the primary sink completes successfully
	// The writes to OnSuccess sink will only be initiated if the ud-sink response field sets it.
	// A new Message crafted in the Primary sink can be written on the OnSuccess sink.
	OnSuccess *AbstractSink `json:"onSuccess,omitempty"`
	// RetryStrategy struct encapsulates the settings for retrying operations in the event of failures.
	RetryStrategy RetryStrategy `json:"retryStrategy,omitempty"`
}

// SlidingWindow describes a sliding window
type SlidingWindow struct {
	// Length is the duration of the sliding window.
	Length *metav1.Duration `json:"length,omitempty"`
	// Slide is the slide parameter that controls the frequency at which the sliding window is created.
	Slide *metav1.Duration `json:"slide,omitempty"`
	// Streaming should be set to true if the reduce udf is streaming.
	Streaming bool `json:"streaming,omitempty"`
}

type Source struct {
	Generator     *GeneratorSource `json:"generator,omitempty"`
	Kafka         *KafkaSource     `json:"kafka,omitempty"`
	HTTP          *HTTPSource      `json:"http,omitempty"`
	Nats          *NatsSource      `json:"nats,omitempty"`
	UDTransformer *UDTransformer   `json:"transformer,omitempty"`
	UDSource      *UDSource        `json:"udsource,omitempty"`
	JetStream     *JetStreamSource `json:"jetstream,omitempty"`
	Serving       *ServingSource   `json:"serving,omitempty"`
	Pulsar        *PulsarSource    `json:"pulsar,omitempty"`
	Sqs           *SqsSource       `json:"sqs,omitempty"`
}

type SqsSink struct {
	// AWSRegion is the AWS Region where the SQS queue is located
	AWSRegion string `json:"awsRegion"`

	// QueueName is the name of the SQS queue
	QueueName string `json:"queueName"`

	// QueueOwnerAWSAccountID is the queue owner aws account id
	QueueOwnerAWSAccountID string `json:"queueOwnerAWSAccountID"`

	// AssumeRole contains the configuration for AWS STS assume role.
	// When specified, the SQS client will assume the specified role for authentication.
	AssumeRole *AWSAssumeRole `json:"assumeRole,omitempty"`
}

// SqsSource represents the configuration of an AWS SQS source
type SqsSource struct {
	// AWSRegion is the AWS Region where the SQS queue is located
	AWSRegion string `json:"awsRegion"`

	// QueueName is the name of the SQS queue
	QueueName string `json:"queueName"`

	// QueueOwnerAWSAccountID is the queue owner aws account id
	QueueOwnerAWSAccountID string `json:"queueOwnerAWSAccountID"`

	// VisibilityTimeout is the duration (in seconds) that the received messages are hidden from subsequent
	// retrieve requests after being retrieved by a ReceiveMessage request.
	// Valid values: 0-43200 (12 hours)
	VisibilityTimeout *int32 `json:"visibilityTimeout,omitempty"`

	// MaxNumberOfMessages is the maximum number of messages to return in a single poll.
	// Valid values: 1-10
	// Defaults to 1
	MaxNumberOfMessages *int32 `json:"maxNumberOfMessages,omitempty"`

	// WaitTimeSeconds is the duration (in seconds) for which the call waits for a message to arrive
	// in the queue before returning. If a message is available, the call returns sooner than WaitTimeSeconds.
	// Valid values: 0-20
	// Defaults to 0 (short polling)
	WaitTimeSeconds *int32 `json:"waitTimeSeconds,omitempty"`

	// EndpointURL is the custom endpoint URL for the AWS SQS API.
	// This is useful for testing with localstack or when using VPC endpoints.
	EndpointURL *string `json:"endpointUrl,omitempty"`

	// AttributeNames is a list of attributes that need to be returned along with each message.
	// Valid values: All | Policy | VisibilityTimeout | MaximumMessageSize | MessageRetentionPeriod |
	// ApproximateNumberOfMessages | ApproximateNumberOfMessagesNotVisible | CreatedTimestamp |
	// LastModifiedTimestamp | QueueArn | ApproximateNumberOfMessagesDelayed | DelaySeconds |
	// ReceiveMessageWaitTimeSeconds | RedrivePolicy | FifoQueue | ContentBasedDeduplication |
	// KmsMasterKeyId | KmsDataKeyReusePeriodSeconds | DeduplicationScope | FifoThroughputLimit |
	// RedriveAllowPolicy | SqsManagedSseEnabled
	AttributeNames []string `json:"attributeNames,omitempty"`

	// MessageAttributeNames is a list of message attributes that need to be returned along with each message.
	MessageAttributeNames []string `json:"messageAttributeNames,omitempty"`

	// AssumeRole contains the configuration for AWS STS assume role.
	// When specified, the SQS client will assume the specified role for authentication.
	AssumeRole *AWSAssumeRole `json:"assumeRole,omitempty"`
}

type TLS struct {
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// CACertSecret refers to the secret that contains the CA cert
	CACertSecret *corev1.SecretKeySelector `json:"caCertSecret,omitempty"`
	// CertSecret refers to the secret that contains the cert
	CertSecret *corev1.SecretKeySelector `json:"certSecret,omitempty"`
	// KeySecret refers to the secret that contains the key
	KeySecret *corev1.SecretKeySelector `json:"keySecret,omitempty"`
}

type TagConditions struct {
	// Operator specifies the type of operation that should be used for conditional forwarding
	// value could be "and", "or", "not"
	Operator *LogicOperator `json:"operator"`
	// Values tag values for conditional forwarding
	Values []string `json:"values"`
}

type UDF struct {
	Container     *Container     `json:"container"`
	GroupBy       *GroupBy       `json:"groupBy"`
	RetryStrategy *RetryStrategy `json:"retryStrategy,omitempty"`
}

type UDSink struct {
	Container *Container `json:"container"`
}

type UDSource struct {
	Container *Container `json:"container"`
}

type UDTransformer struct {
	Container *Container `json:"container"`
	// RetryStrategy struct encapsulates the settings for retrying operations in the event of failures.
	RetryStrategy *RetryStrategy `json:"retryStrategy,omitempty"`
}

// UpdateStrategy indicates the strategy that the
// controller will use to perform updates for Vertex or MonoVertex.
type UpdateStrategy struct {
	// Type indicates the type of the StatefulSetUpdateStrategy.
	// Default is RollingUpdate.
	Type UpdateStrategyType `json:"type,omitempty"`
	// RollingUpdate is used to communicate parameters when Type is RollingUpdateStrategy.
	RollingUpdate *RollingUpdateStrategy `json:"rollingUpdate,omitempty"`
}

// UpdateStrategyType is a string enumeration type that enumerates
// all possible update strategies.
type UpdateStrategyType string

// Window describes windowing strategy
type Window struct {
	Fixed       *FixedWindow       `json:"fixed"`
	Sliding     *SlidingWindow     `json:"sliding"`
	Session     *SessionWindow     `json:"session"`
	Accumulator *AccumulatorWindow `json:"accumulator"`
}
