package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/monovertex/monovertex/config"
	"github.com/monovertex/monovertex/internal/mvconvert"
	"github.com/monovertex/monovertex/runner"
)

// mutation sets one numeric field of a MonoVertex (a path of object keys
// under spec) when its parent object exists, or creates the parents when
// create is set.
type mutation struct {
	path   []string
	create bool
	values []any
}

// mutations are the numeric fields mvctl turns into runner settings, each
// with the runner's bounds, values past them and a few random ones.
func mutations(r *rand.Rand) []mutation {
	rnd := func(vs ...any) []any {
		for range 3 {
			vs = append(vs, r.Int64N(1<<40))
		}
		return vs
	}
	return []mutation{
		{[]string{"source", "generator", "rpu"}, false, rnd(1, 10_000_000, 10_000_001, int64(4294967296), 1e10)},
		{[]string{"source", "generator", "msgSize"}, false, rnd(0, 64<<20, 64<<20+1, 1e8)},
		{[]string{"source", "generator", "keyCount"}, false, rnd(0, 255, 256)},
		{[]string{"limits", "readBatchSize"}, true, rnd(1, 100_000, 100_001, int64(4294967295))},
		{[]string{"limits", "concurrency"}, true, rnd(1, 1_000_000, 1_000_001)},
		{[]string{"scale", "min"}, true, rnd(0, 3, 2147483647)},
		{[]string{"scale", "max"}, true, rnd(1, 3, 2147483647)},
		{[]string{"sink", "retryStrategy", "backoff", "steps"}, true, rnd(1, int64(4294967295))},
	}
}

// set puts v at path under obj; false when a parent is missing and not
// to be created.
func set(obj map[string]any, path []string, create bool, v any) bool {
	for _, k := range path[:len(path)-1] {
		next, ok := obj[k].(map[string]any)
		if !ok {
			if !create || obj[k] != nil {
				return false
			}
			next = map[string]any{}
			obj[k] = next
		}
		obj = next
	}
	obj[path[len(path)-1]] = v
	return true
}

// runnerEnv is the runner container's environment as the pod gives it:
// PORT from Knative, a placeholder for a Secret's value. It also lists the
// variables whose values only the pod can check (a Secret's, a path into
// a mounted volume).
func runnerEnv(t *testing.T, res *mvconvert.Result) (map[string]string, map[string]bool) {
	t.Helper()
	ctr := res.Service.Spec.Template.Spec.Containers[0]
	if ctr.Name != "runner" {
		t.Fatalf("first container %q, want the runner", ctr.Name)
	}
	vars, podOnly := map[string]string{"PORT": "8080"}, map[string]bool{}
	for _, e := range ctr.Env {
		vars[e.Name] = e.Value
		if e.ValueFrom != nil {
			vars[e.Name], podOnly[e.Name] = "from-a-secret", true
		}
		for _, m := range ctr.VolumeMounts {
			podOnly[e.Name] = podOnly[e.Name] || inMount(e, m)
		}
	}
	return vars, podOnly
}

func inMount(e corev1.EnvVar, m corev1.VolumeMount) bool {
	return strings.HasPrefix(e.Value, strings.TrimSuffix(m.MountPath, "/")+"/")
}

// TestWhatConvertsTheRunnerTakes is a property over the corpus: every
// corpus manifest, as it is and with each numeric field that becomes a
// runner setting set to its bounds, past them and to random values, either
// is refused by mvctl with a *FieldError naming the variable, or converts
// to an environment the runner's own validation (config.LoadEnv) accepts.
// Without mvctl applying that validation, rpu 4294967296 converted and the
// runner exited 2 on it.
func TestWhatConvertsTheRunnerTakes(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 9))
	converted, refused := 0, 0
	for _, file := range corpusFiles(t) {
		for _, doc := range readDocuments(t, file) {
			if doc.MonoVertex == nil {
				continue
			}
			try := func(what string, raw []byte) {
				t.Helper()
				docs, err := mvconvert.ReadDocuments(bytes.NewReader(raw))
				if err != nil {
					return // refused by the decoder (a type or range check)
				}
				res, err := mvconvert.Convert(docs[0].MonoVertex, mvconvert.Options{Scaler: scalerFor(file)})
				var fe *mvconvert.FieldError
				switch {
				case errors.As(err, &fe):
					refused++
					if strings.Contains(fe.Reason, "runner refuses") && !strings.Contains(fe.Reason, "MV_") {
						t.Fatalf("%s %s: %v names no variable", file, what, err)
					}
					return
				case err != nil:
					t.Fatalf("%s %s: %v", file, what, err)
				}
				converted++
				vars, podOnly := runnerEnv(t, res)
				_, err = config.LoadEnv(vars)
				var ce *runner.ConfigError
				if err != nil && !(errors.As(err, &ce) && podOnly[ce.Var]) {
					t.Fatalf("%s %s converts, and the runner refuses its environment: %v", file, what, err)
				}
			}
			try("as it is", doc.Raw)
			for _, m := range mutations(r) {
				for _, v := range m.values {
					var obj map[string]any
					if err := json.Unmarshal(doc.Raw, &obj); err != nil {
						t.Fatal(err)
					}
					spec, _ := obj["spec"].(map[string]any)
					if spec == nil || !set(spec, m.path, m.create, v) {
						continue
					}
					raw, err := json.Marshal(obj)
					if err != nil {
						t.Fatal(err)
					}
					try(fmt.Sprintf("with spec.%s: %v", strings.Join(m.path, "."), v), raw)
				}
			}
		}
	}
	t.Logf("%d conversions taken by the runner's validation, %d refused by mvctl", converted, refused)
	if converted == 0 || refused == 0 {
		t.Fatalf("%d converted, %d refused: the property was not exercised both ways", converted, refused)
	}
}
