package main

// --cluster: a deploy/ example in a Knative pod on the project's cluster
// (hack/cluster/up.sh) against the same programs, with the same
// environment, run as processes on this machine, in alternating rounds.

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var (
	clusterMode   = flag.Bool("cluster", false, "run the deploy/ examples in a Knative pod on the cluster hack/cluster/up.sh started, against the same programs run as processes here, and print the table (--only picks pipelines; --rounds, --warmup, --duration, --markdown apply)")
	clusterEnvArg = flag.String("cluster-env", "", "the cluster's env file (default $MONOVERTEX_CLUSTER_ENV, else /var/cache/monovertex-cluster/state/env)")
)

// podExample is a deploy/ example the --cluster run deploys.
type podExample struct {
	pipeline string // as the scenario names it
	dir      string // what ko apply -f takes: deploy/<example>/ or one file of it
	ksvc     string // its Knative Service (namespace default)
	adminEnv string // the runner's admin port variable's value in the pod
	input    int64  // messages the source holds per side, 0: endless
	// procsSide and podSide ready what a side reads before it is measured
	// (a broker and its input); procsSide returns the environment the
	// processes get instead of the pod's addresses. Nil: nothing to ready.
	procsSide func(ctx context.Context, c *clusterRun) (env []string, stop func(), err error)
	podSide   func(ctx context.Context, c *clusterRun) (stop func(), err error)
}

// clusterRun is what the sides share: the repository, the cluster's
// environment, the built programs.
type clusterRun struct {
	repo string
	env  []string
	bin  string
	// runnerCPU is the CPU request of the example's runner container.
	runnerCPU string
}

var podExamples = []podExample{
	{pipeline: "udsource->udtransformer->udsink", dir: "deploy/pull-runner", ksvc: "pull-runner", adminEnv: "2469"},
	{pipeline: "kafka->kafka", dir: "deploy/kafka-keda/kafka-hpa.yaml", ksvc: "kafka-hpa", adminEnv: "2469",
		input: kafkaInput, procsSide: kafkaProcsSide, podSide: kafkaPodSide},
}

// podContainer is what the run needs of a container of the example's pod.
type podContainer struct {
	Name      string `json:"name"`
	Image     string `json:"image"`
	Env       []struct{ Name, Value string }
	Resources struct {
		Requests map[string]string `json:"requests"`
		Limits   map[string]string `json:"limits"`
	} `json:"resources"`
}

// clusterRow is one pipeline's result.
type clusterRow struct {
	ex         podExample
	procs, pod []float64 // messages per second, per round
	// CPU per message written (µs) of the pod's containers, per round;
	// none when it could not be read.
	procsCPU, podCPU []float64
	resources        string
}

func runClusterBench(ctx context.Context, repo string, rounds int, warm, window time.Duration, mdPath string, only *regexp.Regexp) error {
	env, err := clusterEnv()
	if err != nil {
		return err
	}
	bin, err := os.MkdirTemp("", "mvcluster")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	var rows []clusterRow
	for _, ex := range podExamples {
		if !only.MatchString(ex.pipeline) {
			continue
		}
		containers, err := exampleContainers(ctx, repo, env, ex)
		if err != nil {
			return err
		}
		row := clusterRow{ex: ex, resources: describeResources(containers)}
		run := &clusterRun{repo: repo, env: env, bin: bin}
		for _, c := range containers {
			if c.Name == "runner" {
				run.runnerCPU = c.Resources.Requests["cpu"]
			}
			pkg, ok := strings.CutPrefix(c.Image, "ko://github.com/monovertex/monovertex/")
			if !ok {
				return fmt.Errorf("%s: container %s has image %s, not one of this module's ko:// images", ex.dir, c.Name, c.Image)
			}
			if out, err := command(ctx, repo, nil, "go", "build", "-o", filepath.Join(bin, c.Name), "./"+pkg).CombinedOutput(); err != nil {
				return fmt.Errorf("go build ./%s: %v\n%s", pkg, err, out)
			}
		}
		for r := 0; r < rounds; r++ {
			m, err := measureProcesses(ctx, run, ex, containers, warm, window)
			if err != nil {
				return fmt.Errorf("%s as processes: %w", ex.pipeline, err)
			}
			row.procs = append(row.procs, m.rate)
			row.procsCPU = m.addCPU(row.procsCPU)
			fmt.Printf("round %d  %-34s processes %10.0f msgs/s %s\n", r+1, ex.pipeline, m.rate, m.cpuText())
			m, err = measurePod(ctx, run, ex, warm, window)
			if err != nil {
				return fmt.Errorf("%s in a pod: %w", ex.pipeline, err)
			}
			row.pod = append(row.pod, m.rate)
			row.podCPU = m.addCPU(row.podCPU)
			fmt.Printf("round %d  %-34s pod       %10.0f msgs/s %s\n", r+1, ex.pipeline, m.rate, m.cpuText())
		}
		rows = append(rows, row)
	}
	table := clusterTable(rows, rounds, warm, window)
	fmt.Print("\n" + table)
	if mdPath != "" {
		return os.WriteFile(mdPath, []byte(table), 0o644)
	}
	return nil
}

