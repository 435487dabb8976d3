package filter

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
)

// result is a filter's verdict, as Knative's eventfilter.FilterResult: a
// filter with nothing to check (an empty one) says none, which lets the
// event through like pass but does not count as a match for any and not.
type result uint8

const (
	pass result = iota
	fail
	none
)

// node is one compiled filter.
type node interface {
	eval(ev *event.Event) result
}

// spec is one entry of a Trigger's spec.filters (Knative's
// SubscriptionsAPIFilter), decoded from MV_FILTERS.
type spec struct {
	All    []spec            `json:"all,omitempty"`
	Any    []spec            `json:"any,omitempty"`
	Not    *spec             `json:"not,omitempty"`
	Exact  map[string]string `json:"exact,omitempty"`
	Prefix map[string]string `json:"prefix,omitempty"`
	Suffix map[string]string `json:"suffix,omitempty"`
	CESQL  string            `json:"cesql,omitempty"`
}

// validAttributeName is what Knative's webhook lets a filter name.
var validAttributeName = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// compileFilters decodes and compiles a Trigger's filters. It refuses
// what Knative's webhook refuses (two dialects in one entry, attribute
// names that are not lower-case alphanumeric, CESQL that does not parse)
// and what its broker would skip with a warning at run time (an empty
// attribute or value in exact, prefix or suffix), so a filter is never
// weaker than it reads. The error names the entry by its JSON path.
func compileFilters(raw string) (node, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var specs []spec
	if err := dec.Decode(&specs); err != nil {
		return nil, fmt.Errorf("not a JSON list of Knative Trigger filters (exact, prefix, suffix, all, any, not, cesql): %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a JSON list of Knative Trigger filters: text after the list")
	}
	return compileList("filters", specs, joinAll)
}

func compileList(path string, specs []spec, join func([]node) node) (node, error) {
	nodes := make([]node, 0, len(specs))
	for i, s := range specs {
		n, err := compileSpec(fmt.Sprintf("%s[%d]", path, i), &s)
		if err != nil {
			return nil, err
		}
		if n != nil {
			nodes = append(nodes, n)
		}
	}
	return join(nodes), nil
}

func compileSpec(path string, s *spec) (node, error) {
	dialects := 0
	for _, set := range []bool{len(s.Exact) > 0, len(s.Prefix) > 0, len(s.Suffix) > 0, len(s.All) > 0, len(s.Any) > 0, s.Not != nil, s.CESQL != ""} {
		if set {
			dialects++
		}
	}
	if dialects > 1 {
		return nil, fmt.Errorf("%s: multiple dialects found, filters can have only one dialect set", path)
	}
	// Knative's order of precedence (MaterializeSubscriptionsAPIFilter).
	switch {
	case len(s.Exact) > 0:
		return compileAttrs(path+".exact", s.Exact, func(v, want string) bool { return v == want })
	case len(s.Prefix) > 0:
		return compileAttrs(path+".prefix", s.Prefix, strings.HasPrefix)
	case len(s.Suffix) > 0:
		return compileAttrs(path+".suffix", s.Suffix, strings.HasSuffix)
	case len(s.All) > 0:
		return compileList(path+".all", s.All, joinAll)
	case len(s.Any) > 0:
		return compileList(path+".any", s.Any, joinAny)
	case s.Not != nil:
		n, err := compileSpec(path+".not", s.Not)
		if err != nil {
			return nil, err
		}
		return notNode{n}, nil
	case s.CESQL != "":
		e, err := compileCESQL(s.CESQL)
		if err != nil {
			return nil, fmt.Errorf("%s.cesql: %w", path, err)
		}
		return cesqlNode{e}, nil
	}
	// An entry with no dialect: Knative skips it.
	return nil, nil
}

func compileAttrs(path string, attrs map[string]string, match func(value, want string) bool) (node, error) {
	for name, want := range attrs {
		if !validAttributeName.MatchString(name) {
			return nil, fmt.Errorf("%s: attribute name %q must start with a letter and can only contain lowercase alphanumeric", path, name)
		}
		if want == "" {
			return nil, fmt.Errorf("%s: the value of %s is empty; Knative's broker ignores such a filter", path, name)
		}
	}
	return attrNode{attrs: attrs, match: match}, nil
}

// attrNode is exact, prefix or suffix: every attribute must be present
// and its value, in its string form, match.
type attrNode struct {
	attrs map[string]string
	match func(value, want string) bool
}

func (n attrNode) eval(ev *event.Event) result {
	for name, want := range n.attrs {
		v, ok := lookupAttribute(ev, name)
		if !ok || !n.match(v, want) {
			return fail
		}
	}
	return pass
}

func joinAll(n []node) node { return joined{n, fail} }
func joinAny(n []node) node { return joined{n, pass} }

// joined is Knative's allFilter (decisive: fail) and anyFilter (decisive:
// pass): it stops at the first entry that says decisive, and otherwise
// says what the last entry said, none for no entries.
type joined struct {
	nodes    []node
	decisive result
}

func (j joined) eval(ev *event.Event) result {
	r := none
	for _, n := range j.nodes {
		if r = n.eval(ev); r == j.decisive {
			return r
		}
	}
	return r
}

// notNode swaps pass and fail and keeps none.
type notNode struct{ n node }

func (n notNode) eval(ev *event.Event) result {
	if n.n == nil {
		return none
	}
	switch n.n.eval(ev) {
	case pass:
		return fail
	case fail:
		return pass
	}
	return none
}

// lookupAttribute is an attribute's value as Knative's exact, prefix and
// suffix filters compare it (attributes.LookupAttribute): the context
// attributes always exist (empty when unset), time in RFC 3339, an
// extension only when the event has it, in its string form.
func lookupAttribute(ev *event.Event, name string) (string, bool) {
	switch name {
	case "specversion":
		return ev.SpecVersion(), true
	case "type":
		return ev.Type(), true
	case "source":
		return ev.Source(), true
	case "subject":
		return ev.Subject(), true
	case "id":
		return ev.ID(), true
	case "time":
		b, err := ev.Time().MarshalText()
		if err != nil {
			return "", false
		}
		return string(b), true
	case "dataschema", "schemaurl":
		return ev.DataSchema(), true
	case "datacontenttype":
		return ev.DataContentType(), true
	case "datamediatype":
		return ev.DataMediaType(), true
	case "datacontentencoding":
		return ev.DeprecatedDataContentEncoding(), true
	}
	var exts map[string]any
	if ec, ok := ev.Context.(*event.EventContextV1); ok {
		exts = ec.Extensions // Extensions() would copy the map per call
	} else {
		exts = ev.Extensions()
	}
	v, ok := exts[name]
	if !ok {
		return "", false
	}
	if s, ok := v.(string); ok {
		return s, true
	}
	return fmt.Sprintf("%v", v), true
}
