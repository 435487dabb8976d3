package mvconvert

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
)

var (
	numaflowPkg   = reflect.TypeOf(nf.MonoVertex{}).PkgPath()
	objectMetaTyp = reflect.TypeOf(metav1.ObjectMeta{})
)

// FieldPaths lists every field path of a MonoVertex down to the Kubernetes
// types it embeds (a list's items are written path[]), the paths the field
// table must account for.
func FieldPaths() []string {
	var out []string
	var walk func(t reflect.Type, path string, depth int)
	walk = func(t reflect.Type, path string, depth int) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if path != "" {
			out = append(out, path)
		}
		if depth > 12 {
			return
		}
		switch t.Kind() {
		case reflect.Struct:
			if t.PkgPath() != numaflowPkg && t != objectMetaTyp && path != "" {
				return
			}
			fields := fieldsOf(t)
			for _, k := range slices.Sorted(maps.Keys(fields)) {
				walk(fields[k], join(path, k), depth+1)
			}
		case reflect.Slice:
			if e := t.Elem(); e.Kind() == reflect.Struct && e.PkgPath() == numaflowPkg {
				walk(e, path+"[]", depth+1)
			}
		}
	}
	walk(reflect.TypeOf(nf.MonoVertex{}), "", 0)
	// ObjectMeta's own fields stop at their first level.
	var keep []string
	for _, p := range out {
		if strings.HasPrefix(p, "metadata.") && strings.Count(p, ".") > 1 {
			continue
		}
		if strings.HasPrefix(p, "status.") {
			continue
		}
		keep = append(keep, p)
	}
	sort.Strings(keep)
	return keep
}