// clusterEnv is this process' environment with the cluster's env file
// applied (KUBECONFIG, KO_DOCKER_REPO, PATH with kubectl and ko).
func clusterEnv() ([]string, error) {
	path := *clusterEnvArg
	if path == "" {
		path = os.Getenv("MONOVERTEX_CLUSTER_ENV")
	}
	if path == "" {
		path = "/var/cache/monovertex-cluster/state/env"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the cluster's env file: %w (start the cluster with bash hack/cluster/up.sh)", err)
	}
	defer f.Close()
	vars := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		vars[k] = os.Expand(v, func(name string) string { return vars[name] })
	}
	var env []string
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env, sc.Err()
}

func command(ctx context.Context, dir string, env []string, name string, args ...string) *exec.Cmd {
	if env != nil {
		for _, kv := range env {
			if p, ok := strings.CutPrefix(kv, "PATH="); ok {
				for _, d := range filepath.SplitList(p) {
					if _, err := os.Stat(filepath.Join(d, name)); err == nil {
						name = filepath.Join(d, name)
						break
					}
				}
			}
		}
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	return cmd
}

// exampleContainers reads the example's Knative Service as kubectl parses
// it (client side: the manifest's own env, images and resources).
func exampleContainers(ctx context.Context, repo string, env []string, ex podExample) ([]podContainer, error) {
	out, err := command(ctx, repo, env, "kubectl", "create", "--dry-run=client", "-o", "json", "-f", ex.dir).Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl create --dry-run=client -f %s: %w", ex.dir, err)
	}
	// One JSON object per document of the directory, one after another.
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var it struct {
			Kind     string `json:"kind"`
			Metadata struct{ Name string }
			Spec     struct {
				Template struct {
					Spec struct {
						Containers []podContainer `json:"containers"`
					}
				}
			}
		}
		if err := dec.Decode(&it); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("kubectl create --dry-run=client -f %s: %w", ex.dir, err)
		}
		if it.Kind == "Service" && it.Metadata.Name == ex.ksvc {
			cs := it.Spec.Template.Spec.Containers
			// Sidecars first: the runner waits for their sockets anyway.
			slices.SortStableFunc(cs, func(a, b podContainer) int {
				return runnerLast(a) - runnerLast(b)
			})
			return cs, nil
		}
	}
	return nil, fmt.Errorf("%s: no Knative Service %s", ex.dir, ex.ksvc)
}

func runnerLast(c podContainer) int {
	if c.Name == "runner" {
		return 1
	}
	return 0
}

func describeResources(cs []podContainer) string {
	var parts []string
	for _, c := range cs {
		d := c.Name + ": requests " + kv(c.Resources.Requests)
		if len(c.Resources.Limits) > 0 {
			d += ", limits " + kv(c.Resources.Limits)
		}
		parts = append(parts, d)
	}
	return strings.Join(parts, "; ")
}

