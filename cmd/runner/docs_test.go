package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/monovertex/monovertex/config"
	"github.com/monovertex/monovertex/internal/testutil"
)

// TestConfigurationPageIsGenerated keeps docs/configuration.md's reference
// the same as `runner --help --markdown` prints with every adapter kind
// registered, so a variable added, renamed or re-described in a settings
// struct fails here until the page is generated again.
func TestConfigurationPageIsGenerated(t *testing.T) {
	const begin, end = "<!-- generated: go run ./cmd/runner --help --markdown > this block; do not edit by hand -->\n", "<!-- end generated -->\n"
	page, err := os.ReadFile(filepath.Join(testutil.ModuleRoot(t), "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(page, []byte(begin))
	block, _, ok2 := bytes.Cut(rest, []byte(end))
	if !ok || !ok2 {
		t.Fatalf("docs/configuration.md lacks the markers %q and %q", begin, end)
	}
	var want bytes.Buffer
	config.UsageMarkdown(&want)
	if !bytes.Equal(block, want.Bytes()) {
		t.Fatalf("docs/configuration.md's reference differs from the settings structs; regenerate the block between the markers with `go run ./cmd/runner --help --markdown` (%d bytes on the page, %d generated)", len(block), want.Len())
	}
}
