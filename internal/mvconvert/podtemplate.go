package mvconvert

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

// build assembles the ConfigMap, the Service and the PodMonitor.
func (c *converter) build() {
	mv, spec := c.mv, &c.mv.Spec
	st := c.scale()
	c.maxUnavailable(&st)
	c.setEnv("MV_SCALE_TARGET_SECONDS", strconv.FormatUint(uint64(st.target), 10), "spec.scale.targetProcessingSeconds")
	c.setEnv("MV_MIN_SCALE", strconv.Itoa(int(st.min)), "spec.scale.min")
	c.setEnv("MV_MAX_SCALE", strconv.Itoa(int(st.max)), "spec.scale.max")

	labels := map[string]string{"app.kubernetes.io/name": "monovertex", "app.kubernetes.io/instance": mv.Name}
	objLabels := mergeMaps(labels, mv.Labels)
	objAnns := map[string]string{}
	for k, v := range mv.Annotations {
		if k != corev1.LastAppliedConfigAnnotation {
			objAnns[k] = v
		}
	}
	cmName := mv.Name + "-config"
	paused := strconv.FormatBool(c.paused)
	c.res.ConfigMap = &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: mv.Namespace, Labels: objLabels},
		Data:       mergeMaps(map[string]string{"paused": paused}, c.configData),
	}

	// The pod template's annotations: the autoscaler wiring first, then the
	// user's spec.metadata, which may not override it.
	anns := c.scalerAnnotations(st)
	tmplLabels := mergeMaps(labels, map[string]string{"numaflow.numaproj.io/mono-vertex-name": mv.Name})
	if m := spec.Metadata; m != nil {
		for _, k := range slices.Sorted(maps.Keys(m.Annotations)) {
			if _, ok := anns[k]; ok {
				c.fail(fmt.Sprintf("spec.metadata.annotations[%q]", k), "set by mvctl from spec.scale and --scaler; remove it")
			}
			anns[k] = m.Annotations[k]
		}
		for k, v := range m.Labels {
			tmplLabels[k] = v
		}
	}

	runner := c.runnerContainer()
	c.checkRunnerEnv(runner)
	pod := corev1.PodSpec{
		Containers: append([]corev1.Container{runner}, c.sidecars...),
		Volumes: append([]corev1.Volume{
			{Name: udsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: configVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cmName}}}},
		}, c.volumes...),
	}
	c.podTemplate(&pod)

	svcAnns := objAnns
	if c.opts.RolloutDuration != "" {
		svcAnns = mergeMaps(objAnns, map[string]string{"serving.knative.dev/rollout-duration": c.opts.RolloutDuration})
	}
	c.updateStrategy()
	timeout := int64(60)
	c.res.Service = &servingv1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "serving.knative.dev/v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: mv.Name, Namespace: mv.Namespace,
			Labels:      mergeMaps(objLabels, map[string]string{"networking.knative.dev/visibility": "cluster-local"}),
			Annotations: nilIfEmpty(svcAnns)},
		Spec: servingv1.ServiceSpec{ConfigurationSpec: servingv1.ConfigurationSpec{Template: servingv1.RevisionTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: tmplLabels, Annotations: anns},
			Spec:       servingv1.RevisionSpec{PodSpec: pod, TimeoutSeconds: &timeout},
		}}},
	}
	if c.opts.PodMonitor {
		c.res.PodMonitor = podMonitor(mv.Name, mv.Namespace, objLabels)
	}
	if spec.DaemonTemplate != nil {
		c.warn("spec.daemonTemplate", "dropped: there is no daemon Deployment; the runner serves Numaflow's daemon API itself when MV_DAEMON_PORT is set (4327, as the daemon's), /status and the metrics the daemon served (pending, rates) on its admin port, and the Knative autoscaler (%s) takes the daemon's scaling decisions", c.opts.Scaler)
	}
}

func (c *converter) updateStrategy() {
	u := c.mv.Spec.UpdateStrategy
	if u.Type != "" && u.Type != nf.RollingUpdate {
		c.fail("spec.updateStrategy.type", "%q: want RollingUpdate", u.Type)
	}
	if u.RollingUpdate != nil && u.RollingUpdate.MaxUnavailable != nil {
		if _, err := intstr.GetScaledValueFromIntOrPercent(u.RollingUpdate.MaxUnavailable, 1, true); err != nil {
			c.fail("spec.updateStrategy.rollingUpdate.maxUnavailable", "%v", err)
		}
	}
}

