package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/monovertex/monovertex/internal/mvconvert"
	"github.com/monovertex/monovertex/internal/testutil"
)

// TestManifestLargerThanTheCapFailsAtOnce: a 200 MB manifest (a corpus
// MonoVertex repeated, written to a temporary file a piece at a time) is
// refused with exit 2 and one line saying it is larger than the cap,
// having read no more than the cap: the run's peak RSS stays far below the
// input's size (it was 2,154 MB when mvctl read it whole).
func TestManifestLargerThanTheCapFailsAtOnce(t *testing.T) {
	bin := testutil.Build(t, "./cmd/mvctl")
	doc, err := os.ReadFile("testdata/corpus/generator-log.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const size = 200 << 20
	f := filepath.Join(t.TempDir(), "huge.yaml")
	fh, err := os.Create(f)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(fh, 1<<20)
	written := 0
	for written < size {
		n, err := w.WriteString("---\n" + string(doc))
		if err != nil {
			t.Fatal(err)
		}
		written += n
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	peakRSS := func(x *exec.Cmd) int64 { return x.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 } // KiB on Linux
	idle := exec.Command(bin, "version")
	if err := idle.Run(); err != nil {
		t.Fatal(err)
	}
	base := peakRSS(idle)
	var stdout, stderr bytes.Buffer
	x := exec.Command(bin, "convert", "-f", f)
	x.Stdout, x.Stderr = &stdout, &stderr
	_ = x.Run()
	rss := peakRSS(x)
	t.Logf("mvctl convert of a %d MB manifest: exit %d, peak RSS %.1f MB (mvctl version: %.1f MB), stderr %q", written>>20, x.ProcessState.ExitCode(), float64(rss)/(1<<20), float64(base)/(1<<20), stderr.String())
	want := fmt.Sprintf("mvctl: %s: manifest larger than 4 MiB (%d bytes)", f, mvconvert.MaxManifestBytes)
	if code := x.ProcessState.ExitCode(); code != 2 || stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 || !strings.HasPrefix(stderr.String(), want) {
		t.Fatalf("exit %d, %d bytes out, stderr %q; want exit 2, nothing out, one line %q...", code, stdout.Len(), stderr.String(), want)
	}
	// A bound on memory, not on time: the run holds at most the cap of
	// input (and the buffer it grew in), not the 200 MB.
	if rss > base+8*mvconvert.MaxManifestBytes {
		t.Fatalf("peak RSS %d MB for a refused %d MB input, %d MB for mvctl version; want at most 32 MB more", rss>>20, written>>20, base>>20)
	}
}

// TestEmptyAndNullDocumentsAreSkipped: documents that are empty, hold
// only comments or hold null (---, ~, null) are skipped as kubectl skips
// them; the MonoVertex after them converts to the same output as alone.
func TestEmptyAndNullDocumentsAreSkipped(t *testing.T) {
	bin := testutil.Build(t, "./cmd/mvctl")
	doc, err := os.ReadFile("testdata/corpus/generator-log.yaml")
	if err != nil {
		t.Fatal(err)
	}
	convert := func(in string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		x := exec.Command(bin, "convert", "-f", "-")
		x.Stdin, x.Stdout, x.Stderr = strings.NewReader(in), &stdout, &stderr
		_ = x.Run()
		return x.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	code, alone, stderr := convert(string(doc))
	if code != 0 || alone == "" {
		t.Fatalf("the manifest alone: exit %d, stderr %q", code, stderr)
	}
	for _, prefix := range []string{
		"---\n---\n",
		"---\n# only a comment\n---\n~\n---\nnull\n---\n",
		"\n---\n   \n---\n",
	} {
		code, out, stderr := convert(prefix + string(doc))
		if code != 0 || out != alone || stderr != "" {
			t.Fatalf("%q + manifest: exit %d, stderr %q, output equal to the manifest's alone: %v", prefix, code, stderr, out == alone)
		}
	}
}
