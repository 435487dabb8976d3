package config

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	_ "github.com/monovertex/monovertex/adapters/all"
	"github.com/monovertex/monovertex/runner"
)

// beforeRow is one variable as the settings structs read it before the
// fallback's and onSuccess sink's variables were derived by runner.RoleVar
// (testdata/variables_before.tsv, listed by envconfig from the
// hand-written fields of every section).
type beforeRow struct{ name, field, def string }

func readBefore(t *testing.T) map[string][]beforeRow {
	t.Helper()
	f, err := os.Open("testdata/variables_before.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]beforeRow{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		c := strings.Split(sc.Text(), "\t")
		if len(c) != 4 {
			t.Fatalf("testdata row %q: want 4 columns", sc.Text())
		}
		out[c[0]] = append(out[c[0]], beforeRow{c[1], c[2], c[3]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sections are the settings the runner reads, by the section names of the
// testdata.
func sections() map[string]any {
	out := map[string]any{"runner": &Core{}, "tracing": &Tracing{}}
	for _, k := range runner.AllKinds() {
		if k.Config != nil {
			out[k.Category+"/"+k.Name] = k.Config()
		}
	}
	return out
}

// TestEveryVariableKeepsItsNameAndDefault: every section reads the same
// variables, with the same defaults, as before the per-role settings and
// the shared TLS and user blocks.
func TestEveryVariableKeepsItsNameAndDefault(t *testing.T) {
	before := readBefore(t)
	now := sections()
	if len(now) != len(before) {
		t.Errorf("%d sections now, %d before", len(now), len(before))
	}
	total := 0
	for section, spec := range now {
		want := map[string]string{}
		for _, r := range before[section] {
			want[r.name] = r.def
		}
		got := map[string]string{}
		for _, s := range settingsOf(spec) {
			if _, dup := got[s.name]; dup {
				t.Errorf("%s: %s is read twice", section, s.name)
			}
			got[s.name] = s.def
		}
		for name, def := range want {
			if g, ok := got[name]; !ok {
				t.Errorf("%s: %s is no longer read", section, name)
			} else if g != def {
				t.Errorf("%s: %s defaults to %q, before %q", section, name, g, def)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("%s: %s is read now and was not before", section, name)
			}
		}
		total += len(got)
	}
	t.Logf("%d variables in %d sections, as before", total, len(now))
}

// fieldBefore is, for a part's field X, the hand-written field that read
// its variable before: FallbackX and OnSuccessX for the derived roles; for
// the sink X or SinkX, or the Knative names' fields of the CloudEvents sink.
func fieldBefore(role runner.Role, x string) []string {
	switch role {
	case runner.RoleFallbackSink:
		return []string{"Fallback" + x}
	case runner.RoleOnSuccessSink:
		return []string{"OnSuccess" + x}
	}
	return []string{x, "Sink" + x, map[string]string{"URL": "Sink", "TokenPath": "OIDCTokenPath"}[x]}
}

// TestFallbackAndOnSuccessVariablesAreDerived lists, for each sink kind
// with per-role settings and each role, the names runner.RoleVar derives,
// and checks them against the hand-written fields they replace: the same
// names, each filling the same field of its role's part, and decode
// reading each into that part alone.
func TestFallbackAndOnSuccessVariablesAreDerived(t *testing.T) {
	before := readBefore(t)
	kinds := 0
	for _, name := range runner.KindNames(runner.RoleSink) {
		k, _ := runner.LookupKind(runner.RoleSink, name)
		if k.Config == nil {
			continue
		}
		rb, ok := k.Config().(runner.RoleBlock)
		if !ok {
			for _, r := range before["sink/"+name] {
				if strings.HasPrefix(r.name, "MV_FALLBACK_") || strings.HasPrefix(r.name, "MV_ON_SUCCESS_") {
					t.Errorf("sink %s read %s before and has no per-role settings now", name, r.name)
				}
			}
			continue
		}
		kinds++
		fields := map[string]string{} // variable -> hand-written field, before
		for _, r := range before["sink/"+name] {
			fields[r.name] = r.field
		}
		derived := map[string]bool{}
		kind, parts := rb.RoleParts()
		for _, part := range parts {
			pt := reflect.TypeOf(part.Settings).Elem()
			var names []string
			for i := range pt.NumField() {
				f := pt.Field(i)
				v := runner.RoleVar(part.Role, kind, f)
				names = append(names, v)
				derived[v] = true
				was, ok := fields[v]
				if !ok {
					t.Errorf("sink %s, %s: %s was not read before", name, part.Role, v)
				} else if !slices.Contains(fieldBefore(part.Role, f.Name), was) {
					t.Errorf("sink %s, %s: %s fills %s; before it filled %s", name, part.Role, v, f.Name, was)
				}
				checkDecodesInto(t, k.Config, part.Role, i, v)
			}
			t.Logf("sink %s, %s: %s", name, part.Role, strings.Join(names, " "))
		}
		for v := range fields {
			if (strings.HasPrefix(v, "MV_FALLBACK_") || strings.HasPrefix(v, "MV_ON_SUCCESS_")) && !derived[v] {
				t.Errorf("sink %s: %s, read before, is not derived", name, v)
			}
		}
	}
	if kinds != 4 {
		t.Errorf("%d sink kinds have per-role settings; want 4 (cloudevents, jetstream, kafka, sqs)", kinds)
	}
}

// checkDecodesInto decodes fresh settings with only variable set and
// checks that field i of role's part holds it and that the other parts
// are as with nothing set.
func checkDecodesInto(t *testing.T, newConfig func() any, role runner.Role, i int, variable string) {
	t.Helper()
	base := newConfig()
	if err := decode(mapEnv(nil), base); err != nil {
		t.Fatal(err)
	}
	_, unset := base.(runner.RoleBlock).RoleParts()
	spec := newConfig()
	_, parts := spec.(runner.RoleBlock).RoleParts()
	value := "x"
	if f := reflect.ValueOf(parts[0].Settings).Elem().Field(i); f.Type() == reflect.TypeFor[*bool]() {
		value = "false"
	}
	if err := decode(mapEnv(map[string]string{variable: value}), spec); err != nil {
		t.Errorf("%s=%s: %v", variable, value, err)
		return
	}
	for j, p := range parts {
		got := reflect.ValueOf(p.Settings).Elem()
		if p.Role != role {
			if !reflect.DeepEqual(got.Interface(), reflect.ValueOf(unset[j].Settings).Elem().Interface()) {
				t.Errorf("%s=%s changed the %s's settings: %+v", variable, value, p.Role, got)
			}
			continue
		}
		f := got.Field(i)
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				t.Errorf("%s=%s: %s's field %s is unset", variable, value, role, got.Type().Field(i).Name)
				continue
			}
			f = f.Elem()
		}
		if fmt.Sprint(f.Interface()) != value {
			t.Errorf("%s=%s: %s's field %s is %v", variable, value, role, got.Type().Field(i).Name, f)
		}
	}
}

// TestDerivedBooleanParsesOrIsUnset: a fallback's boolean that does not
// parse names its variable; an empty one is unset, so the fallback takes
// the sink's.
func TestDerivedBooleanParsesOrIsUnset(t *testing.T) {
	k, _ := runner.LookupKind(runner.RoleSink, "kafka")
	err := decode(mapEnv(map[string]string{"MV_FALLBACK_KAFKA_SET_KEY": "yes"}), k.Config())
	var ce *runner.ConfigError
	if !errors.As(err, &ce) || ce.Var != "MV_FALLBACK_KAFKA_SET_KEY" {
		t.Fatalf("MV_FALLBACK_KAFKA_SET_KEY=yes: %v; want an error naming it", err)
	}
	spec := k.Config()
	if err := decode(mapEnv(map[string]string{"MV_FALLBACK_KAFKA_SET_KEY": "", "MV_KAFKA_SINK_SET_KEY": "false"}), spec); err != nil {
		t.Fatal(err)
	}
	_, parts := spec.(runner.RoleBlock).RoleParts()
	fb := reflect.ValueOf(parts[1].Settings).Elem().FieldByName("SetKey")
	sink := reflect.ValueOf(parts[0].Settings).Elem().FieldByName("SetKey")
	if !fb.IsNil() || sink.IsNil() || sink.Elem().Bool() {
		t.Fatalf("fallback SetKey %v, sink %v; want unset and false", fb, sink)
	}
}
