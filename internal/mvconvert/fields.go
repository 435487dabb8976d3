package mvconvert

import (
	"fmt"
	"io"
	"strings"
)

// What happens to a field.
const (
	Mapped  = "mapped"  // carried over
	Flag    = "flag"    // carried over, with a warning naming a Knative feature flag
	Warns   = "warning" // dropped or changed on purpose, with one warning line
	Refused = "refused" // exit 2, one line naming the path and why
)

// Row is one line of the field table: what a MonoVertex field (or a whole
// subtree) becomes. Paths may start with a placeholder (see Placeholders).
type Row struct {
	Paths   []string
	Status  string
	Becomes string
}

// Placeholders stand for paths that repeat in the table.
var Placeholders = []struct {
	Name  string
	Means []string
}{
	{"<container>", []string{"spec.source.udsource.container", "spec.source.transformer.container", "spec.udf.container",
		"spec.sink.udsink.container", "spec.sink.fallback.udsink.container", "spec.sink.onSuccess.udsink.container"}},
	{"<sink>", []string{"spec.sink", "spec.sink.fallback", "spec.sink.onSuccess"}},
}

// Table is the field table mvctl explain prints and docs/from-numaflow.md's "Coming from
// Numaflow" repeats.
var Table = []Row{
	{[]string{"apiVersion", "kind"}, Mapped, "`numaflow.numaproj.io/v1alpha1` `MonoVertex` is converted; other Numaflow kinds exit 2; other objects in the input are passed through unchanged (with a warning)"},
	{[]string{"metadata.name"}, Mapped, "the Knative Service's name, `<name>-config` for the ConfigMap, `MV_NAME` (the `mvtx_name` metric label), and with `MV_MESSAGE_IDS=numaflow` the first part of every message ID, which sinks see as Numaflow's `<name>-<offset>-<index>`"},
	{[]string{"metadata.namespace"}, Mapped, "the namespace of every object"},
	{[]string{"metadata.labels", "metadata.annotations"}, Mapped, "the Service's and the ConfigMap's labels; the Service's annotations (kubectl's last-applied-configuration is dropped)"},
	{[]string{"metadata.generateName", "metadata.uid", "metadata.resourceVersion", "metadata.generation", "metadata.creationTimestamp", "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds", "metadata.managedFields", "metadata.selfLink", "metadata.ownerReferences", "metadata.finalizers", "status"}, Warns, "dropped: they belong to the MonoVertex object in the API server"},
	{[]string{"spec.replicas"}, Mapped, "`autoscaling.knative.dev/initial-scale` (clamped to min..max, as Numaflow does); with `scale.disabled` min-scale = max-scale = replicas; `0` pauses the runner instead (warning: a Knative Service keeps a pod)"},
	{[]string{"spec.source"}, Mapped, "exactly one source kind, else exit 2"},
	{[]string{"spec.source.generator"}, Mapped, "`MV_SOURCE=generator`"},
	{[]string{"spec.source.generator.rpu", "spec.source.generator.duration", "spec.source.generator.msgSize", "spec.source.generator.keyCount", "spec.source.generator.value"}, Mapped, "`MV_GENERATOR_RPU`, `_DURATION`, `_MSG_SIZE`, `_KEY_COUNT` (at most 255, as Numaflow keeps it in a byte), `_VALUE`"},
	{[]string{"spec.source.generator.jitter"}, Mapped, "`MV_GENERATOR_JITTER`: event times lag by a random whole number of seconds below it, as in Numaflow"},
	{[]string{"spec.source.generator.valueBlob"}, Mapped, "`MV_GENERATOR_VALUE_BLOB`: every message carries the decoded bytes (then `msgSize` and `value` are dropped with a warning: they do not apply, as in Numaflow)"},
	{[]string{"spec.source.http"}, Mapped, "`MV_SOURCE=http`, `MV_HTTP_CLOUDEVENTS=false` (every body as it is, as in Numaflow): POST to the Service's cluster-local URL (`/` or `/vertices/<name>`), `GET /health`"},
	{[]string{"spec.source.http.auth.token"}, Mapped, "`MV_HTTP_AUTH_TOKEN` from the secret (`secretKeyRef`)"},
	{[]string{"spec.source.http.service"}, Mapped, "the Knative Service is always reachable in the cluster (label `networking.knative.dev/visibility: cluster-local`)"},
	{[]string{"spec.source.http.ports"}, Warns, "dropped: Knative routes to the runner's `$PORT` (8080) and terminates TLS at its ingress"},
	{[]string{"spec.source.jetstream"}, Mapped, "`MV_SOURCE=jetstream`"},
	{[]string{"spec.source.jetstream.url", "spec.source.jetstream.stream", "spec.source.jetstream.consumer"}, Mapped, "`MV_JETSTREAM_URL`, `_STREAM`, `_CONSUMER` (default `numaflow-<name>-mvtx-<stream>`, numaflow-core's name for a MonoVertex's consumer, so the migrated runner binds the consumer Numaflow made)"},
	{[]string{"spec.source.jetstream.deliver_policy"}, Mapped, "`MV_JETSTREAM_DELIVER_POLICY`, Numaflow's grammar: `all`, `new`, `last`, `last_per_subject`, `by_start_sequence N`, `by_start_time EPOCH_MS` (in any case)"},
	{[]string{"spec.source.jetstream.filter_subjects"}, Mapped, "`MV_JETSTREAM_FILTER_SUBJECT` (one subject; more exit 2)"},
	{[]string{"spec.source.jetstream.auth.basic", "spec.source.jetstream.auth.token"}, Mapped, "`MV_JETSTREAM_USER` and `_PASSWORD`, or `MV_JETSTREAM_TOKEN`, from the secrets (`secretKeyRef`), trimmed by the runner as Numaflow trims them; basic, else nkey, else token, as in Numaflow (a user or token in `url` as well exits 2)"},
	{[]string{"spec.source.jetstream.auth.nkey"}, Mapped, "the Secret mounted, its path in `MV_JETSTREAM_NKEY_FILE`"},
	{[]string{"spec.source.jetstream.tls"}, Mapped, "`MV_JETSTREAM_TLS=true`; `insecureSkipVerify` to `MV_JETSTREAM_TLS_SKIP_VERIFY` (the Secrets are then ignored, as in Numaflow); `caCertSecret`, `certSecret`, `keySecret` mounted, their paths in `MV_JETSTREAM_TLS_CA_FILE`, `_CERT_FILE`, `_KEY_FILE`"},
	{[]string{"spec.source.kafka"}, Mapped, "`MV_SOURCE=kafka`, `MV_KAFKA_START_OFFSET=earliest` (Numaflow's `auto.offset.reset`)"},
	{[]string{"spec.source.kafka.brokers", "spec.source.kafka.topic", "spec.source.kafka.consumerGroup"}, Mapped, "`MV_KAFKA_BROKERS`, `MV_KAFKA_TOPIC` (one topic, or several comma-separated as in Numaflow), `MV_KAFKA_GROUP` (default: the name)"},
	{[]string{"spec.source.kafka.tls", "<sink>.kafka.tls"}, Mapped, "`MV_KAFKA_TLS`, `_TLS_SKIP_VERIFY`; each secret mounted under `/etc/monovertex/kafka/` for `MV_KAFKA_TLS_CA_FILE`, `_CERT_FILE`, `_KEY_FILE` (one setting shared by every Kafka part, else exit 2)"},
	{[]string{"spec.source.kafka.sasl", "<sink>.kafka.sasl"}, Mapped, "`MV_KAFKA_SASL_MECHANISM` (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`), `MV_KAFKA_SASL_USER`/`_PASSWORD` from the secrets (trimmed, as Numaflow trims them); `handshake` needs nothing (the client always handshakes); only the part the mechanism names is read, as in Numaflow"},
	{[]string{"spec.source.kafka.sasl.oauth", "<sink>.kafka.sasl.oauth"}, Mapped, "mechanism `OAUTHBEARER` (or `OAUTH`): `MV_KAFKA_SASL_OAUTH_CLIENT_ID` and `_CLIENT_SECRET` from the secrets, `MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT`; tokens by the client credentials grant, as librdkafka's OIDC method asks for them"},
	{[]string{"spec.source.kafka.sasl.gssapi", "<sink>.kafka.sasl.gssapi"}, Refused, "mechanism GSSAPI: the runner's Kafka client has no Kerberos"},
	{[]string{"spec.source.kafka.config", "<sink>.kafka.config"}, Mapped, "read as Numaflow reads it (`key: value` lines; a line without exactly one colon is ignored, with a warning naming its number): `auto.offset.reset` -> `MV_KAFKA_START_OFFSET`, `session.timeout.ms` -> `MV_KAFKA_SESSION_TIMEOUT`, `isolation.level` -> `MV_KAFKA_ISOLATION_LEVEL`; a sink's `message.max.bytes` -> `MV_KAFKA_MAX_MESSAGE_BYTES`, `message.timeout.ms`/`delivery.timeout.ms` -> `MV_KAFKA_PRODUCE_TIMEOUT`, `partitioner` -> `MV_KAFKA_PARTITIONER` (one value for every Kafka sink: the primary's, others warned); librdkafka tuning, `acks` other than all, `enable.idempotence`, and a consumer property on a sink or a producer property on a source (librdkafka ignores those) are dropped with a warning, as are the keys Numaflow sets after the config; `ssl.*`, `sasl.*`, a `security.protocol` without `tls` or `sasl` that is not plaintext, and any other property exit 2"},
	{[]string{"spec.source.kafka.kafkaVersion"}, Warns, "dropped: the client negotiates the protocol version"},
	{[]string{"spec.source.udsource"}, Mapped, "`MV_SOURCE=udsource`; the container as sidecar `udsource` (with `NUMAFLOW_READ_BATCH_SIZE`, `NUMAFLOW_READ_TIMEOUT_MS`, as Numaflow sets them)"},
	{[]string{"spec.source.transformer"}, Mapped, "`MV_TRANSFORMER=udtransformer`; the container as sidecar `transformer`"},
	{[]string{"spec.source.transformer.retryStrategy", "spec.udf.retryStrategy"}, Mapped, "the stage's own strategy, `MV_TRANSFORMER_RETRY_INTERVAL`, `_STEPS`, `_FACTOR`, `_CAP`, `_JITTER`, `MV_TRANSFORMER_ON_FAILURE` (and `MV_UDF_*`), every one set, with numaflow-core's defaults for what it leaves out, not the sink's; `onFailure: retry` takes 65535 tries, then hands the input back to the source, `drop` drops it after its steps, as numaflow-core's shared/retry.rs; `fallback` exits 2 (Numaflow refuses it too)"},
	{[]string{"spec.source.nats"}, Warns, "`MV_SOURCE=nats`: a core NATS queue subscription, at most once as in Numaflow (warning)"},
	{[]string{"spec.source.nats.url", "spec.source.nats.subject", "spec.source.nats.queue"}, Mapped, "`MV_NATS_URL`, `_SUBJECT`, `_QUEUE`"},
	{[]string{"spec.source.nats.auth.basic", "spec.source.nats.auth.token"}, Mapped, "`MV_NATS_USER` and `_PASSWORD`, or `MV_NATS_TOKEN`, as `jetstream.auth`"},
	{[]string{"spec.source.nats.auth.nkey"}, Mapped, "the Secret mounted, its path in `MV_NATS_NKEY_FILE`"},
	{[]string{"spec.source.nats.tls"}, Mapped, "as `jetstream.tls`, into `MV_NATS_TLS*`"},
	{[]string{"spec.source.pulsar"}, Refused, "no Pulsar source: no Pulsar broker can be run where the runner is built and tested (see Pulsar below); use a user-defined source"},
	{[]string{"spec.source.serving"}, Refused, "no such source in the runner: use jetstream, nats or a user-defined source (serving belongs to a ServingPipeline)"},
	{[]string{"spec.source.sqs"}, Mapped, "`MV_SOURCE=sqs`: deleted once final, a nack with a delay sets the visibility timeout (rounded up to whole seconds), pending from `ApproximateNumberOfMessages`; credentials from the default AWS chain (the `AWS_*` variables the containerTemplate sets from a Secret, or the pod's role), as in numaflow-core"},
	{[]string{"spec.source.sqs.queueName", "spec.source.sqs.awsRegion", "spec.source.sqs.queueOwnerAWSAccountID", "spec.source.sqs.endpointUrl"}, Mapped, "`MV_SQS_QUEUE_NAME`, `MV_SQS_REGION`, `MV_SQS_QUEUE_OWNER_ACCOUNT_ID`, `MV_SQS_ENDPOINT_URL`"},
	{[]string{"spec.source.sqs.visibilityTimeout", "spec.source.sqs.maxNumberOfMessages", "spec.source.sqs.waitTimeSeconds"}, Mapped, "`MV_SQS_VISIBILITY_TIMEOUT`, `MV_SQS_MAX_NUMBER_OF_MESSAGES`, `MV_SQS_WAIT_TIME_SECONDS` (a read long-polls no longer than its read timeout, as numaflow-core)"},
	{[]string{"spec.source.sqs.attributeNames", "spec.source.sqs.messageAttributeNames"}, Mapped, "`MV_SQS_ATTRIBUTE_NAMES` (the message's headers), `MV_SQS_MESSAGE_ATTRIBUTE_NAMES` (its user metadata group `sqs`), comma-separated"},
	{[]string{"spec.source.sqs.assumeRole", "<sink>.sqs.assumeRole"}, Mapped, "`MV_SQS_ASSUME_ROLE`, `MV_SQS_SINK_ASSUME_ROLE`, `MV_FALLBACK_SQS_ASSUME_ROLE`, `MV_ON_SUCCESS_SQS_ASSUME_ROLE`: the assumeRole as JSON, with Numaflow's field names"},
	{[]string{"spec.udf"}, Mapped, "`MV_UDF=udmap` (map, batch map or map stream, as the container's server-info says); the container as sidecar `udf`"},
	{[]string{"spec.udf.groupBy"}, Refused, "reduce needs Numaflow's windows and buffer; Numaflow refuses it in a MonoVertex too"},
	{[]string{"<container>.image", "<container>.command", "<container>.args", "<container>.env", "<container>.envFrom", "<container>.volumeMounts", "<container>.resources", "<container>.securityContext", "<container>.imagePullPolicy"}, Mapped, "the sidecar's, with the socket `emptyDir` at `/var/run/numaflow` and `NUMAFLOW_UD_CONTAINER_TYPE` as Numaflow sets it; env from the downward API adds a flag warning (`kubernetes.podspec-fieldref`)"},
	{[]string{"<container>.livenessProbe"}, Flag, "the sidecar's liveness probe, as Numaflow probes a user-defined container: GET `/sidecar-livez` on the runner's admin port (2469; 503 while any user container does not answer `IsReady`) with these timings, Numaflow's 30s delay, 60s period, 30s timeout and 5 failures where unset; Knative runs sidecar probes with `multi-container-probing`"},
	{[]string{"<container>.readinessProbe"}, Warns, "dropped, as Numaflow ignores it on a user-defined container (it probes them for liveness only); the runner's `/healthz` answers 503 while a container is away"},
	{[]string{"<container>.ports"}, Warns, "dropped: Knative allows one port per pod"},
	{[]string{"spec.sink"}, Mapped, "exactly one sink kind per tier, else exit 2"},
	{[]string{"<sink>.log", "<sink>.blackhole", "<sink>.udsink", "<sink>.kafka"}, Mapped, "`MV_SINK`, `MV_FALLBACK_SINK`, `MV_ON_SUCCESS_SINK` = `log` (with `MV_LOG_FORMAT=numaflow`: numaflow-core's JSON log record), `blackhole`, `udsink` (sidecars `udsink`, `fb-udsink`, `ons-udsink`) or `kafka` (with `MV_KAFKA_SINK_TIMESTAMP=write`: records are stamped when written, as Numaflow's Kafka sink leaves it to the producer; the runner's `Mv-Msg-Id` header is added)"},
	{[]string{"<sink>.kafka.brokers", "<sink>.kafka.topic"}, Mapped, "`MV_KAFKA_SINK_BROKERS` (one cluster for every Kafka sink); `MV_KAFKA_SINK_TOPIC`, `MV_FALLBACK_KAFKA_TOPIC`, `MV_ON_SUCCESS_KAFKA_TOPIC`"},
	{[]string{"<sink>.kafka.setKey"}, Mapped, "`MV_KAFKA_SINK_SET_KEY`, `MV_FALLBACK_KAFKA_SET_KEY`, `MV_ON_SUCCESS_KAFKA_SET_KEY` (Numaflow's default `false`: no record key)"},
	{[]string{"<sink>.pulsar"}, Refused, "no Pulsar sink: no Pulsar broker can be run where the runner is built and tested (see Pulsar below); use a user-defined sink"},
	{[]string{"<sink>.serve"}, Refused, "no such sink in the runner: use a user-defined sink (serve belongs to a ServingPipeline)"},
	{[]string{"<sink>.sqs"}, Mapped, "`MV_SINK`, `MV_FALLBACK_SINK`, `MV_ON_SUCCESS_SINK` = `sqs`: SendMessageBatch with per-entry results (a refused entry fails only its message); headers `DelaySeconds`, `MessageGroupId`, `MessageDeduplicationId` set those fields, as in numaflow-core"},
	{[]string{"<sink>.sqs.queueName", "<sink>.sqs.awsRegion", "<sink>.sqs.queueOwnerAWSAccountID"}, Mapped, "`MV_SQS_SINK_QUEUE_NAME`, `_REGION`, `_QUEUE_OWNER_ACCOUNT_ID` (fallback: `MV_FALLBACK_SQS_*`, onSuccess: `MV_ON_SUCCESS_SQS_*`)"},
	{[]string{"spec.sink.fallback", "spec.sink.onSuccess"}, Mapped, "the fallback and onSuccess tiers, as `spec.sink`"},
	{[]string{"spec.sink.retryStrategy.backoff.interval", "spec.sink.retryStrategy.backoff.steps", "spec.sink.retryStrategy.backoff.factor", "spec.sink.retryStrategy.backoff.cap", "spec.sink.retryStrategy.backoff.jitter"}, Mapped, "`MV_RETRY_INTERVAL`, `_STEPS`, `_FACTOR`, `_CAP`, `_JITTER` (Numaflow's checks: steps >= 1, factor >= 1, cap >= interval, 0 <= jitter < 1); steps as numaflow-core counts them: with `onFailure` fallback or drop 65535 when unset and kept in 16 bits (so a failing sink does reach the fallback or the drop; a transformer or UDF without its own retry strategy keeps retrying for ever, `MV_STAGE_RETRY_STEPS=unlimited`, as in Numaflow), ignored with retry"},
	{[]string{"spec.sink.retryStrategy.onFailure"}, Mapped, "`MV_ON_FAILURE` (`fallback` needs `spec.sink.fallback`)"},
	{[]string{"spec.limits.readBatchSize", "spec.limits.readTimeout", "spec.limits.concurrency"}, Mapped, "`MV_READ_BATCH_SIZE`, `MV_READ_TIMEOUT`, `MV_CONCURRENCY`"},
	{[]string{"spec.limits.rateLimit.max", "spec.limits.rateLimit.min", "spec.limits.rateLimit.rampUpDuration"}, Mapped, "`MV_RATE_LIMIT_MAX`, `_MIN` (min > max exits 2), `_RAMP_UP`"},
	{[]string{"spec.limits.rateLimit.modes"}, Mapped, "`MV_RATE_LIMIT_MODE` = `scheduled`, `relaxed`, `onlyIfUsed`, `goBackN`; `thresholdPercentage` -> `MV_RATE_LIMIT_THRESHOLD_PERCENT`, `coolDownPeriod` -> `_COOLDOWN`, `rampDownPercentage` -> `_RAMP_DOWN_PERCENT`"},
	{[]string{"spec.limits.rateLimit.resumedRampUp", "spec.limits.rateLimit.ttl"}, Mapped, "`MV_RATE_LIMIT_RESUMED_RAMP_UP`, `MV_RATE_LIMIT_TTL`"},
	{[]string{"spec.limits.rateLimit.store.inMemoryStore"}, Mapped, "`MV_RATE_LIMIT_STORE=memory` (per replica)"},
	{[]string{"spec.limits.rateLimit.store.redisStore.mode", "spec.limits.rateLimit.store.redisStore.url", "spec.limits.rateLimit.store.redisStore.db"}, Mapped, "mode `single`: `MV_RATE_LIMIT_STORE=redis`, `MV_RATE_LIMIT_REDIS_URL` (db as the URL's path)"},
	{[]string{"spec.limits.rateLimit.store.redisStore.sentinel"}, Refused, "Redis Sentinel: " + whySentinel},
	{[]string{"spec.scale.disabled"}, Mapped, "a fixed count: min-scale = max-scale = `spec.replicas`, Knative's default autoscaler, no metric"},
	{[]string{"spec.scale.min", "spec.scale.max"}, Mapped, "`autoscaling.knative.dev/min-scale`, `max-scale` and `MV_MIN_SCALE`, `MV_MAX_SCALE` (defaults 1 and Numaflow's 50; min 0 is raised to 1 with a warning: a pull worker at zero pods reads nothing and nothing would wake it)"},
	{[]string{"spec.scale.lookbackSeconds"}, Mapped, "`MV_LOOKBACK_SECONDS` (capped at 600, as Numaflow does)"},
	{[]string{"spec.scale.targetProcessingSeconds"}, Mapped, "`autoscaling.knative.dev/target`, `MV_SCALE_TARGET_SECONDS` and the KEDA threshold (default 20)"},
	{[]string{"spec.scale.scaleUpCooldownSeconds", "spec.scale.scaleDownCooldownSeconds", "spec.scale.replicasPerScaleUp", "spec.scale.replicasPerScaleDown", "spec.scale.replicasPerScale"}, Mapped, "`MV_SCALE_UP_COOLDOWN_SECONDS`, `_DOWN_COOLDOWN_SECONDS`, `MV_SCALE_REPLICAS_PER_UP`, `_PER_DOWN`; KEDA: the HPA `behavior` (a Pods policy of N replicas per cooldown each way, scale-down stabilization = its cooldown; Numaflow's defaults 90s and 2); HPA class: one `autoscaling.knative.dev/window` (warning)"},
	{[]string{"spec.scale.cron"}, Mapped, "KEDA: a `cron` trigger per schedule raising the floor to `min` in the window; a window's `max` equal to `scale.max` is carried as the ceiling, above it warns (KEDA's maxReplicaCount is one for all hours), below it exits 2 (nothing in Knative or KEDA lowers the ceiling for a window, so the Service could scale past it: set it to `scale.max`, or `scale.max` to it). HPA class: not carried, with a warning (it has no time-based trigger); the rest of `scale` is"},
	{[]string{"spec.scale.zeroReplicaSleepSeconds", "spec.scale.targetBufferAvailability"}, Warns, "dropped: the Service never scales to zero; buffer availability is for a pipeline's vertices"},
	{[]string{"spec.lifecycle.desiredPhase"}, Mapped, "`Paused` -> the ConfigMap's `paused: \"true\"` (the runner stays up and reads nothing), `Running` -> `\"false\"`"},
	{[]string{"spec.bypass"}, Mapped, "`MV_BYPASS_SINK`, `MV_BYPASS_FALLBACK`, `MV_BYPASS_ON_SUCCESS` as `operator:tag,tag`"},
	{[]string{"spec.streaming"}, Mapped, "`MV_STREAMING`"},
	{[]string{"spec.containerTemplate"}, Mapped, "the runner container (Numaflow's main container): resources, imagePullPolicy, securityContext, env (an `MV_` variable mvctl sets from a field exits 2; `MV_MESSAGE_IDS`, `MV_LOG_FORMAT`, `MV_HTTP_CLOUDEVENTS`, `MV_KAFKA_SINK_TIMESTAMP` and `MV_STAGE_RETRY_STEPS`, which mvctl sets to do as Numaflow does, may be replaced), envFrom, and the probes' timings"},
	{[]string{"spec.volumes", "spec.imagePullSecrets", "spec.serviceAccountName", "spec.metadata"}, Mapped, "the pod's; `spec.metadata` labels and annotations on the revision template; PVC, hostPath, CSI, ephemeral and image volumes add a flag warning"},
	{[]string{"spec.initContainers"}, Flag, "the pod's init containers (`kubernetes.podspec-init-containers`)"},
	{[]string{"spec.sidecars"}, Mapped, "extra containers; their ports and probes are dropped with a warning (one port per pod, no sidecar probes)"},
	{[]string{"spec.nodeSelector", "spec.tolerations", "spec.affinity", "spec.securityContext", "spec.priorityClassName", "spec.runtimeClassName", "spec.dnsPolicy", "spec.dnsConfig"}, Flag, "the pod's, each with a warning naming its flag: `kubernetes.podspec-nodeselector`, `-tolerations`, `-affinity`, `-securitycontext`, `-priorityclassname`, `-runtimeclassname`, `-dnspolicy`, `-dnsconfig`"},
	{[]string{"spec.automountServiceAccountToken"}, Mapped, "`false` is carried; `true` (Kubernetes' default) is dropped with a warning"},
	{[]string{"spec.priority"}, Warns, "dropped: Knative does not allow it; it follows from priorityClassName"},
	{[]string{"spec.resourceClaims"}, Refused, "a Knative Service cannot claim dynamic resources"},
	{[]string{"spec.daemonTemplate"}, Warns, "dropped: there is no daemon Deployment; the runner serves Numaflow's daemon API itself (`MV_DAEMON_PORT`, see \"Numaflow's UI and CLI\" below), `/status` and the metrics, and the Knative autoscaler (HPA class or KEDA) replaces the daemon's scaling"},
	{[]string{"spec.updateStrategy.type"}, Mapped, "`RollingUpdate` is Knative's revision rollout: new pods ready before the old revision is retired; `--rollout-duration` sets `serving.knative.dev/rollout-duration`"},
	{[]string{"spec.updateStrategy.rollingUpdate.maxUnavailable"}, Mapped, "with `spec.replicas`: `autoscaling.knative.dev/initial-scale` = replicas - maxUnavailable (a percentage rounded down, as Numaflow; no lower than min-scale): a Knative rollout starts the new revision with that many pods and retires the old one once they are ready, so at most maxUnavailable are unavailable and the surge of new pods is that small; without `spec.replicas` (or with `scale.disabled`) dropped with a warning"},
}

