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

// decode fills spec, a pointer to a settings struct, from e the way
// envconfig.Process fills it from the process environment (envconfig
// reads nothing else, and mvctl must run the same reading on the
// environment it emits): the name is the envconfig tag (else the field's
// name, upper-cased), prefixed by an enclosing named struct's; a variable
// that is not set takes the default tag; ignored:"true" fields are
// skipped; numbers are read as strconv reads them with base 0 (checkSyntax
// refuses the prefixes first). A value that does not parse is a
// *runner.ConfigError naming the variable.
func decode(e env, prefix string, spec any) error {
	v := reflect.ValueOf(spec).Elem()
	t := v.Type()
	for i := range t.NumField() {
		sf, f := t.Field(i), v.Field(i)
		if !f.CanSet() || sf.Tag.Get("ignored") == "true" {
			continue
		}
		key := sf.Name
		if tag := sf.Tag.Get("envconfig"); tag != "" {
			key = tag
		}
		if prefix != "" {
			key = prefix + "_" + key
		}
		key = strings.ToUpper(key)
		if f.Kind() == reflect.Struct {
			inner := prefix
			if !sf.Anonymous {
				inner = key
			}
			if err := decode(e, inner, f.Addr().Interface()); err != nil {
				return err
			}
			continue
		}
		value, ok := e.lookup(key)
		if !ok {
			if value = sf.Tag.Get("default"); value == "" {
				if sf.Tag.Get("required") == "true" {
					return &runner.ConfigError{Var: key, Value: "", Reason: "is required"}
				}
				continue
			}
		}
		if err := setField(f, value); err != nil {
			return &runner.ConfigError{Var: key, Value: value, Reason: "must be " + typeWord(f.Type().String())}
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
