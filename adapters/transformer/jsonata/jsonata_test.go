package jsonata

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

func msg(id, ct, value string) *runner.Message {
	h := map[string]string{cewire.HeaderType: "order.created", cewire.HeaderSource: "/shop", "region": "eu"}
	if ct != "" {
		h[cewire.HeaderContentType] = ct
	}
	return &runner.Message{ID: id, Keys: []string{"k1"}, Value: []byte(value), EventTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Headers: h}
}

func newTransformer(t *testing.T, expr string) *Transformer {
	t.Helper()
	tr, err := New(Config{Expression: expr}, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func one(t *testing.T, tr *Transformer, m *runner.Message) runner.TransformResult {
	t.Helper()
	res, err := tr.Transform(context.Background(), []*runner.Message{m})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("%d results, want 1", len(res))
	}
	return res[0]
}

// TestReshapesAsEventTransform: the input is the event in the JSON
// format, and the result's members become the output's attributes and data.
func TestReshapesAsEventTransform(t *testing.T) {
	tr := newTransformer(t, `{"specversion": "1.0", "id": id, "type": "order.total", "source": source,
		"region": region, "partitionkey": partitionkey & "-x", "prio": data.n > 1,
		"data": {"total": $sum(data.items.price), "at": time, "ct": datacontenttype}}`)
	r := one(t, tr, msg("o-1", "application/json", `{"n":2,"items":[{"price":1.5},{"price":2}]}`))
	if r.Err != nil || len(r.Outputs) != 1 {
		t.Fatalf("result %+v, want one output", r)
	}
	o := r.Outputs[0]
	want := map[string]string{cewire.HeaderType: "order.total", cewire.HeaderSource: "/shop", "region": "eu", "prio": "true", cewire.HeaderContentType: "application/json"}
	if len(o.Headers) != len(want) {
		t.Errorf("headers %v, want %v", o.Headers, want)
	}
	for k, v := range want {
		if o.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, o.Headers[k], v)
		}
	}
	if got := string(o.Value); got != `{"at":"2026-01-02T03:04:05Z","ct":"application/json","total":3.5}` {
		t.Errorf("data %s", got)
	}
	if len(o.Keys) != 1 || o.Keys[0] != "k1-x" {
		t.Errorf("keys %q, want [k1-x]", o.Keys)
	}
	if !o.EventTime.IsZero() {
		t.Errorf("event time %v, want none (the engine keeps the input's)", o.EventTime)
	}
}

func TestDropsFansOutAndFails(t *testing.T) {
	tr := newTransformer(t, `data.kind = "drop" ? undefined :
		data.kind = "null" ? null :
		data.kind = "none" ? [] :
		data.kind = "fan" ? $map(data.items, function($v) {{"type": "item", "source": "/items", "data": $v}}) :
		data.kind = "text" ? {"type": "t", "source": "/s", "datacontenttype": "text/plain", "data": "plain <&>"} :
		data.kind = "bin" ? {"type": "b", "source": "/s", "data_base64": "AAEC"} :
		data.kind = "number" ? 5 :
		data.kind = "badspec" ? {"specversion": "0.3", "data": 1} :
		data.kind = "badtime" ? {"time": "yesterday"} :
		data.kind = "badext" ? {"Region": "x"} :
		data.kind = "mixed" ? [{"type": "a"}, "b"] :
		data.kind = "err" ? $number("x") :
		{"type": "same", "source": source, "data": data}`)
	for _, tc := range []struct {
		kind, ct, value string
		outs            []string // values of the outputs; nil for an error
		errIn           string
	}{
		{kind: "drop", outs: []string{}},
		{kind: "null", outs: []string{}},
		{kind: "none", outs: []string{}},
		{kind: "fan", value: `{"kind":"fan","items":[1,"two",{"three":3}]}`, outs: []string{`1`, `"two"`, `{"three":3}`}},
		{kind: "text", outs: []string{"plain <&>"}},
		{kind: "bin", outs: []string{"\x00\x01\x02"}},
		{kind: "same", ct: "application/cloudevents+json", value: `{"kind":"same","a":[1]}`, outs: []string{`{"a":[1],"kind":"same"}`}},
		{kind: "malformed", value: `{"kind":`, errIn: "data is not valid JSON though it has content type application/json"},
		{kind: "malformed, no content type", ct: "-", value: `nope`, errIn: "data is not valid JSON though it has no content type"},
		{kind: "number", errIn: "gave a number; want an object"},
		{kind: "badspec", errIn: `specversion "0.3"`},
		{kind: "badtime", errIn: "not RFC 3339"},
		{kind: "badext", errIn: `"Region" cannot be a CloudEvents attribute`},
		{kind: "mixed", errIn: "element 1 of the expression's array is a string"},
		{kind: "err", errIn: "evaluating the expression"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			value := tc.value
			if value == "" {
				value = `{"kind":"` + tc.kind + `"}`
			}
			ct := tc.ct
			switch ct {
			case "":
				ct = "application/json"
			case "-":
				ct = ""
			}
			r := one(t, tr, msg("m-"+tc.kind, ct, value))
			if tc.errIn != "" {
				if !runner.IsPermanent(r.Err) || !strings.Contains(r.Err.Error(), tc.errIn) {
					t.Fatalf("err = %v, want a permanent error containing %q", r.Err, tc.errIn)
				}
				return
			}
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if len(r.Outputs) != len(tc.outs) {
				t.Fatalf("%d outputs, want %d", len(r.Outputs), len(tc.outs))
			}
			for k, o := range r.Outputs {
				if string(o.Value) != tc.outs[k] {
					t.Errorf("output %d: value %q, want %q", k, o.Value, tc.outs[k])
				}
				if o.Headers == nil || o.Keys == nil {
					t.Errorf("output %d: nil headers or keys would take the input's", k)
				}
			}
		})
	}
}

