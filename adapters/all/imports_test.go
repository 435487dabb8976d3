package all_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestKindsImportNoOtherKind checks that no adapter package depends on an
// adapter of another kind: importing a sink must not register a source
// (the JetStream sink once imported the JetStream source for its URL
// check, which now lives in internal/natsjs). What adapters share lives
// in adapters/internal/ or internal/.
func TestKindsImportNoOtherKind(t *testing.T) {
	const mod = "github.com/monovertex/monovertex/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	kinds := []string{"adapters/source/", "adapters/transformer/", "adapters/sink/"}
	kindOf := func(pkg string) string {
		for _, k := range kinds {
			if strings.HasPrefix(pkg, mod+k) {
				return k
			}
		}
		return ""
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		own := kindOf(fields[0])
		if own == "" {
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			if k := kindOf(dep); k != "" && k != own {
				t.Errorf("%s imports %s, an adapter of another kind", strings.TrimPrefix(fields[0], mod), strings.TrimPrefix(dep, mod))
			}
		}
	}
	if checked < 18 {
		t.Fatalf("checked %d adapter packages; want every source, transformer and sink (18 when this was written)", checked)
	}
}
