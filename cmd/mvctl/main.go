// Command mvctl brings Numaflow MonoVertex manifests to Knative: it
// converts them into the Knative Service (the runner plus the user's
// containers as sidecars), the pause ConfigMap and the autoscaler wiring
// that run them on the monovertex runner, validates the result with
// knative.dev/serving's own defaulting and validation, and explains how
// each field maps.
//
//	mvctl convert  -f FILE|DIR|- [--scaler hpa|keda] [flags]
//	mvctl validate -f FILE|DIR|- [--scaler hpa|keda] [flags]
//	mvctl explain
//
// Exit status: 0 done, 2 a manifest (or a flag) that cannot be used, with
// one stderr line naming the field path and why; 1 anything else (a file
// that cannot be read).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/monovertex/monovertex/internal/mvconvert"
	"github.com/monovertex/monovertex/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `Usage:
  mvctl convert  -f FILE|DIR|- [flags]   MonoVertex manifests -> Knative manifests on stdout
  mvctl validate -f FILE|DIR|- [flags]   convert, then knative.dev/serving v0.50.0 SetDefaults + Validate
  mvctl explain                          how each MonoVertex field maps (Markdown table)
  mvctl version

Flags of convert and validate:
`

// exitError carries an exit status and one line for stderr.
type exitError struct {
	code int
	line string
}

func (e *exitError) Error() string { return e.line }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		newFlags(io.Discard).fs.PrintDefaults()
		return 2
	}
	var err error
	switch args[0] {
	case "convert", "validate":
		err = convert(args[0], args[1:], stdin, stdout, stderr)
	case "explain":
		mvconvert.WriteTable(stdout)
	case "version", "--version":
		fmt.Fprintln(stdout, "mvctl", version.Version, version.Commit)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		f := newFlags(stdout)
		f.fs.SetOutput(stdout)
		f.fs.PrintDefaults()
	default:
		err = &exitError{2, fmt.Sprintf("unknown command %q: want convert, validate or explain (mvctl --help)", args[0])}
	}
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) {
			ee = &exitError{1, err.Error()}
		}
		fmt.Fprintln(stderr, "mvctl: "+oneLine(ee.line))
		return ee.code
	}
	return 0
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

type flags struct {
	fs    *flag.FlagSet
	files multiFlag
	opts  mvconvert.Options
	// transformerJSONata and udfJSONata are the files the JSONata
	// expressions are read from.
	transformerJSONata, udfJSONata string
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func newFlags(out io.Writer) *flags {
	f := &flags{fs: flag.NewFlagSet("mvctl", flag.ContinueOnError)}
	f.fs.SetOutput(out)
	f.fs.Var(&f.files, "f", "a MonoVertex manifest file (many documents allowed), a directory of *.yaml/*.yml/*.json, or - for stdin; repeatable")
	f.fs.StringVar(&f.opts.Scaler, "scaler", mvconvert.ScalerHPA, "autoscaler wiring: hpa (Knative's HPA class on monovtx_backlog_seconds through prometheus-adapter) or keda (Knative's autoscaler-keda extension; carries the scale behavior and cron)")
	f.fs.StringVar(&f.opts.RunnerImage, "image", mvconvert.DefaultRunnerImage, "the runner's image")
	f.fs.StringVar(&f.opts.PrometheusAddress, "prometheus-address", mvconvert.DefaultPrometheusAddress, "Prometheus KEDA queries (--scaler keda)")
	f.fs.BoolVar(&f.opts.PodMonitor, "podmonitor", true, "add a Prometheus Operator PodMonitor that scrapes the runner's admin port")
	f.fs.StringVar(&f.opts.RolloutDuration, "rollout-duration", "", "spread a new revision's rollout over this duration (serving.knative.dev/rollout-duration, e.g. 120s)")
	f.fs.StringVar(&f.opts.TransformerFilter, "transformer-to-filter", "", "replace spec.source.transformer, a container that only filters, by the runner's in-process filter with this CESQL expression (MV_FILTER)")
	f.fs.StringVar(&f.transformerJSONata, "transformer-to-jsonata", "", "replace spec.source.transformer, a container that reshapes messages, by the in-process JSONata transformer with the expression in this file (carried in the ConfigMap)")
	f.fs.StringVar(&f.udfJSONata, "udf-to-jsonata", "", "replace spec.udf, a map container, by the in-process JSONata transformer with the expression in this file (carried in the ConfigMap)")
	return f
}

// readExpressions reads the files of --transformer-to-jsonata and
// --udf-to-jsonata into the options.
func (f *flags) readExpressions() error {
	for _, x := range []struct {
		flag, file string
		dst        *string
	}{{"--transformer-to-jsonata", f.transformerJSONata, &f.opts.TransformerJSONata}, {"--udf-to-jsonata", f.udfJSONata, &f.opts.UDFJSONata}} {
		if x.file == "" {
			continue
		}
		b, err := os.ReadFile(x.file)
		if err != nil {
			return &exitError{2, fmt.Sprintf("%s %q: %v", x.flag, x.file, err)}
		}
		*x.dst = string(b)
	}
	return nil
}

// source is one input file's documents.
type source struct {
	name string
	docs []mvconvert.Document
}

func convert(cmd string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	f := newFlags(stderr)
	if err := f.fs.Parse(args); err != nil {
		return &exitError{2, err.Error()}
	}
	if f.fs.NArg() > 0 {
		return &exitError{2, fmt.Sprintf("unexpected argument %q: name inputs with -f", f.fs.Arg(0))}
	}
	if len(f.files) == 0 {
		return &exitError{2, "no input: name a file, a directory or - (stdin) with -f"}
	}
	if err := f.readExpressions(); err != nil {
		return err
	}
	if s := f.opts.Scaler; s != mvconvert.ScalerHPA && s != mvconvert.ScalerKEDA {
		return &exitError{2, fmt.Sprintf("--scaler %q: want hpa or keda", s)}
	}
	if d := f.opts.RolloutDuration; d != "" {
		if !validRollout(d) {
			return &exitError{2, fmt.Sprintf("--rollout-duration %q: want whole seconds such as 120s or 2m", d)}
		}
	}
	srcs, err := readInputs(f.files, stdin)
	if err != nil {
		return err
	}
	var out []any
	converted := 0
	for _, src := range srcs {
		for _, doc := range src.docs {
			if doc.MonoVertex == nil {
				fmt.Fprintf(stderr, "mvctl: warning: %s: %s: not a MonoVertex: passed through unchanged\n", src.name, doc.Describe())
				out = append(out, rawObject(doc.Raw))
				continue
			}
			res, err := mvconvert.Convert(doc.MonoVertex, f.opts)
			if err != nil {
				var fe *mvconvert.FieldError
				if errors.As(err, &fe) {
					return &exitError{2, fmt.Sprintf("%s: %s: %s", src.name, doc.Describe(), fe.Error())}
				}
				return err
			}
			for _, w := range res.Warnings {
				fmt.Fprintf(stderr, "mvctl: warning: %s: %s: %s\n", src.name, doc.Describe(), oneLine(w))
			}
			converted++
			if cmd == "validate" {
				adm, err := mvconvert.Admit(res.Service, res.SortedFeatures())
				if err != nil {
					return err
				}
				for _, w := range adm.Warnings {
					fmt.Fprintf(stderr, "mvctl: warning: %s: %s: Knative's webhook warns: %s\n", src.name, doc.Describe(), w)
				}
				if len(adm.Errors) > 0 {
					return &exitError{2, fmt.Sprintf("%s: %s: Knative's webhook would reject Service %q: %s", src.name, doc.Describe(), res.Service.Name, strings.Join(adm.Errors, "; "))}
				}
				feats := "the default config-features"
				if fl := res.SortedFeatures(); len(fl) > 0 {
					feats = "config-features " + strings.Join(fl, ", ") + " enabled"
				}
				fmt.Fprintf(stdout, "%s: %s: Service %q passes knative.dev/serving v0.50.0 SetDefaults and Validate (%s)\n", src.name, doc.Describe(), res.Service.Name, feats)
				continue
			}
			out = append(out, res.Objects()...)
		}
	}
	if converted == 0 {
		return &exitError{2, "no MonoVertex in the input"}
	}
	if cmd == "convert" {
		b, err := mvconvert.MarshalYAML(out)
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	return nil
}

// validRollout accepts what Knative's rollout-duration takes: a
// non-negative duration in whole seconds.
func validRollout(d string) bool {
	dur, err := parseDuration(d)
	return err == nil && dur >= 0 && dur%1e9 == 0
}

// readInputs reads every -f: files, directories (their *.yaml, *.yml and
// *.json, sorted) and - for stdin.
func readInputs(names []string, stdin io.Reader) ([]source, error) {
	var files []string
	for _, n := range names {
		if n == "-" {
			files = append(files, n)
			continue
		}
		st, err := os.Stat(n)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, n)
			continue
		}
		entries, err := os.ReadDir(n)
		if err != nil {
			return nil, err
		}
		var in []string
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					in = append(in, filepath.Join(n, e.Name()))
				}
			}
		}
		sort.Strings(in)
		if len(in) == 0 {
			return nil, &exitError{2, fmt.Sprintf("%s: no *.yaml, *.yml or *.json files", n)}
		}
		files = append(files, in...)
	}
	var srcs []source
	for _, name := range files {
		var r io.Reader
		display := name
		if name == "-" {
			r, display = stdin, "stdin"
		} else {
			fh, err := os.Open(name)
			if err != nil {
				return nil, err
			}
			defer fh.Close()
			r = fh
		}
		docs, err := mvconvert.ReadDocuments(r)
		if err != nil {
			if mvconvert.IsFieldError(err) {
				return nil, &exitError{2, display + ": " + err.Error()}
			}
			return nil, fmt.Errorf("%s: %w", display, err)
		}
		srcs = append(srcs, source{name: display, docs: docs})
	}
	return srcs, nil
}

// rawObject is a passed-through document, as a generic object.
func rawObject(js []byte) any {
	var v any
	_ = json.Unmarshal(js, &v)
	return v
}

func parseDuration(s string) (time.Duration, error) { return time.ParseDuration(s) }
