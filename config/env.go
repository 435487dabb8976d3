package config

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// env is where the settings are read from: the process environment for
// the runner, or a map for a tool that checks what it would set (LoadEnv).
type env struct {
	lookup func(name string) (string, bool)
	// names lists every variable set, for the check of unknown MV_ names.
	names []string
}

// osEnv is the process environment.
func osEnv() env {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return env{lookup: os.LookupEnv, names: names}
}

// mapEnv is vars as a whole environment.
func mapEnv(vars map[string]string) env {
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	return env{lookup: func(name string) (string, bool) { v, ok := vars[name]; return v, ok }, names: names}
}

var durationType = reflect.TypeOf(time.Duration(0))

// setting is one variable a settings struct reads.
type setting struct {
	name  string
	field reflect.Value // the field the variable fills
	def   string        // the default tag, "" for none
	desc  string
	// required: unset and without a default, the variable is an error.
	required bool
	// derived: a fallback or onSuccess sink's variable of a runner.Roles,
	// which when empty is unset (the sink takes the sink's value).
	derived bool
}

// settingsOf lists the variables spec, a pointer to a settings struct,
// reads, in field order, the way envconfig names them: the envconfig tag
// (else the field's name), upper-cased, after the prefix of an enclosing
// struct that is named or tagged (an untagged embedded struct adds none);
// ignored:"true" fields are skipped. "{PREFIX}" in a desc tag is that
// prefix, so a shared block (peerauth.TLSFiles) names its siblings in
// full. A runner.Roles lists each role's part under the names
// runner.RoleVar derives. decode, --help, the page and the check of
// unknown names all read this one list.
func settingsOf(spec any) []setting {
	var out []setting
	walk(reflect.ValueOf(spec).Elem(), "", &out)
	return out
}

func walk(v reflect.Value, prefix string, out *[]setting) {
	t := v.Type()
	for i := range t.NumField() {
		sf, f := t.Field(i), v.Field(i)
		if !f.CanSet() || sf.Tag.Get("ignored") == "true" {
			continue
		}
		if rb, ok := f.Addr().Interface().(runner.RoleBlock); ok {
			walkRoles(rb, out)
			continue
		}
		tag := sf.Tag.Get("envconfig")
		key := sf.Name
		if tag != "" {
			key = tag
		}
		if prefix != "" {
			key = prefix + "_" + key
		}
		key = strings.ToUpper(key)
		if f.Kind() == reflect.Struct {
			inner := prefix
			if !sf.Anonymous || tag != "" {
				inner = key
			}
			walk(f, inner, out)
			continue
		}
		*out = append(*out, setting{
			name: key, field: f, def: sf.Tag.Get("default"),
			desc:     strings.ReplaceAll(sf.Tag.Get("desc"), "{PREFIX}", prefix),
			required: sf.Tag.Get("required") == "true",
		})
	}
}

// walkRoles lists the sink's part of a runner.Roles with its tags, then
// the fallback's and the onSuccess sink's, described by the sink's.
func walkRoles(rb runner.RoleBlock, out *[]setting) {
	kind, parts := rb.RoleParts()
	var sinkNames []string
	for _, part := range parts {
		v := reflect.ValueOf(part.Settings).Elem()
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			s := setting{name: runner.RoleVar(part.Role, kind, sf), field: v.Field(i)}
			if part.Role == runner.RoleSink {
				s.def, s.desc = sf.Tag.Get("default"), sf.Tag.Get("desc")
				sinkNames = append(sinkNames, s.name)
			} else {
				s.derived = true
				s.desc = "as " + sinkNames[i] + ", for the " + roleTitle(part.Role)
			}
			*out = append(*out, s)
		}
	}
}

// roleTitle is how help names the place role fills ("fallback sink").
func roleTitle(role runner.Role) string {
	for _, slot := range runner.Slots {
		if slot.Role == role {
			return slot.Title
		}
	}
	return string(role)
}

// decode fills spec, a pointer to a settings struct, from e the way
// envconfig.Process fills it from the process environment (mvctl must run
// the same reading on the environment it emits), variable by variable as
// settingsOf lists them: a variable that is not set takes the default
// tag; numbers are read as strconv reads them with base 0 (checkSyntax
// refuses the prefixes first). A value that does not parse is a
// *runner.ConfigError naming the variable.
func decode(e env, spec any) error {
	for _, s := range settingsOf(spec) {
		value, ok := e.lookup(s.name)
		if s.derived && value == "" {
			continue
		}
		if !ok {
			if value = s.def; value == "" {
				if s.required {
					return &runner.ConfigError{Var: s.name, Value: "", Reason: "is required"}
				}
				continue
			}
		}
		if err := setField(s.field, value); err != nil {
			return &runner.ConfigError{Var: s.name, Value: value, Reason: "must be " + typeWord(s.field.Type().String())}
		}
	}
	return nil
}

// setField parses value into f by f's kind, as envconfig's processField.
func setField(f reflect.Value, value string) error {
	if f.Kind() == reflect.Pointer {
		if f.IsNil() {
			f.Set(reflect.New(f.Type().Elem()))
		}
		f = f.Elem()
	}
	if f.Type() == durationType {
		d, err := parseDuration(value)
		f.SetInt(int64(d))
		return err
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(value)
	case reflect.Bool:
		b, err := strconv.ParseBool(value)
		f.SetBool(b)
		return err
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(value, 0, f.Type().Bits())
		f.SetInt(n)
		return err
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(value, 0, f.Type().Bits())
		f.SetUint(n)
		return err
	case reflect.Float32, reflect.Float64:
		n, err := strconv.ParseFloat(value, f.Type().Bits())
		f.SetFloat(n)
		return err
	default:
		// Settings structs are written with the kinds above; another is a
		// programming error, caught by the config tests.
		panic(fmt.Sprintf("config: a setting of kind %s cannot be read from the environment", f.Kind()))
	}
	return nil
}
