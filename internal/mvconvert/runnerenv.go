package mvconvert

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	// Every adapter kind, so the runner's settings of each are checked.
	_ "github.com/monovertex/monovertex/adapters/all"
	"github.com/monovertex/monovertex/config"
	"github.com/monovertex/monovertex/runner"
)

// checkRunnerEnv runs the runner's own reading and validation of its
// environment (config.LoadEnv, the code the runner runs at start) on the
// environment of ctr, the runner container mvctl emits, with PORT as
// Knative sets it. A value the runner would refuse (it exits 2, and the
// Service crash-loops) is refused here instead, naming the field it came
// from and the variable. What only the pod holds is not known here: a
// value from a Secret gets a placeholder, and a refusal of it, or of a
// path into a volume the runner mounts (a TLS file, which the runner
// reads to check it), is left to the runner.
func (c *converter) checkRunnerEnv(ctr corev1.Container) {
	vars := map[string]string{"PORT": strconv.Itoa(servingPort)}
	paths := map[string]string{}
	fromPod := map[string]bool{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil {
			vars[e.Name], fromPod[e.Name] = "placeholder-for-"+e.Name, true
			continue
		}
		vars[e.Name] = e.Value
		for _, m := range ctr.VolumeMounts {
			if strings.HasPrefix(e.Value, strings.TrimSuffix(m.MountPath, "/")+"/") {
				fromPod[e.Name] = true
			}
		}
		if from := c.envFrom[e.Name]; from != "" {
			paths[e.Name] = from
		}
	}
	if t := c.mv.Spec.ContainerTemplate; t != nil {
		for i, e := range t.Env {
			paths[e.Name] = fmt.Sprintf("spec.containerTemplate.env[%d].value", i)
		}
	}
	_, err := config.LoadEnv(vars)
	if err == nil {
		return
	}
	var ce *runner.ConfigError
	if !errors.As(err, &ce) {
		c.fail("", "the runner would refuse its environment: %v", err)
	}
	if fromPod[ce.Var] {
		return
	}
	value := vars[ce.Var]
	if len(value) > 80 {
		value = value[:77] + "..."
	}
	path, by := paths[ce.Var], ""
	if path == "" {
		by = " (set by mvctl)"
	}
	c.fail(path, "becomes %s=%q%s, which the runner refuses at start (exit 2): %s", ce.Var, value, by, ce.Reason)
}
