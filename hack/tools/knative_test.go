package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/apis"
	"knative.dev/serving/pkg/apis/autoscaling"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"
)

// pod is one pod template found in an example, with who owns it.
type pod struct {
	owner  string // kind/name
	labels map[string]string
	spec   corev1.PodSpec
}

// validateService decodes a serving.knative.dev/v1 Service strictly (the
// webhook rejects unknown fields), then runs Knative's defaulting and
// validation as the admission webhooks do on create, with the default
// config-defaults, config-features and config-autoscaler. Any error or
// warning fails the test.
func validateService(t *testing.T, what string, m manifest) *servingv1.Service {
	t.Helper()
	svc, err := admitService(m.raw)
	if err != nil {
		t.Errorf("%s: Service %s: %v", what, m.name, err)
	}
	return svc
}

// admitService is what Knative's webhooks do to a Service on create:
// strict decoding, SetDefaults, Validate. Warnings count as errors here.
func admitService(raw []byte) (*servingv1.Service, error) {
	svc := &servingv1.Service{}
	if err := yaml.UnmarshalStrict(raw, svc); err != nil {
		return nil, fmt.Errorf("does not decode into knative.dev/serving v1 types: %w", err)
	}
	ctx := apis.WithinCreate(context.Background())
	ctx = apis.WithUserInfo(ctx, &authv1.UserInfo{Username: "system:serviceaccount:default:ko-proof"})
	svc.SetDefaults(ctx)
	fe := svc.Validate(ctx)
	if errs := fe.Filter(apis.ErrorLevel); errs != nil {
		return svc, fmt.Errorf("Knative's webhook would reject it: %w", errs)
	}
	if warns := fe.Filter(apis.WarningLevel); warns != nil {
		return svc, fmt.Errorf("Knative's webhook would warn about it: %w", warns)
	}
	return svc, nil
}

// podsOf returns the pod templates of an example's workloads: Knative
// Services (validated as the webhook would) and ContainerSources and
// Deployments (their templates decoded strictly into core/v1 types).
func podsOf(t *testing.T, what string, docs []manifest) []pod {
	t.Helper()
	var pods []pod
	for _, m := range docs {
		switch {
		case m.apiVersion == "serving.knative.dev/v1" && m.kind == "Service":
			svc := validateService(t, what, m)
			if svc == nil {
				continue
			}
			labels := map[string]string{"serving.knative.dev/service": svc.Name}
			for k, v := range svc.Spec.Template.Labels {
				labels[k] = v
			}
			pods = append(pods, pod{owner: "Service/" + svc.Name, labels: labels, spec: svc.Spec.Template.Spec.PodSpec})
		case m.kind == "ContainerSource" || m.kind == "Deployment":
			tmpl := dig(m.obj, "spec", "template")
			if tmpl == nil {
				t.Errorf("%s: %s %s has no spec.template", what, m.kind, m.name)
				continue
			}
			b, _ := json.Marshal(tmpl)
			var pt corev1.PodTemplateSpec
			if err := yaml.UnmarshalStrict(b, &pt); err != nil {
				t.Errorf("%s: %s %s: spec.template is not a valid pod template: %v", what, m.kind, m.name, err)
				continue
			}
			if len(pt.Spec.Containers) == 0 {
				t.Errorf("%s: %s %s has no containers", what, m.kind, m.name)
			}
			pods = append(pods, pod{owner: m.kind + "/" + m.name, labels: pt.Labels, spec: pt.Spec})
		}
	}
	return pods
}

// envOf returns a container's environment as a map (value only).
func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// exampleService is a Knative Service of one of the deploy/ examples.
type exampleService struct {
	what string // "deploy/<example> Service <name>", for messages
	svc  servingv1.Service
	// env is the environment of its runner container (the one that sets
	// MV_NAME), nil when it has none.
	env map[string]string
}