// Why the Numaflow features in NotSupported cannot come over; mvctl's
// refusals and warnings say the same.
const (
	whySentinel = "the runner's redis store connects to one server and does not follow a Sentinel failover; set mode single with the URL of the primary (or of a Service that always points at it)"
	whyZero     = "a pull worker at zero pods reads nothing, and the backlog that scales it is exported by its own pods, so nothing would wake it (Numaflow's daemon peeks the source every zeroReplicaSleepSeconds instead); keep min 1, or pause it (lifecycle.desiredPhase: Paused) to stop reading"
)

// NotSupported are the Numaflow features a MonoVertex cannot bring over,
// each with what happens and why in one line; mvctl explain prints them
// after the field table.
var NotSupported = []struct{ What, Happens, Why string }{
	{"Python multiprocess map over TCP (pynumaflow's 2024 `MapMultiprocServer`, server-info `protocol: tcp`)", "the runner exits 2 at start naming `map.sock`",
		"the runner calls a map container over its Unix socket only and does not spread calls over per-process TCP ports; use a pynumaflow release whose `MapMultiprocServer` listens on `map.sock`, or `MapServer`"},
	{"Redis Sentinel (`spec.limits.rateLimit.store.redisStore.sentinel`)", "mvctl exits 2 naming the path", whySentinel},
	{"Scale to zero (`spec.scale.min: 0`)", "raised to 1 with a warning naming the path", whyZero},
}

