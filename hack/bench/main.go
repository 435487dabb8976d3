// Command bench is the monovertex benchmark harness. It builds the runner,
// the Benthos peer and the bench's own helper programs, runs each scenario
// for a fixed time after a warm-up, and prints a table of throughput, peak
// memory and latency, each figure beside its baseline (the protocol's
// ceiling) and its peer (what a user would pick instead) measured in the
// same run.
//
// It is its own module, so Benthos and the other benchmark-only
// dependencies stay out of the runner's go.mod. Run it from the repository
// root with
//
//	go run -C hack/bench . [flags]
//
// or from hack/bench with "go run . [flags]"; --help lists the flags.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// harness holds what every scenario needs: the built programs, the
// runner's kinds, the timing and the output options.
type harness struct {
	repo, benchDir string
	bin            string // directory of the built programs
	work           string // logs, sockets and configs of this run
	runnerBin      string
	peerBin        string // benchpeer
	benthosBin     string
	kfakeBin       string                     // the main module's internal/kafkatest/cmd/kfake
	functionBin    string                     // the main module's cmd/example-function
	kinds          map[string]map[string]bool // MV_SOURCE -> {generator: true}
	kindsLine      string

	warmup, duration time.Duration
	cpus             int   // GOMAXPROCS (and CPUs pinned) of this pass, 0: Go's default
	runnerProcs      int   // --runner-gomaxprocs: the runner's alone, over cpus; 0: as the others
	brokerCore       bool  // --broker-core: the broker and feeder on the last CPU, the rest on the others
	passes           []int // --cpus: one pass per value
	taskset          string
	concurrency      int
	rounds           int
	profileDir       string
	quick            bool
	keepLogs         bool
	halfRate         bool // --half-rate
}