// exampleServices decodes every serving.knative.dev/v1 Service of the
// deploy/ examples.
func exampleServices(t *testing.T, root string) []exampleService {
	t.Helper()
	var out []exampleService
	for _, ex := range exampleDirs(t, root) {
		docs, _ := readExample(t, root, ex)
		for _, m := range docs {
			if m.kind != "Service" || m.apiVersion != "serving.knative.dev/v1" {
				continue
			}
			s := exampleService{}
			if err := yaml.Unmarshal(m.raw, &s.svc); err != nil {
				t.Fatal(err)
			}
			s.what = fmt.Sprintf("deploy/%s Service %s", ex, s.svc.Name)
			for _, c := range s.svc.Spec.Template.Spec.Containers {
				if e := envOf(c); e["MV_NAME"] != "" {
					s.env = e
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// handsOutRunner reports whether a container of pods is given the runner
// image in its environment: the MonoVertex controller (deploy/controller)
// runs no runner itself, it writes the image into the Services it creates.
func handsOutRunner(pods []pod, runnerImages map[string]bool) bool {
	for _, p := range pods {
		for _, c := range p.spec.Containers {
			for _, e := range c.Env {
				if e.Value == "ko://"+module+"/cmd/runner" || runnerImages[e.Value] {
					return true
				}
			}
		}
	}
	return false
}

// isRunner reports whether c runs the runner image (ko:// or resolved).
func isRunner(c corev1.Container, runnerImages map[string]bool) bool {
	return c.Image == "ko://"+module+"/cmd/runner" || runnerImages[c.Image]
}

// checkWholeInstall checks that an example needs nothing from outside its
// own directory: everything its workloads and resources name is in it, and
// the runner's settings fit the pod they are in.
func checkWholeInstall(t *testing.T, what string, docs []manifest, pods []pod, runnerImages map[string]bool) {
	t.Helper()
	has := map[string]bool{}
	for _, m := range docs {
		has[m.kind+"/"+m.name] = true
	}
	need := func(owner, kind, name string) {
		if !has[kind+"/"+name] {
			t.Errorf("%s: %s refers to %s %q, which this example does not create", what, owner, kind, name)
		}
	}
	runners := 0
	for _, p := range pods {
		mounts := map[string]string{} // volume name -> containers mounting it
		for _, v := range p.spec.Volumes {
			if v.ConfigMap != nil && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional) {
				need(p.owner, "ConfigMap", v.ConfigMap.Name)
			}
		}
		for _, c := range p.spec.Containers {
			for _, vm := range c.VolumeMounts {
				mounts[vm.Name] += c.Name + " "
			}
		}
		for _, c := range p.spec.Containers {
			if !isRunner(c, runnerImages) {
				continue
			}
			runners++
			checkRunnerContainer(t, what, p, c, mounts, need)
		}
	}
	if runners == 0 && !handsOutRunner(pods, runnerImages) {
		t.Errorf("%s: no container runs the runner, and none is given its image to run (a controller's MV_CONTROLLER_RUNNER_IMAGE)", what)
	}
	for _, m := range docs {
		owner := m.kind + "/" + m.name
		switch m.kind {
		case "Trigger":
			need(owner, "Broker", str(m.obj, "spec", "broker"))
			if ref, ok := dig(m.obj, "spec", "subscriber", "ref").(map[string]any); ok {
				need(owner, str(ref, "kind"), str(ref, "name"))
			}
		case "ContainerSource", "SinkBinding":
			ref, ok := dig(m.obj, "spec", "sink", "ref").(map[string]any)
			if !ok && str(m.obj, "spec", "sink", "uri") == "" {
				t.Errorf("%s: %s has no sink", what, owner)
			}
			if ok {
				need(owner, str(ref, "kind"), str(ref, "name"))
			}
		case "PodMonitor":
			sel, _ := dig(m.obj, "spec", "selector", "matchLabels").(map[string]any)
			if len(sel) == 0 {
				t.Errorf("%s: %s selects no pods (spec.selector.matchLabels)", what, owner)
			}
			if !anyPodMatches(pods, sel) {
				t.Errorf("%s: %s selects %v, which matches no pod of this example", what, owner, sel)
			}
		}
	}
}

// checkRunnerContainer checks one runner container's settings against its pod.
func checkRunnerContainer(t *testing.T, what string, p pod, c corev1.Container, mounts map[string]string, need func(owner, kind, name string)) {
	t.Helper()
	owner := p.owner + " container " + c.Name
	env := envOf(c)
	if env["MV_NAME"] == "" {
		t.Errorf("%s: %s sets no MV_NAME (the mvtx_name label every dashboard and scaling query selects on)", what, owner)
	}
	mountedAt := func(dir string) (string, bool) {
		for _, vm := range c.VolumeMounts {
			if path.Clean(vm.MountPath) == path.Clean(dir) {
				return vm.Name, true
			}
		}
		return "", false
	}
	if dir := env["MV_CONFIG_DIR"]; dir != "" {
		if _, ok := mountedAt(dir); !ok {
			t.Errorf("%s: %s: MV_CONFIG_DIR=%s but nothing is mounted there", what, owner, dir)
		}
	}
	ud := 0
	for _, v := range []string{"MV_SOURCE", "MV_TRANSFORMER", "MV_SINK", "MV_FALLBACK_SINK"} {
		if strings.HasPrefix(env[v], "ud") {
			ud++
		}
	}
	if ud > 0 {
		dir := env["MV_UDS_DIR"]
		if dir == "" {
			dir = "/var/run/numaflow"
		}
		vol, ok := mountedAt(dir)
		if !ok {
			t.Errorf("%s: %s uses Numaflow user-defined containers but mounts nothing at %s", what, owner, dir)
		} else {
			sharers := strings.Fields(mounts[vol])
			if len(sharers)-1 < ud {
				t.Errorf("%s: %s needs %d user-defined containers sharing volume %q, found %v", what, owner, ud, vol, sharers)
			}
			for _, v := range p.spec.Volumes {
				if v.Name == vol && v.EmptyDir == nil {
					t.Errorf("%s: %s: the socket volume %q should be an emptyDir", what, owner, vol)
				}
			}
		}
	}
	if env["MV_TRANSFORMER"] == "cloudevents" || env["MV_TRANSFORMER_URL"] != "" {
		u, err := url.Parse(env["MV_TRANSFORMER_URL"])
		if err != nil || u.Host == "" {
			t.Errorf("%s: %s: MV_TRANSFORMER_URL %q is not a URL", what, owner, env["MV_TRANSFORMER_URL"])
		} else if h := u.Hostname(); strings.HasSuffix(h, ".svc.cluster.local") || strings.HasSuffix(h, ".svc") {
			need(owner, "Service", strings.Split(h, ".")[0])
		}
	}
	if env["MV_SINK"] == "cloudevents" && env["K_SINK"] == "" && !strings.HasPrefix(p.owner, "ContainerSource/") {
		t.Errorf("%s: %s: MV_SINK=cloudevents needs K_SINK, from a ContainerSource, a SinkBinding or the env", what, owner)
	}
	for _, port := range c.Ports {
		if port.ContainerPort == 9090 || port.ContainerPort == 9091 {
			t.Errorf("%s: %s declares port %d, which Knative reserves", what, owner, port.ContainerPort)
		}
	}
	for _, k := range []string{"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"} {
		if _, ok := env[k]; ok && strings.HasPrefix(p.owner, "Service/") {
			t.Errorf("%s: %s sets %s, which Knative sets itself", what, owner, k)
		}
	}
}

func anyPodMatches(pods []pod, sel map[string]any) bool {
	for _, p := range pods {
		ok := true
		for k, v := range sel {
			if p.labels[k] != fmt.Sprint(v) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestAdmitServiceRejects makes sure the validation above is not vacuous:
// mistakes Knative's webhook rejects in a multi-container Service are
// rejected here too.
func TestAdmitServiceRejects(t *testing.T) {
	const head = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  template:\n"
	for _, tc := range []struct{ name, spec, want string }{
		{"sidecar with a port", `    spec:
      containers:
        - image: runner
          ports: [{containerPort: 8080}]
        - image: sidecar
          ports: [{containerPort: 2469}]
`, "more than one container port"},
		{"reserved port", `    spec:
      containers:
        - image: runner
          ports: [{containerPort: 9090}]
`, "reserved port"},
		{"probe on a sidecar", `    spec:
      containers:
        - image: runner
          ports: [{containerPort: 8080}]
        - image: sidecar
          readinessProbe: {httpGet: {path: /, port: 2469}}
`, "must not set the field(s)"},
		{"unknown field", `    spec:
      containers:
        - image: runner
          portz: [{containerPort: 8080}]
`, "unknown field"},
		{"env from the downward API", `    spec:
      containers:
        - image: runner
          env: [{name: X, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
`, "must not set the field(s)"},
		{"unknown autoscaling class", `    metadata:
      annotations:
        autoscaling.knative.dev/class: nope.autoscaling.knative.dev
    spec:
      containers:
        - image: runner
`, "invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := admitService([]byte(head + tc.spec))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("admitService: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestManifests checks every example under deploy/ without building
// anything: the manifests as written, with ko:// images, are valid Knative
// objects and complete installs.
func TestManifests(t *testing.T) {
	root := repoRoot(t)
	for _, ex := range exampleDirs(t, root) {
		t.Run(ex, func(t *testing.T) {
			docs, raw := readExample(t, root, ex)
			what := "deploy/" + ex
			pods := podsOf(t, what, docs)
			checkWholeInstall(t, what, docs, pods, nil)
			for _, ip := range koImportPaths(raw) {
				if !strings.HasPrefix(ip, module+"/") {
					t.Errorf("%s: ko://%s is not a package of %s", what, ip, module)
				}
			}
		})
	}
}

// TestScalingWiring checks that what the Knative Services scale on is what
// the runner exports and is configured for: the HPA-class metric is served
// by a prometheus-adapter rule over the runner's metrics, the KEDA query
// selects the runner's mvtx_name, the target is the runner's
// MV_SCALE_TARGET_SECONDS and the bounds are its MV_MIN_SCALE/MV_MAX_SCALE.
func TestScalingWiring(t *testing.T) {
	root := repoRoot(t)
	exported := exportedMetrics(t, root)
	adapterDocs, err := readFileYAML(root, "deploy/prometheus-adapter/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	adapterQueries := map[string]string{} // custom metric name -> its queries
	rules, _ := dig(adapterDocs, "rules", "custom").([]any)
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		as, q := str(rule, "name", "as"), str(rule, "metricsQuery")
		if as == "" || !metricName.MatchString(str(rule, "seriesQuery")) {
			t.Errorf("prometheus-adapter rule %v: want name.as and a monovtx_* seriesQuery", rule)
			continue
		}
		if !strings.Contains(q, "<<.LabelMatchers>>") || !strings.Contains(q, "<<.GroupBy>>") {
			t.Errorf("prometheus-adapter rule %s: metricsQuery must select <<.LabelMatchers>> (the HPA's pods) and group by <<.GroupBy>>", as)
		}
		adapterQueries[as] = str(rule, "seriesQuery") + "\n" + q
	}
	var used []string
	for _, q := range adapterQueries {
		used = append(used, metricName.FindAllString(q, -1)...)
	}
	scaled := 0
	for _, s := range exampleServices(t, root) {
		what, env := s.what, s.env
		ann := s.svc.Spec.Template.Annotations
		if ann[autoscaling.ClassAnnotationKey] != autoscaling.HPA {
			continue
		}
		scaled++
		if env == nil {
			t.Errorf("%s: no runner container (none sets MV_NAME)", what)
			continue
		}
		for ann2env, def := range map[string]string{autoscaling.MinScaleAnnotationKey: "MV_MIN_SCALE", autoscaling.MaxScaleAnnotationKey: "MV_MAX_SCALE"} {
			if ann[ann2env] == "" {
				t.Errorf("%s: set %s: the HPA class needs both bounds", what, ann2env)
			}
			if env[def] != ann[ann2env] {
				t.Errorf("%s: %s=%q but %s is %q: keep them equal (the runner clamps its recommendation to them)", what, def, env[def], ann2env, ann[ann2env])
			}
		}
		target := env["MV_SCALE_TARGET_SECONDS"]
		if target == "" {
			target = "20" // the runner's default
		}
		metric := ann[autoscaling.MetricAnnotationKey]
		if metric == "monovtx_backlog_seconds" && ann[autoscaling.TargetAnnotationKey] != target {
			t.Errorf("%s: scales on %s with target %q but MV_SCALE_TARGET_SECONDS is %s: keep them equal",
				what, metric, ann[autoscaling.TargetAnnotationKey], target)
		}
		if so, ok := ann["autoscaling.knative.dev/scaled-object-override"]; ok {
			// A ScaledObject given whole to Knative's autoscaler-keda
			// extension: its kafka trigger must watch what the runner reads.
			checkKafkaScaledObject(t, what, so, env)
			continue
		}
		if q, ok := ann["autoscaling.knative.dev/prometheus-query"]; ok {
			// KEDA, through Knative's autoscaler-keda extension.
			if !strings.Contains(q, `mvtx_name="`+env["MV_NAME"]+`"`) {
				t.Errorf("%s: the KEDA query %q does not select mvtx_name=%q (the runner's MV_NAME)", what, q, env["MV_NAME"])
			}
			if strings.Contains(q, "vector(") && !strings.Contains(q, "vector("+target+")") {
				t.Errorf("%s: the KEDA query's fallback must be vector(%s), the target, which keeps the current count", what, target)
			}
			if mt := ann["autoscaling.knative.dev/metric-type"]; mt != "Value" {
				t.Errorf("%s: metric-type %q: the query is one cluster-wide P / R, so the HPA must take it as a Value (ceil(pods x value / target))", what, mt)
			}
			if _, err := url.ParseRequestURI(ann["autoscaling.knative.dev/prometheus-address"]); err != nil {
				t.Errorf("%s: prometheus-address: %v", what, err)
			}
			used = append(used, metricName.FindAllString(q, -1)...)
			continue
		}
		if _, ok := adapterQueries[metric]; !ok {
			t.Errorf("%s: scales on the Pods metric %q, which no rule in deploy/prometheus-adapter/values.yaml serves", what, metric)
		}
	}
	if scaled == 0 {
		t.Fatal("no example scales with the HPA class (prometheus-adapter or KEDA)")
	}
	for _, n := range used {
		if !exported[n] {
			t.Errorf("the scaling configuration queries %s, which the runner does not export (it has %v)", n, sortedKeys(exported))
		}
	}
}

// readFileYAML parses one YAML file (not a Kubernetes object) under root.
func readFileYAML(root, rel string) (map[string]any, error) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := yaml.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return out, nil
}

// checkKafkaScaledObject checks a scaled-object-override annotation: JSON
// with a kafka trigger whose brokers, group and topic are the runner's
// MV_KAFKA_* settings, and a positive lagThreshold.
func checkKafkaScaledObject(t *testing.T, what, raw string, env map[string]string) {
	t.Helper()
	var so struct {
		Spec struct {
			Triggers []struct {
				Type     string            `json:"type"`
				Metadata map[string]string `json:"metadata"`
			} `json:"triggers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(raw), &so); err != nil {
		t.Errorf("%s: scaled-object-override is not JSON: %v", what, err)
		return
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
		t.Errorf("%s: scaled-object-override: want one kafka trigger, got %+v", what, so.Spec.Triggers)
		return
	}
	md := so.Spec.Triggers[0].Metadata
	for key, v := range map[string]string{"bootstrapServers": "MV_KAFKA_BROKERS", "consumerGroup": "MV_KAFKA_GROUP", "topic": "MV_KAFKA_TOPIC"} {
		if md[key] == "" || md[key] != env[v] {
			t.Errorf("%s: kafka trigger %s=%q but %s=%q: keep them equal", what, key, md[key], v, env[v])
		}
	}
	if n, err := strconv.Atoi(md["lagThreshold"]); err != nil || n < 1 {
		t.Errorf("%s: kafka trigger lagThreshold=%q: want a positive whole number", what, md["lagThreshold"])
	}
	if p := md["offsetResetPolicy"]; p != "" && env["MV_KAFKA_START_OFFSET"] != "" && p != env["MV_KAFKA_START_OFFSET"] {
		t.Errorf("%s: kafka trigger offsetResetPolicy=%q but MV_KAFKA_START_OFFSET=%q", what, p, env["MV_KAFKA_START_OFFSET"])
	}
}