// maxUnavailable is Numaflow's updateStrategy.rollingUpdate.maxUnavailable
// as Knative's rollout can carry it. A Knative rollout starts the new
// revision with initial-scale pods, retires the old revision once they are
// ready, and the autoscaler takes it on from there: so at most replicas -
// initial-scale are unavailable, and maxUnavailable sets initial-scale to
// replicas - maxUnavailable (no lower than min-scale), which also keeps the
// surge of new pods that small, as Numaflow's update replaces pods without
// a surge. Without spec.replicas there is no count to take it from.
func (c *converter) maxUnavailable(st *scaleSettings) {
	u := c.mv.Spec.UpdateStrategy.RollingUpdate
	if u == nil || u.MaxUnavailable == nil {
		return
	}
	p := "spec.updateStrategy.rollingUpdate.maxUnavailable"
	r := c.mv.Spec.Replicas
	if r == nil || st.fixed {
		c.warn(p, "not carried: it counts from spec.replicas, which is not set (or scale is disabled, so every pod starts at once); the new revision starts with initial-scale pods and the old one is retired once they are ready")
		return
	}
	// Numaflow rounds a percentage down.
	n, _ := intstr.GetScaledValueFromIntOrPercent(u.MaxUnavailable, int(*r), false)
	st.initial = min(max(*r-int32(n), st.min), st.max)
}

// runnerContainer is the runner with its environment, probes and mounts,
// and spec.containerTemplate applied.
func (c *converter) runnerContainer() corev1.Container {
	yes, no := true, false
	ctr := corev1.Container{
		Name:           runnerName,
		Image:          c.opts.RunnerImage,
		Ports:          []corev1.ContainerPort{{Name: "http1", ContainerPort: servingPort}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}},
			PeriodSeconds: 10, FailureThreshold: 3},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: &yes, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		VolumeMounts: append([]corev1.VolumeMount{
			{Name: udsVolume, MountPath: udsDir},
			{Name: configVolume, MountPath: configDir, ReadOnly: true},
		}, c.mounts...),
	}
	env := c.env
	if t := c.mv.Spec.ContainerTemplate; t != nil {
		p := "spec.containerTemplate"
		if len(t.Resources.Requests) > 0 || len(t.Resources.Limits) > 0 || len(t.Resources.Claims) > 0 {
			ctr.Resources = t.Resources
		}
		ctr.ImagePullPolicy = t.ImagePullPolicy
		if t.SecurityContext != nil {
			ctr.SecurityContext = t.SecurityContext
		}
		for i, e := range t.Env {
			ep := fmt.Sprintf("%s.env[%d]", p, i)
			if from, ok := c.envFrom[e.Name]; ok && numaflowChoices[e.Name] {
				// No Numaflow field says these: the template may choose.
				c.warn(ep, "%s replaces mvctl's %s, which does as Numaflow does", e.Name, envValue(env, e.Name))
				env = slices.DeleteFunc(slices.Clone(env), func(v corev1.EnvVar) bool { return v.Name == e.Name })
			} else if ok {
				if from == "" {
					from = "mvctl"
				}
				c.fail(ep+".name", "%s is set from %s; change that field instead", e.Name, from)
			}
			c.checkEnvSource(ep, e)
		}
		env = append(env, t.Env...)
		ctr.EnvFrom = t.EnvFrom
		applyProbe(ctr.ReadinessProbe, t.ReadinessProbe)
		applyProbe(ctr.LivenessProbe, t.LivenessProbe)
	}
	ctr.Env = env
	return ctr
}

// numaflowChoices are the variables mvctl sets to do as Numaflow does
// where no Numaflow field says anything; containerTemplate.env may set
// them otherwise.
var numaflowChoices = map[string]bool{
	"MV_MESSAGE_IDS":          true,
	"MV_LOG_FORMAT":           true,
	"MV_HTTP_CLOUDEVENTS":     true,
	"MV_KAFKA_SINK_TIMESTAMP": true,
	"MV_STAGE_RETRY_STEPS":    true,
}

// envValue is the value of name in env.
func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return name + "=" + e.Value
		}
	}
	return name
}

