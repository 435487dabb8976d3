package tools

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// module is the runner's module path; ko:// references name packages in it.
const module = "github.com/monovertex/monovertex"

// manifest is one YAML document of a manifest file or of ko's output.
type manifest struct {
	raw        []byte
	obj        map[string]any
	apiVersion string
	kind       string
	name       string
}

// splitDocs parses a multi-document YAML stream the way kubectl does and
// fails the test for a document that is not a Kubernetes object (no
// apiVersion, kind or metadata.name).
func splitDocs(t *testing.T, what string, data []byte) []manifest {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []manifest
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: split YAML documents: %v", what, err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: not valid YAML: %v\n%s", what, err, doc)
		}
		if len(obj) == 0 {
			continue // an empty document, e.g. after a trailing ---
		}
		m := manifest{raw: doc, obj: obj}
		m.apiVersion, _ = obj["apiVersion"].(string)
		m.kind, _ = obj["kind"].(string)
		m.name = str(obj, "metadata", "name")
		if m.apiVersion == "" || m.kind == "" || m.name == "" {
			t.Errorf("%s: a document without apiVersion, kind or metadata.name:\n%s", what, doc)
			continue
		}
		out = append(out, m)
	}
}

// str digs a string out of nested maps, or returns "".
func str(obj map[string]any, path ...string) string {
	v, _ := dig(obj, path...).(string)
	return v
}

// dig follows map keys and returns what is there, or nil.
func dig(obj map[string]any, path ...string) any {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// repoRoot is the repository root: this module lives in hack/tools.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.HasPrefix(gomod, []byte("module "+module+"\n")) {
		t.Fatalf("%s is not the root of %s (go.mod: %v)", root, module, err)
	}
	return root
}

// exampleDirs lists the directories under deploy/ that hold Kubernetes
// manifests, one example each (`ko apply -f deploy/<example>/`). Directories
// of other files (dashboards, Helm values) are not examples.
func exampleDirs(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "deploy"))
	if err != nil {
		t.Fatalf("read deploy/: %v", err)
	}
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(root, "deploy", e.Name(), "*.yaml"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if regexp.MustCompile(`(?m)^apiVersion:`).Match(b) {
				dirs = append(dirs, e.Name())
				break
			}
		}
	}
	if len(dirs) == 0 {
		t.Fatal("no examples under deploy/")
	}
	return dirs
}

// readExample parses every manifest file of one example directory, in the
// order kubectl applies them.
func readExample(t *testing.T, root, example string) ([]manifest, []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "deploy", example, "*.yaml"))
	sort.Strings(files)
	var docs []manifest
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, b...), '\n')
		docs = append(docs, splitDocs(t, filepath.Join("deploy", example, filepath.Base(f)), b)...)
	}
	return docs, all
}

var koRef = regexp.MustCompile(`ko://([A-Za-z0-9._/-]+)`)

// koImportPaths returns the distinct import paths named by ko:// references.
func koImportPaths(data []byte) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range koRef.FindAllSubmatch(data, -1) {
		p := string(m[1])
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

var metricName = regexp.MustCompile(`\bmonovtx_[a-z_]+[a-z]\b`)

// exportedMetrics returns the monovtx_* names that appear as string
// literals in the module's non-test Go files (outside hack/), i.e. the
// metrics the runner can export.
func exportedMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"(monovtx_[a-z_]+)"`)
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			if rel == "hack" || rel != "." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan the module for metric names: %v", err)
	}
	if len(names) == 0 {
		t.Fatal("found no monovtx_* metric names in the module's Go files")
	}
	return names
}

// gitHead returns the commit checked out in dir, or "" outside git.
func gitHead(dir string) string {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
