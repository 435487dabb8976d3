package tools

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// TestDeployPath is the offline proof of `ko apply -f deploy/<example>/`:
// for every example it runs the pinned ko's `resolve` against a registry on
// 127.0.0.1 with a minimal non-root base (KO_DEFAULTBASEIMAGE), checks that
// every ko:// reference became an image in that registry, validates the
// resolved Knative Services with Knative's own webhook code, and runs the
// runner binary taken out of its image with --version.
//
// ko builds the working tree; set MV_KO_PROOF_CLONE=1 to build a fresh
// `git clone` of HEAD instead (what a release from a clean checkout gets).
// Set MV_KO_PROOF_OUT to a directory to keep the resolved YAML there.
func TestDeployPath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ko and every image; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("runs the linux binaries it builds")
	}
	root := repoRoot(t)
	src := root
	if os.Getenv("MV_KO_PROOF_CLONE") != "" {
		src = filepath.Join(t.TempDir(), "src")
		run(t, root, nil, "git", "clone", "--quiet", root, src)
	}
	startHead := gitHead(src)

	ko := buildKo(t)
	host := startRegistry(t)
	base := pushBase(t, host)
	env := koEnv(host, base)

	runnerImages := map[string]bool{}
	var runnerRef string
	var settings []runnerSettings
	for _, ex := range exampleDirs(t, src) {
		t.Run(ex, func(t *testing.T) {
			_, raw := readExample(t, src, ex)
			wantBinaries := map[string]bool{}
			for _, ip := range koImportPaths(raw) {
				wantBinaries[path.Base(ip)] = true
			}

			start := time.Now()
			out := run(t, src, env, ko, "resolve", "--platform=linux/"+runtime.GOARCH, "-f", "deploy/"+ex+"/")
			t.Logf("ko resolve -f deploy/%s/: %d bytes of YAML in %s", ex, len(out), time.Since(start).Round(time.Millisecond))
			if bytes.Contains(out, []byte("ko://")) {
				t.Fatalf("ko left ko:// references unresolved:\n%s", out)
			}
			if dir := os.Getenv("MV_KO_PROOF_OUT"); dir != "" {
				if err := os.WriteFile(filepath.Join(dir, ex+".yaml"), out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			what := "resolved deploy/" + ex
			docs := splitDocs(t, what, out)

			// Every image ko built is in the registry, is what its
			// ko:// reference named, and runs as non-root.
			gotBinaries := map[string]bool{}
			images := map[string]bool{}
			for _, m := range docs {
				// An env value is an image too when ko resolved it (the
				// controller's MV_CONTROLLER_RUNNER_IMAGE).
				for _, img := range append(stringsUnder(m.obj, "image"), stringsUnder(m.obj, "value")...) {
					if strings.HasPrefix(img, host+"/") {
						images[img] = true
					}
				}
			}
			for img := range images {
				if _, err := name.NewDigest(img); err != nil {
					t.Errorf("ko wrote %q, not a reference by digest: %v", img, err)
				}
				cf, err := pullImage(t, img).ConfigFile()
				if err != nil {
					t.Fatalf("config of %s: %v", img, err)
				}
				if len(cf.Config.Entrypoint) != 1 || !strings.HasPrefix(cf.Config.Entrypoint[0], "/ko-app/") {
					t.Errorf("%s: entrypoint %v, want /ko-app/<binary>", img, cf.Config.Entrypoint)
					continue
				}
				bin := path.Base(cf.Config.Entrypoint[0])
				gotBinaries[bin] = true
				if u := cf.Config.User; u == "" || u == "0" || strings.HasPrefix(u, "0:") || strings.HasPrefix(u, "root") {
					t.Errorf("%s (%s) runs as %q, want the base's non-root user", img, bin, u)
				}
				if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
					t.Errorf("%s (%s) is for %s/%s", img, bin, cf.OS, cf.Architecture)
				}
				if bin == "runner" {
					runnerImages[img] = true
					runnerRef = img
				}
			}
			if !equalSets(gotBinaries, wantBinaries) {
				t.Errorf("images in the registry hold %v, the manifests name %v", sortedKeys(gotBinaries), sortedKeys(wantBinaries))
			}

			pods := podsOf(t, what, docs)
			checkWholeInstall(t, what, docs, pods, runnerImages)
			for _, p := range pods {
				for _, c := range p.spec.Containers {
					if isRunner(c, runnerImages) {
						settings = append(settings, runnerSettings{what: what + " " + p.owner, owner: p.owner, env: envOf(c)})
					}
				}
			}
		})
	}

	if runnerRef == "" {
		t.Fatal("no example built the runner image")
	}
	bin, err := extractFile(pullImage(t, runnerRef), "/ko-app/runner", t.TempDir())
	if err != nil {
		t.Fatalf("take the runner out of %s: %v", runnerRef, err)
	}

	t.Run("runner --version", func(t *testing.T) {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("the runner in the image is not an ELF binary: %v", err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("the runner is dynamically linked; the static base has no libc (build with CGO_ENABLED=0)")
			}
		}
		f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("runner --version: %v\n%s", err, out)
		}
		t.Logf("runner --version: %s", bytes.TrimSpace(out))
		checkStampedCommit(t, src, startHead, string(out))
	})

	// mvctl, the MonoVertex converter, is a program users run, not a
	// deployed image, but ko builds it like the rest (ko build ./cmd/mvctl).
	t.Run("mvctl image", func(t *testing.T) {
		out := run(t, src, env, ko, "build", "--platform=linux/"+runtime.GOARCH, "./cmd/mvctl")
		ref := strings.TrimSpace(string(out))
		bin, err := extractFile(pullImage(t, ref), "/ko-app/mvctl", t.TempDir())
		if err != nil {
			t.Fatalf("take mvctl out of %s: %v", ref, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		table, err := exec.CommandContext(ctx, bin, "explain").CombinedOutput()
		if err != nil || !bytes.Contains(table, []byte("| `spec.source` |")) {
			t.Fatalf("mvctl explain from its image: %v\n%s", err, table)
		}
		t.Logf("ko build ./cmd/mvctl: %s; its explain prints %d lines", ref, bytes.Count(table, []byte("\n")))
	})

	t.Run("runner accepts each example's settings", func(t *testing.T) {
		for _, s := range settings {
			checkSettingsAccepted(t, bin, s)
		}
	})
}

// runnerSettings is the environment of one runner container in an example.
type runnerSettings struct {
	what, owner string
	env         map[string]string
}

// checkSettingsAccepted starts the runner from the image with an example's
// environment, on free ports and with empty local stand-ins for the mounted
// directories, and fails if it rejects the settings (exit status 2, as on a
// cluster where the pod would crash-loop). It stops it as soon as the admin
// port answers, or after a few seconds when it is still waiting for a peer
// that is not here (a Numaflow sidecar, the function).
func checkSettingsAccepted(t *testing.T, bin string, s runnerSettings) {
	t.Helper()
	dir := t.TempDir()
	uds, cfg := filepath.Join(dir, "uds"), filepath.Join(dir, "config")
	for _, d := range []string{uds, cfg} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cfg, "paused"), []byte("false"), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := freePort(t)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	// The check is about start-up; a short shutdown budget keeps it quick
	// when the runner holds messages it cannot finish here.
	env = append(env, "PORT="+freePort(t), "MV_ADMIN_PORT="+admin, "MV_UDS_DIR="+uds, "MV_SHUTDOWN_TIMEOUT=2s")
	if s.env["MV_CONFIG_DIR"] != "" {
		env = append(env, "MV_CONFIG_DIR="+cfg)
	}
	if strings.HasPrefix(s.owner, "ContainerSource/") && s.env["K_SINK"] == "" {
		env = append(env, "K_SINK=http://127.0.0.1:"+freePort(t)) // what the ContainerSource injects
	}
	if s.env["MV_KAFKA_BROKERS"] != "" {
		// The cluster's Kafka, stood in for by kfake with the example's
		// topics: the Kafka adapters check their topics at start.
		env = append(env, "MV_KAFKA_BROKERS="+kafkaStandIn(t, s.env))
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: start the runner: %v", s.what, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	state := "still waiting for its peers"
wait:
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			code := cmd.ProcessState.ExitCode()
			if code == 2 {
				t.Errorf("%s: the runner rejects these settings (exit 2): %s", s.what, bytes.TrimSpace(stderr.Bytes()))
			} else {
				t.Errorf("%s: the runner exited early (%v): %s", s.what, err, bytes.TrimSpace(stderr.Bytes()))
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		// The admin port is bound before the adapters are built but served
		// only after, so a request can hang while the runner waits for a
		// peer: keep it short.
		if resp, err := (&http.Client{Timeout: 500 * time.Millisecond}).Get("http://127.0.0.1:" + admin + "/livez"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				state = "serving /livez"
				break wait
			}
		}
	}
	// A second signal makes the runner exit at once.
	for i, grace := range []time.Duration{10 * time.Second, 5 * time.Second} {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			t.Logf("%s: accepted (%s after %s), stopped by SIGTERM #%d with status %d",
				s.what, state, time.Since(start).Round(time.Millisecond), i+1, cmd.ProcessState.ExitCode())
			return
		case <-time.After(grace):
		}
	}
	cmd.Process.Kill()
	<-exited
	t.Errorf("%s: the runner did not stop on two SIGTERMs: %s", s.what, bytes.TrimSpace(stderr.Bytes()))
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// checkStampedCommit checks the commit `runner --version` printed: the one
// ko found checked out while it built (ko.yaml stamps {{.Git.FullCommit}}).
// Others may commit to a shared working tree during the test, so any commit
// from the one checked out at the start up to HEAD now will do.
func checkStampedCommit(t *testing.T, src, startHead, version string) {
	t.Helper()
	if startHead == "" {
		if !strings.Contains(version, "unknown") {
			t.Errorf("runner --version printed %q; outside git the commit should read unknown", version)
		}
		return
	}
	printed := regexp.MustCompile(`\b[0-9a-f]{40}\b`).FindString(version)
	if printed == "" {
		t.Fatalf("runner --version printed %q, want the full commit stamped by ko.yaml's ldflags", version)
	}
	if printed == startHead {
		return
	}
	ancestor := func(a, b string) bool {
		return exec.Command("git", "-C", src, "merge-base", "--is-ancestor", a, b).Run() == nil
	}
	if !ancestor(startHead, printed) || !ancestor(printed, "HEAD") {
		t.Errorf("runner --version printed commit %s; want %s or a commit made since (HEAD is now %s)", printed, startHead, gitHead(src))
	}
}

