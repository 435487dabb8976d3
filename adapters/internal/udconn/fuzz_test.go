package udconn

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzServerInfo feeds arbitrary bytes through what the runner does with a
// container's server-info file: read and parse it (readFile), then decide
// whether the container can be used (Check). Whatever the file holds, the
// answer is one of the documented outcomes (not written yet, no end marker
// yet, incompatible, or usable), never a panic, and the error a user sees
// names the file and stays on one line.
func FuzzServerInfo(f *testing.F) {
	for _, seed := range []string{
		`{"protocol":"uds","language":"go","minimum_numaflow_version":"1.4.0-z","version":"v0.12.0","metadata":null}` + End,
		`{"protocol":"uds","language":"python","minimum_numaflow_version":"1.5.0-z","version":"0.10.0rc1","metadata":{"MAP_MODE":"unary-map"}}` + End,
		`{"protocol":"uds","language":"java","version":"0.9.1"}` + End,
		`{"protocol":"tcp","language":"rust","version":"0.1.1"}` + End,
		`{"protocol":"uds","language":"go","version":"v0.12.0"}`,
		`{"protocol":"uds"` + End,
		End,
		"",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	ep := SinkEndpoint(dir, false)
	f.Fuzz(func(t *testing.T, content []byte) {
		if err := os.WriteFile(ep.InfoFile, content, 0o600); err != nil {
			t.Fatal(err)
		}
		si, _, err := readFile(ep)
		var inc *incompleteError
		switch {
		case err == nil:
			if si == nil {
				t.Fatal("readFile returned neither info nor error")
			}
			var warnings []string
			err = Check(ep, si, func(m string) { warnings = append(warnings, m) })
			if err != nil && !IsIncompatible(err) {
				t.Fatalf("Check returned %T %v, want an IncompatibleError", err, err)
			}
		case errors.Is(err, errNotYet):
			if len(content) != 0 {
				t.Fatalf("a file of %d bytes reported as not written yet", len(content))
			}
			return
		case errors.As(err, &inc):
			if strings.HasSuffix(string(content), End) {
				t.Fatalf("a file ending in the end marker reported as incomplete: %v", err)
			}
		case IsIncompatible(err):
		default:
			t.Fatalf("readFile returned %T %v", err, err)
		}
		if err == nil {
			return
		}
		msg := err.Error()
		if IsIncompatible(err) && !strings.Contains(msg, filepath.Base(ep.InfoFile)) {
			t.Fatalf("error does not name the server-info file: %s", msg)
		}
		if strings.ContainsAny(msg, "\n\r") {
			t.Fatalf("error spans several lines: %q", msg)
		}
		// Values are clipped when quoted, so one line stays short whatever
		// the file holds (seed long-version once made a 10 KB line).
		if len(msg) > 4096 {
			t.Fatalf("error of %d bytes for a file of %d bytes: quote less of the file", len(msg), len(content))
		}
	})
}
