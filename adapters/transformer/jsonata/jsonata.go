// Package jsonata is an in-process transformer (MV_TRANSFORMER=jsonata, or
// MV_UDF=jsonata) that reshapes each message with a JSONata expression,
// as a Knative EventTransform's spec.jsonata.expression does, without a
// network hop or a container.
//
// The expression's input is the message as a CloudEvent in the JSON event
// format (the mapping of package cewire, MV_CE_SOURCE and MV_CE_TYPE
// included): specversion, id, source, type, subject, time, dataschema,
// datacontenttype, partitionkey and the extensions as members, and data
// decoded as JSON when the content type is JSON or absent (the JSON
// format's rule), a string when it is other text, or data_base64. Data
// that claims to be JSON and is not fails the message permanently.
//
// Its result decides the outputs, as a CloudEvents function's reply does:
//
//   - an object: one output event, its members the attributes and data
//     (data_base64 for bytes); a missing datacontenttype with data is
//     application/json; missing source or type are the sink's defaults;
//     id is the engine's (the input's, -k for several), as for every stage;
//     a missing time keeps the input's event time.
//   - an array of objects: one output each (fan-out); an empty array drops.
//   - nothing (undefined) or null: the message is dropped on purpose.
//   - anything else, an evaluation error, or an attribute that cannot be
//     one (a specversion other than 1.0, a time that is not RFC 3339, an
//     extension name that is not a-z0-9): a permanent failure, since the
//     same input gives the same result; MV_ON_FAILURE decides, and with
//     retry the message is evaluated again at most once a second
//     (cewire.PermanentRetryFloor).
//
// Objects come out of JSONata as Go maps, so members of output data are
// written in sorted order; numbers are float64 (integers above 2^53 lose
// precision), as in JSONata itself.
package jsonata

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	jsonatago "github.com/blues/jsonata-go"
	"github.com/blues/jsonata-go/jparse"
	"github.com/cloudevents/sdk-go/v2/event"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the transformer's settings.
type Config struct {
	Expression string `envconfig:"MV_JSONATA_EXPRESSION" desc:"JSONata expression reshaping each message, seen as a CloudEvent, into an event (an object), several (an array) or none (undefined: drop), as Knative's EventTransform spec.jsonata.expression; this or MV_JSONATA_EXPRESSION_FILE is required with jsonata"`
	File       string `envconfig:"MV_JSONATA_EXPRESSION_FILE" desc:"file holding the JSONata expression, such as a mounted ConfigMap key (/etc/jsonata/jsonata-expression); read once at start"`
	cewire.Config

	// source is the expression and where it came from, after Validate.
	source, from string
	compiled     *jsonatago.Expr
}

// Validate reads and compiles the expression, so one that does not parse
// stops the runner at start (exit 2) with where it failed.
func (c *Config) Validate(runner.Role) error {
	switch {
	case c.Expression != "" && c.File != "":
		return &runner.ConfigError{Var: "MV_JSONATA_EXPRESSION_FILE", Value: c.File, Reason: "set either it or MV_JSONATA_EXPRESSION, not both"}
	case c.File != "":
		b, err := os.ReadFile(c.File)
		if err != nil {
			return &runner.ConfigError{Var: "MV_JSONATA_EXPRESSION_FILE", Value: c.File, Reason: "cannot be read: " + err.Error()}
		}
		c.source, c.from = string(b), "MV_JSONATA_EXPRESSION_FILE"
	case c.Expression != "":
		c.source, c.from = c.Expression, "MV_JSONATA_EXPRESSION"
	default:
		return &runner.ConfigError{Var: "MV_JSONATA_EXPRESSION", Value: "", Reason: "required with jsonata (or MV_JSONATA_EXPRESSION_FILE): a JSONata expression such as {\"specversion\":\"1.0\",\"id\":id,\"type\":\"order.total\",\"source\":source,\"data\":{\"total\":$sum(data.items.price)}}"}
	}
	value := c.Expression
	if c.from == "MV_JSONATA_EXPRESSION_FILE" {
		value = c.File
	}
	if strings.TrimSpace(c.source) == "" {
		return &runner.ConfigError{Var: c.from, Value: value, Reason: "the expression is empty"}
	}
	e, err := compile(c.source)
	if err != nil {
		return &runner.ConfigError{Var: c.from, Value: value, Reason: err.Error()}
	}
	c.compiled = e
	return c.Config.Validate()
}

// compile parses expr; a syntax error says where, as line and column (of
// the expression, counting from 1) when it has several lines.
func compile(expr string) (e *jsonatago.Expr, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("JSONata expression not understood: %v", r)
		}
	}()
	e, err = jsonatago.Compile(expr)
	if err == nil {
		return e, nil
	}
	var pe *jparse.Error
	if !errors.As(err, &pe) {
		return nil, fmt.Errorf("JSONata syntax error: %v", err)
	}
	// The message quotes the token as written; a line break in it would
	// split the one line the runner prints.
	msg := strings.NewReplacer("\r", `\r`, "\n", `\n`, "\t", `\t`).Replace(err.Error())
	return nil, fmt.Errorf("JSONata syntax error at %s: %s", position(expr, pe.Position), msg)
}