func main() {
	var (
		quick       = flag.Bool("quick", false, "short warm-up and measurement: every scenario in under a minute, figures less steady")
		jsonPath    = flag.String("json", "", "write one JSON record per scenario to this file")
		mdPath      = flag.String("markdown", "", "write the table as Markdown to this file")
		cpus        cpusFlag
		sweep       = flag.Bool("sweep", false, "cores sweep: the same as --cpus 1,2")
		profileDir  = flag.String("profile", "", "save a CPU profile of the runner (and of each baseline and peer) per scenario in this directory, and the runner's heap profile with its memory statistics at the end of the first window")
		only        = flag.String("only", "", "run only the scenarios whose \"name/payload\" matches this regular expression, e.g. 'blackhole/1KiB'")
		warmup      = flag.Duration("warmup", 0, "warm-up before each measurement (default 2s, 300ms with --quick)")
		duration    = flag.Duration("duration", 0, "measured time of each side per round (default 5s, 700ms with --quick)")
		rounds      = flag.Int("rounds", 0, "rounds per scenario; the sides alternate and each figure is the median (default 3, 1 with --quick)")
		concurrency = flag.Int("concurrency", 16, "requests in flight for the CloudEvents and HTTP scenarios")
		binDir      = flag.String("bin", defaultBinDir(), "where the built programs go (kept between runs; go build reuses its cache); one per checkout, so two checkouts benchmarking at once never run each other's binaries")
		list        = flag.Bool("list", false, "list the scenarios and exit")
		keepLogs    = flag.Bool("keep", false, "keep the work directory (process logs, configs) after the run")
		halfRate    = flag.Bool("half-rate", true, "after the rounds of a scenario with a rate-limitable source, run the runner once more with MV_RATE_LIMIT_MAX at half its median rate and report its latency there")
		brokerCore  = flag.Bool("broker-core", false, "give the broker (kfake, nats-server) and its feeder the last CPU and every other process the rest, each pinned with taskset and GOMAXPROCS set to its share, as when the broker runs on its own machine; with --only 'kafka|jetstream'")
		runnerProcs = flag.Int("runner-gomaxprocs", 0, "GOMAXPROCS for the runner alone (over --cpus), as the GOMAXPROCS variable on its container would set it in a pod; the servers, baselines and peers keep theirs (0: as the others; not with a cores sweep)")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: go run -C hack/bench . [flags]\n\n"+
			"Runs the monovertex benchmark scenarios and prints a table; see hack/bench/RESULTS.md.\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Var(&cpus, "cpus", "GOMAXPROCS for the runner, the baselines, the peers and the SDK servers alike, each also pinned to CPUs 0..N-1 with taskset (0 leaves Go's default); a list (1,2) runs every scenario once per value and adds the cores sweep")
	flag.Parse()
	if *clusterMode {
		runClusterMain(*rounds, *warmup, *duration, *mdPath, *only)
		return
	}
	if *sweep && len(cpus) == 0 {
		cpus = cpusFlag{1, 2}
	}
	if len(cpus) == 0 {
		cpus = cpusFlag{0}
	}
	if *runnerProcs < 0 {
		fatalf("--runner-gomaxprocs %d: want 1 or more, or 0 for the runner to get what the others get", *runnerProcs)
	}
	if *runnerProcs > 0 && len(cpus) > 1 {
		// The sweep's MiB/s per core count would then not be the runner's.
		fatalf("--runner-gomaxprocs with a cores sweep (--sweep, --cpus %s) would keep the runner at GOMAXPROCS=%d in every pass; run one --cpus at a time", cpus.String(), *runnerProcs)
	}

	if *brokerCore && (len(cpus) > 1 || cpus[0] > 0 || runtime.NumCPU() < 2) {
		fatalf("--broker-core splits this machine's %d CPUs itself: not with --cpus or --sweep, and not on one CPU", runtime.NumCPU())
	}

	var filter *regexp.Regexp
	if *only != "" {
		var err error
		if filter, err = regexp.Compile(*only); err != nil {
			fatalf("--only %q is not a regular expression: %v", *only, err)
		}
	}
	h := &harness{halfRate: *halfRate, passes: cpus, cpus: cpus[0], concurrency: *concurrency, profileDir: *profileDir, quick: *quick, keepLogs: *keepLogs, bin: *binDir, runnerProcs: *runnerProcs, brokerCore: *brokerCore}
	h.warmup, h.duration, h.rounds = 2*time.Second, 5*time.Second, 3
	if *quick {
		h.warmup, h.duration, h.rounds = 300*time.Millisecond, 700*time.Millisecond, 1
	}
	if *rounds > 0 {
		h.rounds = *rounds
	}
	if *warmup > 0 {
		h.warmup = *warmup
	}
	if *duration > 0 {
		h.duration = *duration
	}
	scenarios := selectScenarios(catalogue(), filter)
	if *list {
		for _, sc := range scenarios {
			fmt.Printf("%-40s %s\n", sc.id(), sc.describe())
		}
		return
	}
	if len(scenarios) == 0 {
		fatalf("--only %q matches no scenario; --list shows them", *only)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	started, built := h.prepare(ctx)
	if !h.keepLogs {
		defer os.RemoveAll(h.work)
	}
	fmt.Print(machineHeader(h))
	fmt.Printf("warm-up %s, measured %s per side, %d round(s); runner kinds: %s\n\n", h.warmup, h.duration, h.rounds, h.kindsLine)
	records := h.runAll(ctx, scenarios)
	h.report(records, started, built, *jsonPath, *mdPath)
	if ctx.Err() != nil {
		os.Exit(130)
	}
}

// prepare finds the directories, makes the work directory and builds the
// programs; it returns when the build started and ended. Any failure
// ends the run.
func (h *harness) prepare(ctx context.Context) (started, built time.Time) {
	var err error
	if h.benchDir, h.repo, err = findDirs(); err != nil {
		fatalf("%v", err)
	}
	if h.profileDir != "" {
		if h.profileDir, err = filepath.Abs(h.profileDir); err == nil {
			err = os.MkdirAll(h.profileDir, 0o755)
		}
		if err != nil {
			fatalf("--profile: %v", err)
		}
	}
	if h.work, err = os.MkdirTemp("", "mvbench"); err != nil {
		fatalf("work directory: %v", err)
	}
	started = time.Now()
	if err := h.build(ctx); err != nil {
		fatalf("%v", err)
	}
	built = time.Now()
	if err := h.readKinds(); err != nil {
		fatalf("%v", err)
	}
	h.taskset, _ = exec.LookPath("taskset")
	if h.brokerCore && h.taskset == "" {
		fatalf("--broker-core pins processes with taskset, which is not on PATH (Debian: util-linux)")
	}
	return started, built
}

// runAll runs every scenario once per --cpus pass, until ctx ends.
func (h *harness) runAll(ctx context.Context, scenarios []scenario) []*record {
	var records []*record
	for _, n := range h.passes {
		h.cpus = n
		for _, sc := range scenarios {
			if ctx.Err() != nil {
				break
			}
			pass := ""
			if len(h.passes) > 1 {
				pass = fmt.Sprintf(" (--cpus %d)", n)
			}
			fmt.Fprintf(os.Stderr, "== %s%s\n", sc.id(), pass)
			rec := h.runScenario(ctx, sc)
			rec.CPUs = n
			rec.RunnerProcs = h.runnerProcs
			records = append(records, rec)
			for _, e := range rec.Errors {
				fmt.Fprintf(os.Stderr, "   error: %s\n", e)
			}
		}
	}
	fillSweep(records, h.passes)
	return records
}

// report prints the table and the sweep, and writes the JSON and Markdown
// files asked for (empty paths: none).
func (h *harness) report(records []*record, started, built time.Time, jsonPath, mdPath string) {
	fmt.Println()
	printTable(os.Stdout, records)
	writeSweep(os.Stdout, records, h.passes, false)
	fmt.Printf("\nbuild %s, scenarios %s; load average now %s\n",
		built.Sub(started).Round(100*time.Millisecond), time.Since(built).Round(100*time.Millisecond), loadavg())
	if h.keepLogs {
		fmt.Printf("process logs: %s\n", h.work)
	}
	if jsonPath != "" {
		b, err := json.MarshalIndent(records, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fatalf("--json: %v", err)
		}
	}
	if mdPath != "" {
		f, err := os.Create(mdPath)
		if err == nil {
			writeMarkdown(f, records)
			writeSweep(f, records, h.passes, true)
			err = f.Close()
		}
		if err != nil {
			fatalf("--markdown: %v", err)
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}

// findDirs locates the bench module (from the working directory: hack/bench
// itself, as "go run -C hack/bench ." and "go run ." leave it, or the
// repository root) and the repository root above it.
func findDirs() (benchDir, repo string, err error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	for _, cand := range []string{wd, filepath.Join(wd, "hack", "bench")} {
		if modulePath(filepath.Join(cand, "go.mod")) == benchModule {
			root := filepath.Clean(filepath.Join(cand, "..", ".."))
			if modulePath(filepath.Join(root, "go.mod")) != mainModule {
				return "", "", fmt.Errorf("%s is not the %s module root", root, mainModule)
			}
			return cand, root, nil
		}
	}
	return "", "", fmt.Errorf("run the bench from the repository root (go run -C hack/bench .) or from hack/bench (go run .); %s is neither", wd)
}

const (
	benchModule = "github.com/monovertex/monovertex/hack/bench"
	mainModule  = "github.com/monovertex/monovertex"
)

// modulePath returns the module line of a go.mod file, or "".
func modulePath(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// build compiles the runner from the repository and the peers from this
// module. go build reuses its cache, so a rebuild with nothing changed
// takes a second.
func (h *harness) build(ctx context.Context) error {
	if err := os.MkdirAll(h.bin, 0o755); err != nil {
		return fmt.Errorf("--bin: %w", err)
	}
	h.runnerBin = filepath.Join(h.bin, "runner")
	h.peerBin = filepath.Join(h.bin, "benchpeer")
	h.benthosBin = filepath.Join(h.bin, "benthos")
	h.kfakeBin = filepath.Join(h.bin, "kfake")
	h.functionBin = filepath.Join(h.bin, "example-function")
	steps := []struct{ dir, out, pkg string }{
		{h.repo, h.runnerBin, "./cmd/runner"},
		{h.repo, h.kfakeBin, "./internal/kafkatest/cmd/kfake"},
		{h.repo, h.functionBin, "./cmd/example-function"},
		{h.benchDir, h.peerBin, "./cmd/benchpeer"},
		{h.benchDir, h.benthosBin, "./cmd/benthos"},
	}
	for _, s := range steps {
		fmt.Fprintf(os.Stderr, "building %s (in %s)\n", s.pkg, s.dir)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", s.out, s.pkg)
		cmd.Dir = s.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s in %s: %v\n%s", s.pkg, s.dir, err, out)
		}
	}
	return nil
}

// readKinds asks the runner which adapters it has, so scenarios whose
// adapters have not landed are skipped rather than failed.
func (h *harness) readKinds() error {
	out, err := exec.Command(h.runnerBin, "--help").Output()
	if err != nil {
		return fmt.Errorf("%s --help: %w", h.runnerBin, err)
	}
	h.kinds, h.kindsLine = parseKinds(string(out))
	if h.kinds == nil {
		return fmt.Errorf("%s --help has no \"Kinds:\" line; cannot tell which adapters exist", h.runnerBin)
	}
	return nil
}

// parseKinds reads the runner's --help list of adapter kinds into
// variable -> set of kinds. It takes both the block form the runner prints
// ("Kinds:" then one indented "MV_SOURCE: a, b" line per variable) and the
// older one-line form ("Kinds: MV_SOURCE: a, b; MV_SINK: c").
func parseKinds(help string) (map[string]map[string]bool, string) {
	lines := strings.Split(help, "\n")
	for i, line := range lines {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Kinds:")
		if !ok {
			continue
		}
		parts := strings.Split(rest, ";")
		for _, next := range lines[i+1:] {
			if !strings.HasPrefix(next, " ") || strings.TrimSpace(next) == "" {
				break
			}
			parts = append(parts, strings.TrimSpace(next))
		}
		kinds := map[string]map[string]bool{}
		var summary []string
		for _, part := range parts {
			name, list, ok := strings.Cut(part, ":")
			if !ok {
				continue
			}
			set := map[string]bool{}
			for _, k := range strings.Split(list, ",") {
				if k = strings.TrimSpace(k); k != "" {
					set[k] = true
				}
			}
			kinds[strings.TrimSpace(name)] = set
			summary = append(summary, strings.TrimSpace(part))
		}
		return kinds, strings.Join(summary, "; ")
	}
	return nil, ""
}

// machineHeader describes where the figures come from.
func machineHeader(h *harness) string {
	var b strings.Builder
	fmt.Fprintf(&b, "machine: %d CPUs (%s), %s memory, %s/%s, %s\n", runtime.NumCPU(), cpuModel(), memTotal(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	gomaxprocs := "Go default"
	if len(h.passes) > 1 || h.passes[0] > 0 {
		gomaxprocs = (*cpusFlag)(&h.passes).String()
		if h.taskset != "" {
			gomaxprocs += " (each process pinned to CPUs 0..N-1 with taskset)"
		}
	}
	if h.brokerCore {
		gomaxprocs = fmt.Sprintf("--broker-core: the broker and its feeder pinned to CPU %d with GOMAXPROCS=1, every other process to CPUs 0-%d with GOMAXPROCS=%d", runtime.NumCPU()-1, runtime.NumCPU()-2, runtime.NumCPU()-1)
	}
	if h.runnerProcs > 0 {
		gomaxprocs += fmt.Sprintf(", the runner's %d (--runner-gomaxprocs)", h.runnerProcs)
	}
	fmt.Fprintf(&b, "GOMAXPROCS: %s; load average at start: %s\n", gomaxprocs, loadavg())
	if out, err := exec.Command("git", "-C", h.repo, "rev-parse", "--short", "HEAD").Output(); err == nil {
		fmt.Fprintf(&b, "repository at %s, %s\n", strings.TrimSpace(string(out)), time.Now().UTC().Format(time.RFC3339))
	}
	// The runner is built from the working tree, not from the commit: say
	// when the two differ, so a figure is not credited to the wrong code.
	if out, err := exec.Command("git", "-C", h.repo, "status", "--porcelain", "--", ".", ":(exclude)hack/bench").Output(); err == nil {
		if changed := changedFiles(string(out)); len(changed) > 0 {
			fmt.Fprintf(&b, "runner built from a working tree with uncommitted changes to: %s\n", strings.Join(changed, ", "))
		}
	}
	return b.String()
}

// changedFiles reads the paths out of "git status --porcelain" output.
func changedFiles(porcelain string) []string {
	var out []string
	for _, l := range strings.Split(porcelain, "\n") {
		if len(l) > 3 {
			out = append(out, strings.TrimSpace(l[3:]))
		}
	}
	return out
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			var kb float64
			fmt.Sscan(strings.TrimSpace(rest), &kb)
			return fmt.Sprintf("%.1f GiB", kb/1024/1024)
		}
	}
	return "unknown"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// defaultBinDir names a build directory for this checkout: two checkouts (git
// worktrees) benchmarking at the same time used to share one directory and
// overwrite each other's runner mid-run.
func defaultBinDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return filepath.Join(os.TempDir(), "monovertex-bench-bin")
	}
	sum := sha256.Sum256([]byte(wd))
	return filepath.Join(os.TempDir(), fmt.Sprintf("monovertex-bench-bin-%x", sum[:4]))
}