// buildKo builds the ko pinned in this module's go.mod.
func buildKo(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ko")
	start := time.Now()
	run(t, ".", nil, "go", "build", "-o", bin, "github.com/google/ko")
	t.Logf("built ko in %s", time.Since(start).Round(time.Millisecond))
	return bin
}

// koEnv is the environment of ko: this process's, without any KO_*
// setting of the user's, plus the test registry and base image. ko reads
// its configuration from ./.ko.yaml (the symlink to ko.yaml), as in
// `ko apply -f deploy/<example>/` in the repository root.
func koEnv(host, base string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KO_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"KO_DOCKER_REPO="+host+"/monovertex",
		"KO_DEFAULTBASEIMAGE="+base,
	)
}

// run runs a command in dir and returns its stdout; it fails the test with
// both streams when the command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	// Cold, ko builds the controller (client-go, knative.dev/pkg and
	// serving's clients) for minutes on a shared machine.
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), dir, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// stringsUnder returns every string under key anywhere in v (decoded
// JSON or YAML), such as the "image" of every container.
func stringsUnder(v any, key string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, y := range x {
			if s, ok := y.(string); ok && k == key {
				out = append(out, s)
				continue
			}
			out = append(out, stringsUnder(y, key)...)
		}
	case []any:
		for _, y := range x {
			out = append(out, stringsUnder(y, key)...)
		}
	}
	return out
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var kfakeBuild struct {
	sync.Once
	path string
	err  error
}