func kv(m map[string]string) string {
	var s []string
	for k, v := range m {
		s = append(s, k+" "+v)
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// measureProcesses runs the pod's containers as processes with the pod's
// environment (the socket and config directories made here instead of
// the pod's volumes) and returns the runner's write rate.
func measureProcesses(ctx context.Context, run *clusterRun, ex podExample, cs []podContainer, warm, window time.Duration) (sideRate, error) {
	var extra []string
	if ex.procsSide != nil {
		env, stop, err := ex.procsSide(ctx, run)
		if err != nil {
			return sideRate{}, err
		}
		defer stop()
		extra = env
	}
	bin := run.bin
	dir, err := os.MkdirTemp("", "mvc")
	if err != nil {
		return sideRate{}, err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return sideRate{}, err
	}
	if err := os.WriteFile(filepath.Join(cfg, "paused"), []byte("false"), 0o644); err != nil {
		return sideRate{}, err
	}
	admin, err := freePort()
	if err != nil {
		return sideRate{}, err
	}
	port, err := freePort()
	if err != nil {
		return sideRate{}, err
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	}()
	for _, c := range cs {
		env := os.Environ()
		for _, e := range c.Env {
			env = append(env, e.Name+"="+e.Value)
		}
		env = append(env, "MV_UDS_DIR="+dir, "MV_CONFIG_DIR="+cfg, fmt.Sprintf("MV_ADMIN_PORT=%d", admin), fmt.Sprintf("PORT=%d", port))
		env = append(env, extra...) // the last of a duplicate variable wins
		cmd := exec.CommandContext(ctx, filepath.Join(bin, c.Name))
		cmd.Env, cmd.Dir = env, dir
		log, err := os.Create(filepath.Join(dir, c.Name+".log"))
		if err != nil {
			return sideRate{}, err
		}
		defer log.Close()
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return sideRate{}, err
		}
		procs = append(procs, cmd)
	}
	m, err := measureRate(ctx, fmt.Sprintf("http://127.0.0.1:%d", admin), warm, window, ex.input, procsCPU(procs))
	if err != nil {
		for _, c := range cs {
			if b, rerr := os.ReadFile(filepath.Join(dir, c.Name+".log")); rerr == nil {
				err = fmt.Errorf("%w\n%s's log ends:\n%s", err, c.Name, tail(string(b), 1500))
			}
		}
	}
	return m, err
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// measurePod applies the example with ko as a user does, waits for its
// pod, measures the runner's write rate through a port-forward, and
// deletes the example again.
func measurePod(ctx context.Context, run *clusterRun, ex podExample, warm, window time.Duration) (sideRate, error) {
	repo, env := run.repo, run.env
	if ex.podSide != nil {
		stop, err := ex.podSide(ctx, run)
		if err != nil {
			return sideRate{}, err
		}
		defer stop()
	}
	if out, err := command(ctx, repo, env, "ko", "apply", "-f", ex.dir).CombinedOutput(); err != nil {
		return sideRate{}, fmt.Errorf("ko apply -f %s: %v\n%s", ex.dir, err, out)
	}
	defer func() {
		_ = command(context.Background(), repo, env, "kubectl", "delete", "-f", ex.dir, "--wait=true", "--timeout=180s").Run()
		// The next round starts once the pod is gone (the runner drains
		// for up to its shutdown timeout).
		for i := 0; i < 120; i++ {
			out, _ := command(context.Background(), repo, env, "kubectl", "get", "pods", "-l", "serving.knative.dev/service="+ex.ksvc, "-o", "name").Output()
			if strings.TrimSpace(string(out)) == "" {
				return
			}
			time.Sleep(2 * time.Second)
		}
	}()
	if out, err := command(ctx, repo, env, "kubectl", "wait", "--for=condition=Ready", "--timeout=300s", "ksvc/"+ex.ksvc).CombinedOutput(); err != nil {
		return sideRate{}, fmt.Errorf("ksvc/%s not Ready: %v\n%s", ex.ksvc, err, out)
	}
	var pod string
	for i := 0; i < 60 && pod == ""; i++ {
		out, _ := command(ctx, repo, env, "kubectl", "get", "pods", "-l", "serving.knative.dev/service="+ex.ksvc,
			"--field-selector=status.phase=Running", "-o", "jsonpath={.items[0].metadata.name}").Output()
		if pod = strings.TrimSpace(string(out)); pod == "" {
			time.Sleep(2 * time.Second)
		}
	}
	if pod == "" {
		return sideRate{}, fmt.Errorf("no running pod of %s", ex.ksvc)
	}
	uid, _ := command(ctx, repo, env, "kubectl", "get", "pod", pod, "-o", "jsonpath={.metadata.uid}").Output()
	local, err := freePort()
	if err != nil {
		return sideRate{}, err
	}
	pf := command(ctx, repo, env, "kubectl", "port-forward", "pod/"+pod, fmt.Sprintf("%d:%s", local, ex.adminEnv))
	if err := pf.Start(); err != nil {
		return sideRate{}, err
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	return measureRate(ctx, fmt.Sprintf("http://127.0.0.1:%d", local), warm, window, ex.input, podCPU(strings.TrimSpace(string(uid))))
}

// sideRate is a side's measured window: messages written per second, and
// its containers' CPU per message written (µs; 0 when it could not be read).
type sideRate struct{ rate, cpuPerMsg float64 }

func (m sideRate) addCPU(to []float64) []float64 {
	if m.cpuPerMsg > 0 {
		to = append(to, m.cpuPerMsg)
	}
	return to
}

func (m sideRate) cpuText() string {
	if m.cpuPerMsg == 0 {
		return ""
	}
	return fmt.Sprintf("%7.1f µs CPU/msg", m.cpuPerMsg)
}

// sideCPU reads the CPU a side's containers used so far; false when it
// cannot.
type sideCPU func() (time.Duration, bool)

// procsCPU is the processes' user and system time from /proc.
func procsCPU(procs []*exec.Cmd) sideCPU {
	return func() (time.Duration, bool) {
		var sec float64
		for _, p := range procs {
			v, err := procCPUSeconds(p.Process.Pid)
			if err != nil {
				return 0, false
			}
			sec += v
		}
		return time.Duration(sec * float64(time.Second)), true
	}
}

// podCPU is the pod's cgroup's CPU time (all its containers, the
// queue-proxy and pause included): the cluster runs on this machine, so its
// cgroup is here.
func podCPU(uid string) sideCPU {
	dir := findPodCgroup(uid, "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup")
	return func() (time.Duration, bool) { return cgroupCPU(dir) }
}

// findPodCgroup returns the first directory under roots named for the
// pod's UID (cgroupfs' pod<uid>, systemd's ...-pod<uid_with_underscores>.slice),
// or "".
func findPodCgroup(uid string, roots ...string) string {
	if uid == "" {
		return ""
	}
	names := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"}
	dir := ""
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			for _, n := range names {
				if strings.HasSuffix(d.Name(), n) {
					dir = path
					return fs.SkipAll
				}
			}
			return nil
		})
		if dir != "" {
			break
		}
	}
	return dir
}

