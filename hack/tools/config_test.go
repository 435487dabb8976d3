package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"github.com/google/go-containerregistry/pkg/name"
)

// TestKoConfig checks ko.yaml and its .ko.yaml symlink: ko reads only
// .ko.yaml, the base stays in defaultBaseImage (so KO_DEFAULTBASEIMAGE can
// replace it), and the runner's build stamps its version and commit.
func TestKoConfig(t *testing.T) {
	root := repoRoot(t)
	target, err := os.Readlink(filepath.Join(root, ".ko.yaml"))
	if err != nil || target != "ko.yaml" {
		t.Fatalf(".ko.yaml must be a symlink to ko.yaml (ko reads only .ko.yaml): %q, %v", target, err)
	}
	cfg, err := readFileYAML(root, "ko.yaml")
	if err != nil {
		t.Fatal(err)
	}
	baseImage := str(cfg, "defaultBaseImage")
	if _, err := name.ParseReference(baseImage); err != nil {
		t.Errorf("defaultBaseImage %q: %v", baseImage, err)
	}
	if !strings.Contains(baseImage, "static") || !strings.Contains(baseImage, "nonroot") && !strings.HasPrefix(baseImage, "cgr.dev/chainguard/") {
		t.Errorf("defaultBaseImage %q: want a static, non-root image", baseImage)
	}
	if _, ok := cfg["baseImageOverrides"]; ok {
		t.Error("ko.yaml sets baseImageOverrides: keep the base in defaultBaseImage, which KO_DEFAULTBASEIMAGE overrides")
	}
	builds, _ := cfg["builds"].([]any)
	var runner map[string]any
	for _, b := range builds {
		if m, _ := b.(map[string]any); str(m, "main") == "./cmd/runner" {
			runner = m
		}
	}
	if runner == nil {
		t.Fatal("ko.yaml has no build for ./cmd/runner")
	}
	joined := func(key string) string {
		var parts []string
		list, _ := runner[key].([]any)
		for _, x := range list {
			parts = append(parts, x.(string))
		}
		return strings.Join(parts, " ")
	}
	ld := joined("ldflags")
	for _, v := range []string{module + "/internal/version.Version=", module + "/internal/version.Commit={{"} {
		if !strings.Contains(ld, "-X "+v) {
			t.Errorf("the runner's ldflags do not set %s: %s", v, ld)
		}
	}
	// Render the ldflags as ko does (text/template, missingkey=error, with
	// ko's Git values) for a tagged build, an untagged clone, a dirty tree
	// and a tree outside git.
	for _, tc := range []struct {
		name            string
		git             map[string]any
		version, commit string
	}{
		{"tagged", map[string]any{"Tag": "v1.2.3", "FullCommit": "abc", "IsDirty": false}, "v1.2.3", "abc"},
		{"untagged", map[string]any{"Tag": "v0.0.0", "FullCommit": "abc", "IsDirty": false}, "dev", "abc"},
		{"dirty", map[string]any{"Tag": "v1.2.3", "FullCommit": "abc", "IsDirty": true}, "v1.2.3-dirty", "abc"},
		{"no git", map[string]any{"Tag": "", "FullCommit": "", "IsDirty": false}, "dev", "unknown"},
	} {
		var b strings.Builder
		tmpl, err := template.New("ldflags").Option("missingkey=error").Parse(ld)
		if err != nil {
			t.Fatalf("ldflags template: %v", err)
		}
		if err := tmpl.Execute(&b, map[string]any{"Git": tc.git, "Env": map[string]string{}}); err != nil {
			t.Fatalf("%s: ldflags template: %v", tc.name, err)
		}
		for _, want := range []string{"version.Version=" + tc.version + " ", "version.Commit=" + tc.commit} {
			if !strings.Contains(b.String()+" ", want) {
				t.Errorf("%s: ldflags render as %q, want %q", tc.name, b.String(), want)
			}
		}
	}
	if !strings.Contains(joined("env"), "CGO_ENABLED=0") {
		t.Error("the runner's build env must set CGO_ENABLED=0 (the base has no libc)")
	}
	if !strings.Contains(joined("flags"), "-trimpath") {
		t.Error("the runner's build flags must include -trimpath")
	}
}

// TestDashboard checks the Grafana dashboard: it is valid JSON, every
// monovtx_* metric the runner exports has a panel, and every metric a panel
// queries is one the runner exports.
func TestDashboard(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "deploy", "dashboards", "monovertex.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/dashboards/monovertex.json is not valid JSON: %v", err)
	}
	if str(dash, "uid") == "" || str(dash, "title") == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	exprs := strings.Join(stringsUnder(dash, "expr"), "\n")
	if exprs == "" {
		t.Fatal("the dashboard has no queries")
	}
	for _, label := range []string{"mvtx_name"} {
		if !strings.Contains(exprs, label) {
			t.Errorf("the dashboard never selects on %s", label)
		}
	}
	queried := map[string]bool{}
	for _, n := range metricName.FindAllString(exprs, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			n = strings.TrimSuffix(n, suffix)
		}
		queried[n] = true
	}
	exported := exportedMetrics(t, root)
	for n := range exported {
		if !queried[n] {
			t.Errorf("the runner exports %s but no dashboard panel shows it", n)
		}
	}
	for n := range queried {
		if !exported[n] {
			t.Errorf("a dashboard panel queries %s, which the runner does not export", n)
		}
	}
}