// WriteTable writes the field table as Markdown, then the features that
// cannot come over.
func WriteTable(w io.Writer) {
	fmt.Fprintln(w, "`<container>` is each user-defined container: "+codeList(Placeholders[0].Means)+"; `<sink>` is "+codeList(Placeholders[1].Means)+".")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| field | | becomes |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range Table {
		fmt.Fprintf(w, "| %s | %s | %s |\n", codeList(r.Paths), r.Status, r.Becomes)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| not supported | what happens | why, and what to do |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, n := range NotSupported {
		fmt.Fprintf(w, "| %s | %s | %s |\n", n.What, n.Happens, n.Why)
	}
}

func codeList(paths []string) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = "`" + p + "`"
	}
	return strings.Join(q, ", ")
}

// expand returns the concrete paths a table path stands for.
func expand(path string) []string {
	for _, p := range Placeholders {
		if rest, ok := strings.CutPrefix(path, p.Name); ok {
			var out []string
			for _, m := range p.Means {
				out = append(out, m+rest)
			}
			return out
		}
	}
	return []string{path}
}

// RowFor returns the row that accounts for a concrete field path (its own
// or its nearest ancestor's), or nil.
func RowFor(path string) *Row {
	var best *Row
	bestLen := -1
	for i := range Table {
		for _, tp := range Table[i].Paths {
			for _, p := range expand(tp) {
				if (path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[")) && len(p) > bestLen {
					best, bestLen = &Table[i], len(p)
				}
			}
		}
	}
	return best
}

// TablePaths returns every concrete path the table names.
func TablePaths() []string {
	var out []string
	for _, r := range Table {
		for _, tp := range r.Paths {
			out = append(out, expand(tp)...)
		}
	}
	return out
}

// TablePathExpansions returns the concrete paths one table path stands for.
func TablePathExpansions(path string) []string { return expand(path) }
