package mvconvert

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

// udContainer adds a Numaflow user-defined container as a sidecar with
// the environment Numaflow gives it.
func (c *converter) udContainer(p, name, containerType string, x *nf.Container) {
	if x == nil || x.Image == "" {
		c.fail(p+".container.image", "required: the image of the user-defined container")
	}
	cp := p + ".container"
	env := []corev1.EnvVar{
		{Name: "NUMAFLOW_UD_CONTAINER_TYPE", Value: containerType},
		{Name: "NUMAFLOW_MONO_VERTEX_NAME", Value: c.mv.Name},
	}
	if name == "udsource" {
		bs, to := uint64(500), time.Second
		if l := c.mv.Spec.Limits; l != nil {
			if l.ReadBatchSize != nil {
				bs = *l.ReadBatchSize
			}
			if l.ReadTimeout != nil {
				to = l.ReadTimeout.Duration
			}
		}
		env = append(env,
			corev1.EnvVar{Name: "NUMAFLOW_READ_BATCH_SIZE", Value: strconv.FormatUint(bs, 10)},
			corev1.EnvVar{Name: "NUMAFLOW_READ_TIMEOUT_MS", Value: strconv.FormatInt(to.Milliseconds(), 10)})
	}
	for i, e := range x.Env {
		c.checkEnvSource(fmt.Sprintf("%s.env[%d]", cp, i), e)
	}
	ctr := corev1.Container{
		Name:            name,
		Image:           x.Image,
		Command:         x.Command,
		Args:            x.Args,
		Env:             append(env, x.Env...),
		EnvFrom:         x.EnvFrom,
		Resources:       x.Resources,
		SecurityContext: x.SecurityContext,
		VolumeMounts:    append([]corev1.VolumeMount{{Name: udsVolume, MountPath: udsDir}}, x.VolumeMounts...),
	}
	if x.ImagePullPolicy != nil {
		ctr.ImagePullPolicy = *x.ImagePullPolicy
	}
	if x.ReadinessProbe != nil {
		c.warn(cp+".readinessProbe", "dropped, as Numaflow ignores it on a user-defined container (it probes them for liveness only); the runner's /healthz answers 503 while this container is away")
	}
	if x.LivenessProbe != nil {
		ctr.LivenessProbe = sidecarLivenessProbe(x.LivenessProbe)
		c.feature("multi-container-probing", cp+".livenessProbe",
			"carried as Numaflow probes a user-defined container: GET /sidecar-livez on the runner's admin port with these timings (Numaflow's 30s delay, 60s period, 30s timeout, 5 failures where unset)")
	}
	if len(x.Ports) > 0 {
		c.warn(cp+".ports", "dropped: Knative allows one port per pod, the runner's")
	}
	c.sidecars = append(c.sidecars, ctr)
}

// checkEnvSource records the feature flag an env var from the downward API
// needs.
func (c *converter) checkEnvSource(p string, e corev1.EnvVar) {
	if e.ValueFrom != nil && (e.ValueFrom.FieldRef != nil || e.ValueFrom.ResourceFieldRef != nil) {
		c.feature("kubernetes.podspec-fieldref", p+".valueFrom", "carried over")
	}
}

func (c *converter) udf() {
	u := c.mv.Spec.UDF
	if u == nil {
		if c.opts.UDFJSONata != "" {
			c.fail("--udf-to-jsonata", "the MonoVertex has no spec.udf to replace")
		}
		return
	}
	p := "spec.udf"
	if u.GroupBy != nil {
		c.fail(p+".groupBy", "a reduce UDF needs Numaflow's windows and inter-step buffer; Numaflow refuses it in a MonoVertex too")
	}
	if c.opts.UDFJSONata != "" {
		if c.opts.TransformerJSONata != "" {
			c.fail("--udf-to-jsonata", "the runner runs one JSONata stage; with --transformer-to-jsonata too, join the two expressions into one")
		}
		c.jsonata("MV_UDF", p, "--udf-to-jsonata", c.opts.UDFJSONata, image(u.Container))
	} else {
		c.setEnv("MV_UDF", "udmap", p)
		c.udContainer(p, "udf", "udf", u.Container)
	}
	c.stageRetry(p+".retryStrategy", "MV_UDF_", u.RetryStrategy)
}