// sidecarLivenessProbe is the liveness probe Numaflow puts on a
// user-defined container: numaflow-core's /sidecar-livez, which fails
// while any user container does not answer IsReady, here on the runner's
// admin port (plain HTTP, where Numaflow's is HTTPS), with the container's
// timings or Numaflow's UDContainerLivez defaults. A success threshold
// other than 1 is not allowed on a liveness probe, so it is not taken.
func sidecarLivenessProbe(p *nf.Probe) *corev1.Probe {
	lp := &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/sidecar-livez", Port: intstr.FromInt32(adminPort)}},
		InitialDelaySeconds: 30, PeriodSeconds: 60, TimeoutSeconds: 30, FailureThreshold: 5,
	}
	applyProbe(lp, &nf.Probe{InitialDelaySeconds: p.InitialDelaySeconds, TimeoutSeconds: p.TimeoutSeconds, PeriodSeconds: p.PeriodSeconds, FailureThreshold: p.FailureThreshold})
	return lp
}

func applyProbe(dst *corev1.Probe, p *nf.Probe) {
	if p == nil {
		return
	}
	set := func(d *int32, v *int32) {
		if v != nil {
			*d = *v
		}
	}
	set(&dst.InitialDelaySeconds, p.InitialDelaySeconds)
	set(&dst.TimeoutSeconds, p.TimeoutSeconds)
	set(&dst.PeriodSeconds, p.PeriodSeconds)
	set(&dst.SuccessThreshold, p.SuccessThreshold)
	set(&dst.FailureThreshold, p.FailureThreshold)
}

var reservedContainers = map[string]bool{runnerName: true, "udsource": true, "transformer": true, "udf": true, "udsink": true, "fb-udsink": true, "ons-udsink": true}

// podTemplate applies spec's pod-level fields (AbstractPodTemplate,
// volumes, init containers, sidecars).
func (c *converter) podTemplate(pod *corev1.PodSpec) {
	c.podVolumes(pod)
	c.podContainers(pod)
	c.podFields(pod)
}

// podVolumes carries spec.volumes over, with the feature flags each kind
// of volume needs; a name mvctl uses itself is refused.
func (c *converter) podVolumes(pod *corev1.PodSpec) {
	spec := &c.mv.Spec
	reservedVolumes := map[string]bool{}
	for _, v := range pod.Volumes {
		reservedVolumes[v.Name] = true
	}
	for i, v := range spec.Volumes {
		p := fmt.Sprintf("spec.volumes[%d]", i)
		if reservedVolumes[v.Name] {
			c.fail(p+".name", "%q is the name of a volume mvctl adds; rename it", v.Name)
		}
		switch {
		case v.PersistentVolumeClaim != nil:
			c.feature("kubernetes.podspec-persistent-volume-claim", p+".persistentVolumeClaim", "carried over")
			if !v.PersistentVolumeClaim.ReadOnly {
				c.feature("kubernetes.podspec-persistent-volume-write", p+".persistentVolumeClaim", "mounted writable")
			}
		case v.HostPath != nil:
			c.feature("kubernetes.podspec-volumes-hostpath", p+".hostPath", "carried over")
		case v.CSI != nil:
			c.feature("kubernetes.podspec-volumes-csi", p+".csi", "carried over")
		case v.Ephemeral != nil:
			c.feature("kubernetes.podspec-volumes-ephemeral", p+".ephemeral", "carried over")
		case v.Image != nil:
			c.feature("kubernetes.podspec-volumes-image", p+".image", "carried over")
		}
		pod.Volumes = append(pod.Volumes, v)
	}
}

// podContainers carries the init containers and sidecars over, without
// what Knative refuses on a sidecar (ports, probes).
func (c *converter) podContainers(pod *corev1.PodSpec) {
	spec := &c.mv.Spec
	for i, ic := range spec.InitContainers {
		p := fmt.Sprintf("spec.initContainers[%d]", i)
		if reservedContainers[ic.Name] {
			c.fail(p+".name", "%q is the name of a container mvctl adds; rename it", ic.Name)
		}
		for j, e := range ic.Env {
			c.checkEnvSource(fmt.Sprintf("%s.env[%d]", p, j), e)
		}
		pod.InitContainers = append(pod.InitContainers, ic)
	}
	if len(spec.InitContainers) > 0 {
		c.feature("kubernetes.podspec-init-containers", "spec.initContainers", "carried over")
	}
	for i, sc := range spec.Sidecars {
		p := fmt.Sprintf("spec.sidecars[%d]", i)
		if reservedContainers[sc.Name] {
			c.fail(p+".name", "%q is the name of a container mvctl adds; rename it", sc.Name)
		}
		sc := *sc.DeepCopy()
		if len(sc.Ports) > 0 {
			c.warn(p+".ports", "dropped: Knative allows one port per pod, the runner's")
			sc.Ports = nil
		}
		for _, pr := range []struct {
			name  string
			probe **corev1.Probe
		}{{"readinessProbe", &sc.ReadinessProbe}, {"livenessProbe", &sc.LivenessProbe}, {"startupProbe", &sc.StartupProbe}} {
			if *pr.probe != nil {
				c.warn(p+"."+pr.name, "dropped: Knative runs no probes on sidecars unless multi-container-probing is enabled")
				*pr.probe = nil
			}
		}
		for j, e := range sc.Env {
			c.checkEnvSource(fmt.Sprintf("%s.env[%d]", p, j), e)
		}
		pod.Containers = append(pod.Containers, sc)
	}
}

