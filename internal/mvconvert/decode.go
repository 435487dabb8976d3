// Package mvconvert turns Numaflow MonoVertex manifests into the Knative
// manifests that run them on the monovertex runner: strict decoding that
// names the exact path of a bad field, the field-by-field conversion, the
// table of how each field maps (mvctl explain), and Knative's own
// defaulting and validation of the result.
package mvconvert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	numaflowapi "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	"github.com/monovertex/monovertex/internal/textdist"
)

// FieldError is a field that cannot be carried over: Path names it exactly
// as it sits in the manifest (spec.sink.retryStrategy.backoff.steps,
// spec.sidecars[1].ports), Reason says why and what to do instead.
type FieldError struct {
	Path   string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// refuse returns a *FieldError; fmt-style arguments format the reason.
func refuse(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// Document is one YAML document of the input.
type Document struct {
	// Index counts documents from 1 in their file.
	Index int
	// APIVersion, Kind and Name identify it.
	APIVersion, Kind, Name string
	// MonoVertex is the decoded object when Kind is MonoVertex.
	MonoVertex *numaflowapi.MonoVertex
	// Raw is the document as JSON (for objects passed through unchanged).
	Raw []byte
}

// Describe names the document for messages: `document 2 (MonoVertex "x")`.
func (d Document) Describe() string {
	if d.Name != "" {
		return fmt.Sprintf("document %d (%s %q)", d.Index, d.Kind, d.Name)
	}
	if d.Kind != "" {
		return fmt.Sprintf("document %d (%s)", d.Index, d.Kind)
	}
	return fmt.Sprintf("document %d", d.Index)
}

// DocumentError is a *FieldError in one document of the input.
type DocumentError struct {
	Doc Document
	Err *FieldError
}

func (e *DocumentError) Error() string { return e.Doc.Describe() + ": " + e.Err.Error() }

// MaxManifestBytes bounds one input (a file or stdin): Kubernetes keeps an
// object of at most 1.5 MiB (etcd's request limit) and its API server
// takes a request body of at most 3 MiB, so a larger manifest is no
// MonoVertex anyone applies, and reading it whole would hold all of it
// (and several times it, decoded) in memory.
const MaxManifestBytes = 4 << 20

// ReadDocuments splits a multi-document YAML (or JSON) stream and decodes
// each MonoVertex strictly: an unknown field or a value of the wrong type is
// a *DocumentError naming the field's path. Empty, comment-only and null
// documents are skipped, as kubectl skips them. A stream larger than
// MaxManifestBytes is a *FieldError, read no further than the limit.
func ReadDocuments(r io.Reader) ([]Document, error) {
	all, err := io.ReadAll(io.LimitReader(r, MaxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(all) > MaxManifestBytes {
		return nil, refuse("", "manifest larger than %d MiB (%d bytes): Kubernetes stores objects of at most 1.5 MiB and takes requests of at most 3 MiB; split the input", MaxManifestBytes>>20, MaxManifestBytes)
	}
	yr := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(all)))
	var docs []Document
	for index := 1; ; index++ {
		chunk, err := yr.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return docs, fmt.Errorf("document %d: %w", index, err)
		}
		if len(bytes.TrimSpace(stripComments(chunk))) == 0 {
			index--
			continue
		}
		doc, err := decodeDocument(index, chunk)
		if errors.Is(err, errNullDocument) {
			index--
			continue
		}
		if err != nil {
			return docs, err
		}
		docs = append(docs, doc)
	}
}

// errNullDocument is a document that holds null (a bare ---, ~ or null),
// which kubectl skips as empty.
var errNullDocument = errors.New("null document")

// stripComments drops full-line YAML comments, so a document of comments
// only counts as empty.
func stripComments(b []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

func decodeDocument(index int, chunk []byte) (Document, error) {
	doc := Document{Index: index}
	js, err := yaml.YAMLToJSONStrict(chunk)
	if err != nil {
		return doc, &DocumentError{Doc: doc, Err: refuse("", "not valid YAML: %v", err)}
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return doc, &DocumentError{Doc: doc, Err: refuse("", "not valid YAML: %v", err)}
	}
	if tree == nil {
		return doc, errNullDocument
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return doc, &DocumentError{Doc: doc, Err: refuse("", "want a Kubernetes object, got %s", describe(tree))}
	}
	doc.Raw = js
	doc.APIVersion, _ = obj["apiVersion"].(string)
	doc.Kind, _ = obj["kind"].(string)
	if md, ok := obj["metadata"].(map[string]any); ok {
		doc.Name, _ = md["name"].(string)
	}
	group, _, _ := strings.Cut(doc.APIVersion, "/")
	switch {
	case doc.Kind == "" || doc.APIVersion == "":
		return doc, &DocumentError{Doc: doc, Err: refuse("kind", "a Kubernetes object needs apiVersion and kind (numaflow.numaproj.io/v1alpha1, MonoVertex)")}
	case doc.Kind == numaflowapi.Kind && doc.APIVersion == numaflowapi.APIVersion:
	case group == numaflowapi.Group && doc.Kind == numaflowapi.Kind:
		return doc, &DocumentError{Doc: doc, Err: refuse("apiVersion", "%q: mvctl reads %s MonoVertex objects", doc.APIVersion, numaflowapi.APIVersion)}
	case group == numaflowapi.Group:
		return doc, &DocumentError{Doc: doc, Err: refuse("kind", "%s: only a MonoVertex converts to a runner (a Pipeline's vertices talk through Numaflow's inter-step buffer, which the runner does not have)", doc.Kind)}
	default:
		return doc, nil // passed through unchanged by the caller
	}
	if ferr := checkTree(tree, reflect.TypeOf(numaflowapi.MonoVertex{}), ""); ferr != nil {
		return doc, &DocumentError{Doc: doc, Err: ferr}
	}
	var mv numaflowapi.MonoVertex
	if err := json.Unmarshal(js, &mv); err != nil {
		// checkTree accepted it, so this is a gap in checkTree.
		return doc, &DocumentError{Doc: doc, Err: refuse("", "%v", err)}
	}
	doc.MonoVertex = &mv
	return doc, nil
}

var (
	unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	durationType    = reflect.TypeOf(metav1.Duration{})
	quantityType    = reflect.TypeOf(resource.Quantity{})
	intOrStringType = reflect.TypeOf(intstr.IntOrString{})
)

// checkTree checks a decoded JSON value against the Go type it will be
// decoded into, the way Kubernetes' strict decoding does, but naming the
// exact path of the first problem: unknown fields (JSON names match
// exactly, as in Kubernetes), values of the wrong type, numbers out of
// range. Keys are visited in sorted order, so the error is deterministic.
func checkTree(v any, t reflect.Type, path string) *FieldError {
	if v == nil {
		return nil // null is "not set", as in Kubernetes
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if err, known := checkKnownType(v, t, path); known {
		return err
	}
	if t.Kind() != reflect.Interface && reflect.PointerTo(t).Implements(unmarshalerType) {
		b, _ := json.Marshal(v)
		if err := json.Unmarshal(b, reflect.New(t).Interface()); err != nil {
			return refuse(path, "%v", err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Interface:
		return nil
	case reflect.Struct:
		return checkStruct(v, t, path)
	case reflect.Map:
		return checkMap(v, t, path)
	case reflect.Slice:
		return checkSlice(v, t, path)
	}
	return checkScalar(v, t, path)
}

// checkKnownType checks the Kubernetes types whose JSON form is a string
// or a number (durations, quantities, int-or-string); known is false for
// any other type.
func checkKnownType(v any, t reflect.Type, path string) (err *FieldError, known bool) {
	switch t {
	case durationType:
		s, ok := v.(string)
		if !ok {
			return refuse(path, "want a duration such as \"1s\" or \"1m30s\", got %s", describe(v)), true
		}
		if _, err := time.ParseDuration(s); err != nil {
			return refuse(path, "want a duration such as \"1s\" or \"1m30s\", got %q", s), true
		}
		return nil, true
	case quantityType:
		s := ""
		switch x := v.(type) {
		case string:
			s = x
		case json.Number:
			s = x.String()
		default:
			return refuse(path, "want a quantity such as \"500m\" or \"128Mi\", got %s", describe(v)), true
		}
		if _, err := resource.ParseQuantity(s); err != nil {
			return refuse(path, "want a quantity such as \"500m\" or \"128Mi\", got %q", s), true
		}
		return nil, true
	case intOrStringType:
		switch x := v.(type) {
		case string:
			return nil, true
		case json.Number:
			if _, err := strconv.ParseInt(x.String(), 10, 32); err == nil {
				return nil, true
			}
		}
		return refuse(path, "want a whole number or a string such as \"25%%\", got %s", describe(v)), true
	}
	return nil, false
}

// checkStruct checks an object's fields against struct type t: a key
// that is no field's JSON name is an unknown field.
func checkStruct(v any, t reflect.Type, path string) *FieldError {
	m, ok := v.(map[string]any)
	if !ok {
		return refuse(path, "want an object, got %s", describe(v))
	}
	fields := fieldsOf(t)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f, ok := fields[k]
		if !ok {
			return refuse(join(path, k), "unknown field%s", suggest(k, fields))
		}
		if err := checkTree(m[k], f, join(path, k)); err != nil {
			return err
		}
	}
	return nil
}

// checkMap checks each value of an object against map type t's element.
func checkMap(v any, t reflect.Type, path string) *FieldError {
	m, ok := v.(map[string]any)
	if !ok {
		return refuse(path, "want an object, got %s", describe(v))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := checkTree(m[k], t.Elem(), fmt.Sprintf("%s[%q]", path, k)); err != nil {
			return err
		}
	}
	return nil
}

// checkSlice checks a list against slice type t; []byte is base64 text.
func checkSlice(v any, t reflect.Type, path string) *FieldError {
	if t.Elem().Kind() == reflect.Uint8 {
		if _, ok := v.(string); !ok {
			return refuse(path, "want base64 text, got %s", describe(v))
		}
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		return refuse(path, "want a list, got %s", describe(v))
	}
	for i, x := range l {
		if err := checkTree(x, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

// checkScalar checks a string, boolean or number against t, numbers
// within the range of t's size.
func checkScalar(v any, t reflect.Type, path string) *FieldError {
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return refuse(path, "want a string, got %s", describe(v))
		}
		return nil
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return refuse(path, "want true or false, got %s", describe(v))
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		bits := t.Bits()
		lo, hi := int64(-1)<<(bits-1), int64(1)<<(bits-1)-1
		if ok {
			if i, err := strconv.ParseInt(n.String(), 10, bits); err == nil && i >= lo && i <= hi {
				return nil
			}
		}
		return refuse(path, "want a whole number from %d to %d, got %s", lo, hi, describe(v))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		bits := t.Bits()
		hi := uint64(math.MaxUint64) >> (64 - bits)
		if ok {
			if _, err := strconv.ParseUint(n.String(), 10, bits); err == nil {
				return nil
			}
		}
		return refuse(path, "want a whole number from 0 to %d, got %s", hi, describe(v))
	case reflect.Float32, reflect.Float64:
		if n, ok := v.(json.Number); ok {
			if _, err := n.Float64(); err == nil {
				return nil
			}
		}
		return refuse(path, "want a number, got %s", describe(v))
	}
	return refuse(path, "mvctl cannot check a field of Go type %s", t)
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// fieldsOf returns the JSON field names of a struct type and their types,
// with inline (embedded) structs flattened as encoding/json does.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			for et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range fieldsOf(et) {
					out[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	fieldCache.Store(t, out)
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest names the known field closest to an unknown one, when one is
// close enough to be a typo.
func suggest(name string, fields map[string]reflect.Type) string {
	best, bestD := "", 1<<30
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if d := textdist.Levenshtein(strings.ToLower(name), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" && bestD <= 1+len(name)/4 {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// describe names a decoded JSON value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return strconv.Quote(x)
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", v)
}

// IsFieldError reports whether err is a refusal of the input (exit status
// 2), as opposed to an I/O failure.
func IsFieldError(err error) bool {
	var de *DocumentError
	var fe *FieldError
	return errors.As(err, &de) || errors.As(err, &fe)
}