func TestInvalidExpressionNamesVariableAndPosition(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "expr")
	if err := os.WriteFile(file, []byte("{\n  \"id\": id,\n  \"data\": data.(\n}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		wantIn []string
	}{
		{"inline", Config{Expression: `{"a": data.x +}`}, []string{`invalid MV_JSONATA_EXPRESSION="{\"a\": data.x +}"`, "JSONata syntax error at column 15"}},
		{"file", Config{File: file}, []string{`invalid MV_JSONATA_EXPRESSION_FILE="` + file + `"`, "at line 4, column 1"}},
		{"missing file", Config{File: filepath.Join(dir, "none")}, []string{"MV_JSONATA_EXPRESSION_FILE", "cannot be read"}},
		{"none", Config{}, []string{"MV_JSONATA_EXPRESSION", "required"}},
		{"both", Config{Expression: "$", File: file}, []string{"MV_JSONATA_EXPRESSION_FILE", "not both"}},
		{"blank", Config{Expression: " \n"}, []string{"MV_JSONATA_EXPRESSION", "empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate(runner.RoleTransformer)
			var ce *runner.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("more than one line: %q", err)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestParallelBatchKeepsOrder: a batch shared among goroutines gives each
// message its own result, in input order, with a built-in function that
// reads its context ($string() with no argument), which jsonata-go keeps
// in one global environment (with -race this fails without evalMu).
func TestParallelBatchKeepsOrder(t *testing.T) {
	tr := newTransformer(t, `{"type": "t", "source": "/s", "data": $number(data.n.$string()) * 2}`)
	in := make([]*runner.Message, 1000)
	for i := range in {
		in[i] = msg("m", "application/json", `{"n":`+strings.Repeat("1", 1+i%5)+`}`)
	}
	// Two batches at once, as the engine's in-flight batches call it.
	var other []runner.TransformResult
	done := make(chan error, 1)
	go func() {
		var err error
		other, err = tr.Transform(context.Background(), in)
		done <- err
	}()
	res, err := tr.Transform(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, r := range append(res, other...) {
		i %= len(in)
		n := strings.Repeat("1", 1+i%5)
		want := map[string]string{"1": "2", "11": "22", "111": "222", "1111": "2222", "11111": "22222"}[n]
		if r.Err != nil || len(r.Outputs) != 1 || string(r.Outputs[0].Value) != want {
			t.Fatalf("result %d: %+v, want data %s", i, r, want)
		}
	}
}
