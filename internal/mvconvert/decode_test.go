package mvconvert

import (
	"strings"
	"testing"
)

const head = "apiVersion: numaflow.numaproj.io/v1alpha1\nkind: MonoVertex\nmetadata:\n  name: x\nspec:\n  source:\n    generator: {}\n  sink:\n    log: {}\n"

// TestStrictDecodingNamesTheExactPath covers the shapes a path can take:
// struct fields, list items, map keys with dots, inline structs, and the
// Kubernetes types with their own JSON forms.
func TestStrictDecodingNamesTheExactPath(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"case matters, as in Kubernetes", head + "  Replicas: 2\n", `spec.Replicas: unknown field (did you mean "replicas"?)`},
		{"map key with dots", head + "  nodeSelector:\n    kubernetes.io/os: 5\n", `spec.nodeSelector["kubernetes.io/os"]: want a string, got 5`},
		{"inline struct field (AbstractPodTemplate)", head + "  serviceAccountName: [a]\n", "spec.serviceAccountName: want a string, got a list"},
		{"probe handler inline in a core type", head + "  sidecars:\n    - name: s\n      image: i\n      readinessProbe:\n        httpGet:\n          path: /\n          port: {}\n", "spec.sidecars[0].readinessProbe.httpGet.port: want a whole number or a string"},
		{"quantity", head + "  containerTemplate:\n    resources:\n      limits:\n        memory: lots\n", `spec.containerTemplate.resources.limits["memory"]: want a quantity`},
		{"int32 out of range", head + "  replicas: 3000000000\n", "spec.replicas: want a whole number from -2147483648 to 2147483647, got 3000000000"},
		{"not a whole number", head + "  limits:\n    readBatchSize: 1.5\n", "spec.limits.readBatchSize: want a whole number from 0 to 18446744073709551615, got 1.5"},
		{"duration", head + "  limits:\n    readTimeout: soon\n", `spec.limits.readTimeout: want a duration such as "1s" or "1m30s", got "soon"`},
		{"list expected", head + "  tolerations: {key: a}\n", "spec.tolerations: want a list, got an object"},
		{"unknown top-level field", head + "extra: 1\n", "extra: unknown field"},
		{"metadata field", strings.Replace(head, "  name: x\n", "  name: x\n  labelz: {}\n", 1), `metadata.labelz: unknown field (did you mean "labels"?)`},
		{"no kind", "apiVersion: v1\nmetadata: {name: x}\n", "kind: a Kubernetes object needs apiVersion and kind"},
		{"duplicate key", head + "  replicas: 1\n  replicas: 2\n", "not valid YAML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadDocuments(strings.NewReader(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if !IsFieldError(err) {
				t.Fatalf("%v is not a field error (exit 2)", err)
			}
		})
	}
}

// TestDocumentsAreSplitAndOthersPassThrough: several documents, comments
// only documents skipped, other kinds decoded as opaque objects.
func TestDocumentsAreSplitAndOthersPassThrough(t *testing.T) {
	in := "# a comment\n---\n" + head + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  a: b\n---\n# only a comment\n"
	docs, err := ReadDocuments(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].MonoVertex == nil || docs[1].MonoVertex != nil || docs[1].Kind != "Secret" || docs[1].Index != 2 {
		t.Fatalf("documents: %+v", docs)
	}
}