// kafkaStandIn starts kfake (the main module's internal/kafkatest/cmd/kfake,
// franz-go's in-memory Kafka) on a free port with the topics env names,
// and returns its address; it stops when the test ends.
func kafkaStandIn(t *testing.T, env map[string]string) string {
	t.Helper()
	kfakeBuild.Do(func() {
		dir, err := os.MkdirTemp("", "kfake")
		if err != nil {
			kfakeBuild.err = err
			return
		}
		kfakeBuild.path = filepath.Join(dir, "kfake")
		cmd := exec.Command("go", "build", "-o", kfakeBuild.path, "./internal/kafkatest/cmd/kfake")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			kfakeBuild.err = fmt.Errorf("go build kfake: %v\n%s", err, out)
		}
	})
	if kfakeBuild.err != nil {
		t.Fatal(kfakeBuild.err)
	}
	var topics []string
	for _, v := range []string{"MV_KAFKA_TOPIC", "MV_KAFKA_SINK_TOPIC", "MV_FALLBACK_KAFKA_TOPIC", "MV_ON_SUCCESS_KAFKA_TOPIC"} {
		if env[v] != "" {
			topics = append(topics, env[v]+":6")
		}
	}
	port := freePort(t)
	cmd := exec.Command(kfakeBuild.path, "-ports", port, "-topics", strings.Join(topics, ","))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + port
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("kfake does not listen on %s", addr)
		}
	}
}