// cgroupCPU reads the CPU time a cgroup used: cgroup v1's cpuacct.usage
// (ns), else v2's cpu.stat usage_usec; false when dir has neither.
func cgroupCPU(dir string) (time.Duration, bool) {
	if dir == "" {
		return 0, false
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns), err == nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond, err == nil
		}
	}
	return 0, false
}

// measureRate waits for the runner's /status, lets it warm up, and returns
// the messages written per second over the window, and the CPU per message
// cpu measured over it; a source of input messages must not run dry before
// the window ends.
func measureRate(ctx context.Context, base string, warm, window time.Duration, input int64, cpu sideCPU) (sideRate, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, _, err := written(ctx, base); err == nil {
			break
		} else if time.Now().After(deadline) {
			return sideRate{}, fmt.Errorf("%s/status: %w", base, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(warm)
	w0, t0, err := written(ctx, base)
	if err != nil {
		return sideRate{}, err
	}
	c0, ok0 := cpu()
	time.Sleep(window)
	c1, ok1 := cpu()
	w1, t1, err := written(ctx, base)
	if err != nil {
		return sideRate{}, err
	}
	if w1 <= w0 {
		return sideRate{}, fmt.Errorf("nothing written in %v (%d then %d)", window, w0, w1)
	}
	if input > 0 && w1 >= input*99/100 {
		return sideRate{}, fmt.Errorf("the input ran out: %d of %d written by the end of the window; shorten --warmup/--duration", w1, input)
	}
	m := sideRate{rate: float64(w1-w0) / t1.Sub(t0).Seconds()}
	if ok0 && ok1 {
		m.cpuPerMsg = float64((c1 - c0).Microseconds()) / float64(w1-w0)
	}
	return m, nil
}

func written(ctx context.Context, base string) (int64, time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/status", nil)
	if err != nil {
		return 0, time.Time{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, time.Time{}, err
	}
	defer resp.Body.Close()
	at := time.Now()
	var st struct {
		Totals struct {
			Written int64 `json:"written"`
		} `json:"totals"`
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, at, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, at, fmt.Errorf("status %d", resp.StatusCode)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, at, err
	}
	return st.Totals.Written, at, nil
}

func clusterTable(rows []clusterRow, rounds int, warm, window time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| pipeline | processes (msgs/s, median of %d) | pod (msgs/s, median of %d) | pod / processes | CPU µs/msg (processes / pod) | resources in the example |\n|---|---|---|---|---|---|\n", rounds, rounds)
	for _, r := range rows {
		p, q := median(r.procs), median(r.pod)
		cpu := "-"
		if len(r.procsCPU) > 0 && len(r.podCPU) > 0 {
			cpu = fmt.Sprintf("%.1f / %.1f", median(r.procsCPU), median(r.podCPU))
		}
		fmt.Fprintf(&b, "| %s (`%s`) | %.0f | %.0f | %.2f | %s | %s |\n", r.ex.pipeline, r.ex.dir, p, q, q/p, cpu, r.resources)
	}
	fmt.Fprintf(&b, "\nEach round: the processes, then the pod, %v warm-up and %v measured each, from the runner's /status written count.\n", warm, window)
	return b.String()
}

// runClusterMain is main for --cluster: three rounds of 10s warm-up and 20s
// measured unless the flags say otherwise.
func runClusterMain(rounds int, warm, window time.Duration, mdPath, only string) {
	if rounds == 0 {
		rounds = 3
	}
	if warm == 0 {
		warm = 10 * time.Second
	}
	if window == 0 {
		window = 20 * time.Second
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	_, repo, err := findDirs()
	if err != nil {
		fatalf("%v", err)
	}
	filter, err := regexp.Compile(only)
	if err != nil {
		fatalf("--only %q: %v", only, err)
	}
	if err := runClusterBench(ctx, repo, rounds, warm, window, mdPath, filter); err != nil {
		fatalf("--cluster: %v", err)
	}
}