// podFields carries the pod-level fields of spec's AbstractPodTemplate
// over, each with the Knative feature flag it needs, or says why not.
func (c *converter) podFields(pod *corev1.PodSpec) {
	t := &c.mv.Spec.AbstractPodTemplate
	if len(t.NodeSelector) > 0 {
		pod.NodeSelector = t.NodeSelector
		c.feature("kubernetes.podspec-nodeselector", "spec.nodeSelector", "carried over")
	}
	if len(t.Tolerations) > 0 {
		pod.Tolerations = t.Tolerations
		c.feature("kubernetes.podspec-tolerations", "spec.tolerations", "carried over")
	}
	if t.Affinity != nil {
		pod.Affinity = t.Affinity
		c.feature("kubernetes.podspec-affinity", "spec.affinity", "carried over")
	}
	if t.SecurityContext != nil {
		pod.SecurityContext = t.SecurityContext
		c.feature("kubernetes.podspec-securitycontext", "spec.securityContext", "carried over")
	}
	pod.ImagePullSecrets = t.ImagePullSecrets
	pod.ServiceAccountName = t.ServiceAccountName
	if t.PriorityClassName != "" {
		pod.PriorityClassName = t.PriorityClassName
		c.feature("kubernetes.podspec-priorityclassname", "spec.priorityClassName", "carried over")
	}
	if t.Priority != nil {
		c.warn("spec.priority", "dropped: Knative does not allow it; the Priority admission controller sets it from priorityClassName")
	}
	if t.RuntimeClassName != nil {
		pod.RuntimeClassName = t.RuntimeClassName
		c.feature("kubernetes.podspec-runtimeclassname", "spec.runtimeClassName", "carried over")
	}
	if a := t.AutomountServiceAccountToken; a != nil {
		if *a {
			c.warn("spec.automountServiceAccountToken", "true dropped: it is Kubernetes' default, and Knative only allows false")
		} else {
			pod.AutomountServiceAccountToken = a
		}
	}
	if t.DNSPolicy != "" {
		pod.DNSPolicy = t.DNSPolicy
		c.feature("kubernetes.podspec-dnspolicy", "spec.dnsPolicy", "carried over")
	}
	if t.DNSConfig != nil {
		pod.DNSConfig = t.DNSConfig
		c.feature("kubernetes.podspec-dnsconfig", "spec.dnsConfig", "carried over")
	}
	if len(t.ResourceClaims) > 0 {
		c.fail("spec.resourceClaims", "Knative Services cannot claim dynamic resources (no field for it in serving v1)")
	}
}

func podMonitor(name, namespace string, labels map[string]string) map[string]any {
	md := map[string]any{"name": name, "labels": labels}
	if namespace != "" {
		md["namespace"] = namespace
	}
	return map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PodMonitor",
		"metadata":   md,
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"serving.knative.dev/service": name}},
			"podMetricsEndpoints": []any{map[string]any{
				"port": "user-port", "path": "/metrics", "interval": "15s",
				"relabelings": []any{
					map[string]any{"sourceLabels": []any{"__address__"}, "regex": `(.+):\d+`, "targetLabel": "__address__", "replacement": "${1}:" + strconv.Itoa(adminPort)},
					map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_label_serving_knative_dev_service"}, "targetLabel": "knative_service"},
					map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_label_serving_knative_dev_revision"}, "targetLabel": "knative_revision"},
				},
			}},
		},
	}
}