// position names byte offset off of expr as "column C" on a one-line
// expression, "line L, column C" otherwise, counting characters from 1.
func position(expr string, off int) string {
	off = max(0, min(off, len(expr)))
	line := 1 + strings.Count(expr[:off], "\n")
	col := 1 + utf8.RuneCountInString(expr[strings.LastIndexByte(expr[:off], '\n')+1:off])
	if !strings.Contains(expr, "\n") {
		return fmt.Sprintf("column %d", col)
	}
	return fmt.Sprintf("line %d, column %d", line, col)
}

func init() {
	runner.RegisterTransformer("jsonata", func(_ context.Context, env runner.Env, cfg *Config) (runner.Transformer, error) {
		return New(*cfg, env.Name, env.Logger)
	})
}

// Transformer evaluates the expression on each message.
type Transformer struct {
	expr   *jsonatago.Expr
	mapper *cewire.Mapper
	floor  *cewire.Floor
	log    *zap.SugaredLogger
}

var _ runner.Transformer = (*Transformer)(nil)

// New builds a transformer; name is MV_NAME (for the default event source).
func New(cfg Config, name string, log *zap.SugaredLogger) (*Transformer, error) {
	if err := cfg.Validate(runner.RoleTransformer); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	mapper, err := cewire.New(cfg.Config, name, log)
	if err != nil {
		return nil, err
	}
	return &Transformer{expr: cfg.compiled, mapper: mapper, floor: cewire.NewFloor(cewire.PermanentRetryFloor), log: log}, nil
}

// evalMu serializes every evaluation in the process: jsonata-go v1.5.4
// keeps its built-in functions ($map, $sum, $string...) in one global
// environment and sets their name and context data on each call
// (evalFunctionCall: SetName, SetContext), so two evaluations at once,
// even of different expressions, race and can read each other's context.
// Decoding the input and encoding the outputs, the larger part of the
// cost at 1 KiB, still run in parallel.
var evalMu sync.Mutex

// parallelFrom is the batch size from which a batch is shared among
// GOMAXPROCS goroutines; below it the start-up costs more than it saves.
const parallelFrom = 64

// Transform evaluates the expression on every message and returns one
// result per message, in input order.
func (t *Transformer) Transform(ctx context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	if err := t.floor.Wait(ctx, ids); err != nil {
		return nil, fmt.Errorf("jsonata transformer: %w", err)
	}
	results := make([]runner.TransformResult, len(msgs))
	workers := min(runtime.GOMAXPROCS(0), len(msgs)/parallelFrom+1)
	if workers <= 1 {
		for i, m := range msgs {
			results[i] = t.transform(m)
		}
	} else {
		var wg sync.WaitGroup
		per := (len(msgs) + workers - 1) / workers
		for lo := 0; lo < len(msgs); lo += per {
			hi := min(lo+per, len(msgs))
			wg.Go(func() {
				for i := lo; i < hi; i++ {
					results[i] = t.transform(msgs[i])
				}
			})
		}
		wg.Wait()
	}
	for i, r := range results {
		if r.Err != nil {
			t.floor.Mark(msgs[i].ID)
		}
	}
	return results, nil
}

// transform evaluates the expression on one message.
func (t *Transformer) transform(m *runner.Message) runner.TransformResult {
	fail := func(format string, a ...any) runner.TransformResult {
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("jsonata transformer: message %q: "+format, append([]any{m.ID}, a...)...))}
	}
	ev, err := t.mapper.ToEvent(m)
	if err != nil {
		return fail("%w", err)
	}
	in, err := Input(&ev)
	if err != nil {
		return fail("%w", err)
	}
	evalMu.Lock()
	res, err := t.expr.Eval(in)
	evalMu.Unlock()
	switch {
	case errors.Is(err, jsonatago.ErrUndefined):
		return runner.TransformResult{}
	case err != nil:
		return fail("evaluating the expression: %w", err)
	}
	var objs []any
	switch v := res.(type) {
	case nil:
		return runner.TransformResult{}
	case map[string]any:
		objs = []any{v}
	case []any:
		objs = v
	default:
		return fail("the expression gave %s; want an object (an event), an array of them, or nothing", describe(res))
	}
	outs := make([]*runner.Message, 0, len(objs))
	for k, o := range objs {
		obj, ok := o.(map[string]any)
		if !ok {
			return fail("element %d of the expression's array is %s; want an object (an event)", k, describe(o))
		}
		out, err := Output(obj)
		if err != nil {
			return fail("output %d: %w", k, err)
		}
		outs = append(outs, out)
	}
	return runner.TransformResult{Outputs: outs}
}

