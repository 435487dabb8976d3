package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContainersMoveToInProcessStages: a transformer container that only
// filters becomes MV_FILTER, a map container becomes the JSONata
// transformer with its expression in the ConfigMap; the replaced
// containers are not carried, each replacement is a warning naming its
// path, and an expression the runner would refuse, or a flag with nothing
// to replace, exits 2 naming the flag.
func TestContainersMoveToInProcessStages(t *testing.T) {
	dir := t.TempDir()
	expr := filepath.Join(dir, "reshape.jsonata")
	if err := os.WriteFile(expr, []byte(`{"type": "order.total", "source": source, "data": {"total": $sum(data.items.price)}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonata")
	if err := os.WriteFile(bad, []byte("{\n  \"a\": data.(\n}"), 0o644); err != nil {
		t.Fatal(err)
	}
	const withTransformer, withUDF = "testdata/corpus/udsource-transformer-udsink.yaml", "testdata/corpus/udf-onsuccess-bypass.yaml"

	var out, errs bytes.Buffer
	for _, args := range [][]string{{"-f", withTransformer, "--transformer-to-filter", "type LIKE 'order.%'"}, {"-f", withUDF, "--udf-to-jsonata", expr}} {
		if code := run(append([]string{"validate"}, args...), nil, &out, &errs); code != 0 {
			t.Fatalf("validate %v: exit %d: %s", args, code, errs.String())
		}
	}
	out.Reset()
	errs.Reset()
	if code := run([]string{"convert", "-f", withTransformer, "--transformer-to-filter", "type LIKE 'order.%'"}, nil, &out, &errs); code != 0 {
		t.Fatalf("filter: exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"name: MV_FILTER", "value: type LIKE 'order.%'"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("filter: output lacks %q", want)
		}
	}
	for _, gone := range []string{"name: transformer", "MV_TRANSFORMER"} {
		if strings.Contains(out.String(), gone) {
			t.Errorf("filter: output still has %q", gone)
		}
	}
	if !strings.Contains(errs.String(), "spec.source.transformer: replaced by the in-process filter") {
		t.Errorf("filter: no warning naming the replaced container:\n%s", errs.String())
	}

	out.Reset()
	errs.Reset()
	if code := run([]string{"convert", "-f", withUDF, "--udf-to-jsonata", expr}, nil, &out, &errs); code != 0 {
		t.Fatalf("jsonata: exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"jsonata-udf: '{\"type\": \"order.total\"", "name: MV_UDF\n          value: jsonata", "value: /etc/monovertex/config/jsonata-udf"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("jsonata: output lacks %q", want)
		}
	}
	if strings.Contains(out.String(), "name: udf\n") || strings.Contains(out.String(), "value: udmap") {
		t.Errorf("jsonata: the map container is still carried")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-f", withUDF, "--udf-to-jsonata", bad}, "--udf-to-jsonata: JSONata syntax error at line 3, column 1"},
		{[]string{"-f", withTransformer, "--transformer-to-filter", "type ="}, "--transformer-to-filter: becomes MV_FILTER=\"type =\", which the runner refuses at start (exit 2): CESQL syntax error at column 7"},
		{[]string{"-f", withUDF, "--transformer-to-filter", "true"}, "--transformer-to-filter: the MonoVertex has no spec.source.transformer to replace"},
		{[]string{"-f", withTransformer, "--udf-to-jsonata", expr}, "--udf-to-jsonata: the MonoVertex has no spec.udf to replace"},
		{[]string{"-f", withUDF, "--udf-to-jsonata", filepath.Join(dir, "none")}, "--udf-to-jsonata"},
	} {
		out.Reset()
		errs.Reset()
		code := run(append([]string{"convert"}, tc.args...), nil, &out, &errs)
		lines := strings.Split(strings.TrimRight(errs.String(), "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, %d bytes out; want 2 and one line with %q", tc.args, code, errs.String(), out.Len(), tc.want)
		}
	}
}
