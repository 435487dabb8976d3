package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/monovertex/monovertex/internal/mvconvert"
	"github.com/monovertex/monovertex/internal/testutil"
)

func corpusObject(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestWebhookAcceptsTheCorpus: every corpus manifest mvctl validates is
// admitted (with the scaler each needs).
func TestWebhookAcceptsTheCorpus(t *testing.T) {
	files, _ := filepath.Glob("../mvctl/testdata/corpus/*.yaml")
	if len(files) < 10 {
		t.Fatalf("%d corpus files", len(files))
	}
	for _, f := range files {
		opts := mvconvert.Options{Scaler: mvconvert.ScalerHPA}
		if strings.Contains(f, "keda") {
			opts.Scaler = mvconvert.ScalerKEDA
		}
		if err := validateMonoVertex(corpusObject(t, f), opts); err != nil {
			t.Errorf("%s refused: %v", filepath.Base(f), err)
		}
	}
	t.Logf("%d corpus manifests admitted", len(files))
}

// TestWebhookRefusesWithThePath: what mvctl validate refuses is refused
// with the field path first in the message.
func TestWebhookRefusesWithThePath(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(obj map[string]any)
		want string
	}{
		{"misspelt field", func(o map[string]any) {
			spec := o["spec"].(map[string]any)
			spec["limits"].(map[string]any)["readBatchSise"] = int64(5)
		}, `spec.limits.readBatchSise: unknown field (did you mean "readBatchSize"?)`},
		{"rateLimit min above max", func(o map[string]any) {
			spec := o["spec"].(map[string]any)
			spec["limits"].(map[string]any)["rateLimit"] = map[string]any{"min": int64(10), "max": int64(5)}
		}, "spec.limits.rateLimit.min: 10 is more than max (5)"},
		{"desiredPhase", func(o map[string]any) {
			o["spec"].(map[string]any)["lifecycle"] = map[string]any{"desiredPhase": "Stopped"}
		}, `spec.lifecycle.desiredPhase: "Stopped": want Running or Paused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := corpusObject(t, "../mvctl/testdata/corpus/generator-log.yaml")
			tc.edit(u.Object)
			err := validateMonoVertex(u, mvconvert.Options{})
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOptionsFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	o, err := optionsFromEnv(env(map[string]string{"MV_CONTROLLER_RUNNER_IMAGE": "r:1"}))
	if err != nil || o.RunnerImage != "r:1" || o.Scaler != mvconvert.ScalerHPA || o.PodMonitor {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	for _, bad := range []map[string]string{
		{},
		{"MV_CONTROLLER_RUNNER_IMAGE": "r:1", "MV_CONTROLLER_SCALER": "vpa"},
		{"MV_CONTROLLER_RUNNER_IMAGE": "r:1", "MV_CONTROLLER_ROLLOUT_DURATION": "1.5s"},
	} {
		_, err := optionsFromEnv(env(bad))
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "MV_CONTROLLER_") {
			t.Errorf("%v: error %v, want one line naming the variable", bad, err)
		}
	}
}

// TestBadSettingsExitTwo: the built controller exits 2 with one stderr
// line naming the variable, before it touches a cluster.
func TestBadSettingsExitTwo(t *testing.T) {
	bin := testutil.Build(t, "./cmd/controller")
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "MV_CONTROLLER_RUNNER_IMAGE"},
		{[]string{"MV_CONTROLLER_RUNNER_IMAGE=r:1", "MV_CONTROLLER_SCALER=vpa"}, "MV_CONTROLLER_SCALER"},
	} {
		cmd := exec.Command(bin)
		cmd.Env = append(testutil.BaseEnv(), tc.env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
			t.Errorf("env %v: %v, stderr %q; want exit 2 and one line naming %s", tc.env, err, stderr.String(), tc.want)
		}
	}
}