// describe names a JSON value's kind for errors.
func describe(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64, int, int64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case nil:
		return "null"
	}
	return fmt.Sprintf("a %T", v)
}

// Input is ev in the CloudEvents JSON event format, as decoded JSON: the
// value a JSONata expression sees.
func Input(ev *event.Event) (map[string]any, error) {
	in := map[string]any{"specversion": ev.SpecVersion(), "id": ev.ID(), "source": ev.Source(), "type": ev.Type()}
	if s := ev.Subject(); s != "" {
		in["subject"] = s
	}
	if s := ev.DataSchema(); s != "" {
		in["dataschema"] = s
	}
	if t := ev.Time(); !t.IsZero() {
		in["time"] = t.UTC().Format(time.RFC3339Nano)
	}
	ct := ev.DataContentType()
	if ct != "" {
		in["datacontenttype"] = ct
	}
	for name, v := range ev.Extensions() {
		in[name] = v
	}
	data := ev.Data()
	switch {
	case len(data) == 0:
	case ct == "" || isJSON(ct):
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			what := "no content type (JSON, by the JSON event format)"
			if ct != "" {
				what = "content type " + ct
			}
			return nil, fmt.Errorf("data is not valid JSON though it has %s: %w", what, err)
		}
		in["data"] = v
	case strings.HasPrefix(ct, "text/") && utf8.Valid(data):
		in["data"] = string(data)
	default:
		in["data_base64"] = base64.StdEncoding.EncodeToString(data)
	}
	return in, nil
}

// isJSON reports whether a media type is JSON: application/json, text/json
// or a +json suffix, parameters aside.
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// Output turns one event of the expression's result, in the JSON event
// format, into a message, as cewire maps an event: context attributes to
// the ce-* and content-type headers, partitionkey to Keys, the other
// members to extension headers, data (JSON-encoded unless it is a string
// of a non-JSON content type) or data_base64 to Value. The headers are
// never nil, so the engine does not fill in the input's.
func Output(obj map[string]any) (*runner.Message, error) {
	m := &runner.Message{Headers: map[string]string{}, Keys: []string{}}
	var data any
	hasData := false
	for name, v := range obj {
		switch name {
		case "data":
			data, hasData = v, true
			continue
		case "data_base64":
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("data_base64 is %s; want a string", describe(v))
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, fmt.Errorf("data_base64 is not base64: %w", err)
			}
			m.Value = b
			continue
		}
		s, err := attribute(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", name, err)
		}
		switch name {
		case "specversion":
			if s != event.CloudEventsVersionV1 {
				return nil, fmt.Errorf("specversion %q; want 1.0", s)
			}
		case "id":
			m.ID = s
		case "source":
			m.Headers[cewire.HeaderSource] = s
		case "type":
			m.Headers[cewire.HeaderType] = s
		case "subject":
			m.Headers[cewire.HeaderSubject] = s
		case "dataschema":
			m.Headers[cewire.HeaderDataSchema] = s
		case "datacontenttype":
			m.Headers[cewire.HeaderContentType] = s
		case "time":
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return nil, fmt.Errorf("time %q is not RFC 3339", s)
			}
			m.EventTime = t
		case cewire.PartitionKeyExtension:
			m.Keys = cewire.DecodeKeys(s)
		default:
			if !cewire.ValidExtensionName(name) {
				return nil, fmt.Errorf("%q cannot be a CloudEvents attribute: extension names are a-z and 0-9, at most %d characters", name, cewire.MaxExtensionNameLength)
			}
			m.Headers[name] = s
		}
	}
	if hasData && m.Value != nil {
		return nil, errors.New("both data and data_base64 are set")
	}
	if hasData && data != nil {
		ct := m.Headers[cewire.HeaderContentType]
		if s, ok := data.(string); ok && ct != "" && !isJSON(ct) {
			m.Value = []byte(s)
		} else {
			b, err := marshal(data)
			if err != nil {
				return nil, fmt.Errorf("data: %w", err)
			}
			m.Value = b
			if ct == "" {
				m.Headers[cewire.HeaderContentType] = "application/json"
			}
		}
	}
	return m, nil
}

// attribute is a context attribute's or extension's value as a string:
// strings as they are, numbers and booleans in JSON's form.
func attribute(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool, float64:
		b, _ := json.Marshal(x)
		return string(b), nil
	}
	return "", fmt.Errorf("is %s; want a string, number or boolean", describe(v))
}

// marshal encodes v as JSON without escaping <, > and & (the payload is
// data, not HTML) and without a trailing newline.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Close does nothing: the transformer holds no resources.
func (t *Transformer) Close(context.Context) error { return nil }
