package v1alpha1

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// openAPISchema is the part of an OpenAPI v3 openAPISchema the comparison reads.
type openAPISchema struct {
	Type                 string                   `json:"type"`
	Properties           map[string]openAPISchema `json:"properties"`
	Items                *openAPISchema           `json:"items"`
	AdditionalProperties *openAPISchema           `json:"additionalProperties"`
}

// jsonFields returns the JSON names of a struct's fields, with embedded
// structs flattened as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		out[name] = f.Type
	}
	return out
}

// compare walks a Go type of this package and its CRD openAPISchema together and
// reports every field one has and the other lacks. It stops at types of
// other packages (Kubernetes' own, which their CRD openAPISchema copies).
func compare(t *testing.T, path string, typ reflect.Type, s openAPISchema) int {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch typ.Kind() {
	case reflect.Slice:
		if s.Items != nil && typ.Elem().Kind() != reflect.Uint8 {
			return compare(t, path+"[]", typ.Elem(), *s.Items)
		}
		return 0
	case reflect.Map:
		if s.AdditionalProperties != nil {
			return compare(t, path+"{}", typ.Elem(), *s.AdditionalProperties)
		}
		return 0
	case reflect.Struct:
	default:
		return 0
	}
	if typ.PkgPath() != reflect.TypeOf(MonoVertex{}).PkgPath() {
		return 0
	}
	fields := jsonFields(typ)
	n := 0
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range fields {
			if !yield(k) {
				return
			}
		}
	}) {
		sub, ok := s.Properties[k]
		if !ok {
			t.Errorf("%s.%s: a field of %s, not in the CRD's schema", path, k, typ.Name())
			continue
		}
		n++
		n += compare(t, path+"."+k, fields[k], sub)
	}
	for k := range s.Properties {
		if _, ok := fields[k]; !ok {
			t.Errorf("%s.%s: in the CRD's schema, not a field of %s", path, k, typ.Name())
		}
	}
	return n
}

// TestCRDMatchesTheTypes: deploy/controller's CRD (Numaflow's own) and the
// mirrored Go types have the same fields, spec and status, so what the API
// server accepts is what the converter and the webhook decode.
func TestCRDMatchesTheTypes(t *testing.T) {
	b, err := os.ReadFile("../../../../deploy/controller/300-monovertex-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Names struct {
				Kind, Plural string
				ShortNames   []string `json:"shortNames"`
			}
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema openAPISchema `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Names.Kind != Kind || crd.Spec.Names.Plural != "monovertices" || !slices.Equal(crd.Spec.Names.ShortNames, []string{"mvtx"}) || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version {
		t.Fatalf("CRD names %+v, versions %d", crd.Spec.Names, len(crd.Spec.Versions))
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	n := compare(t, "spec", reflect.TypeOf(MonoVertexSpec{}), root.Properties["spec"])
	n += compare(t, "status", reflect.TypeOf(MonoVertexStatus{}), root.Properties["status"])
	t.Logf("%d fields of the mirrored types found in the CRD's schema", n)
	if n < 200 {
		t.Errorf("only %d fields compared", n)
	}
}
