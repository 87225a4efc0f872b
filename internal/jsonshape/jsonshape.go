package jsonshape

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Field is one key of a struct type as encoding/json writes it.
type Field struct {
	Key string
	// Options are the tag's options after the name ("omitempty", ...).
	Options []string
	Type    reflect.Type
}

// Fields lists t's keys (t a struct type or a pointer to one), in
// declaration order. Unexported fields and fields tagged "-" are skipped;
// an untagged field is keyed by its Go name, as encoding/json does.
func Fields(t reflect.Type) []Field {
	t = deref(t)
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		var options []string
		if opts != "" {
			options = strings.Split(opts, ",")
		}
		out = append(out, Field{Key: name, Options: options, Type: f.Type})
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// isObject reports whether t encodes as a JSON object with fixed keys.
func isObject(t reflect.Type) bool {
	t = deref(t)
	return t.Kind() == reflect.Struct && t != timeType
}

// Paths lists every key path t can produce: "nics", "nics[].name",
// "nics[].vf.paths.vf.rx_packets", with "[]" for a list's elements and
// "{}" for a map's values.
func Paths(t reflect.Type) []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		t = deref(t)
		switch {
		case isObject(t):
			for _, f := range Fields(t) {
				p := f.Key
				if prefix != "" {
					p = prefix + "." + f.Key
				}
				out = append(out, p)
				walk(p, f.Type)
			}
		case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
			if t.Elem().Kind() != reflect.Uint8 {
				walk(prefix+"[]", t.Elem())
			}
		case t.Kind() == reflect.Map:
			walk(prefix+"{}", t.Elem())
		}
	}
	walk("", t)
	return out
}

// Structs lists the struct types reachable from t (t included), each
// once, in the order Paths meets them.
func Structs(t reflect.Type) []reflect.Type {
	var out []reflect.Type
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		t = deref(t)
		switch {
		case isObject(t):
			if slices.Contains(out, t) {
				return
			}
			out = append(out, t)
			for _, f := range Fields(t) {
				walk(f.Type)
			}
		case t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map:
			walk(t.Elem())
		}
	}
	walk(t)
	return out
}

var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// SnakeCase reports whether key is lower-case words joined by
// underscores.
func SnakeCase(key string) bool { return snake.MatchString(key) }

// Check decodes data and compares it with t: every object has exactly
// the keys of its struct type, lists and maps hold values of their
// element's shape, map keys are snake_case, and a null appears only where
// t has a pointer (a list or map is never null: [] or {}). It returns every
// mismatch found.
func Check(data []byte, t reflect.Type) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("jsonshape: %w", err)
	}
	var errs []string
	check("$", v, t, &errs)
	if len(errs) > 0 {
		return fmt.Errorf("jsonshape: %s", strings.Join(errs, "; "))
	}
	return nil
}

func check(path string, v any, t reflect.Type, errs *[]string) {
	fail := func(format string, args ...any) { *errs = append(*errs, path+": "+fmt.Sprintf(format, args...)) }
	if v == nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Interface:
		default:
			fail("null where %s is never null (an empty list or map is [] or {})", t)
		}
		return
	}
	t = deref(t)
	switch {
	case t == timeType:
		s, ok := v.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); !ok || err != nil {
			fail("%v is not an RFC 3339 time", v)
		}
	case isObject(t):
		obj, ok := v.(map[string]any)
		if !ok {
			fail("%T, want an object", v)
			return
		}
		fields := Fields(t)
		for _, f := range fields {
			fv, ok := obj[f.Key]
			if !ok {
				fail("key %q is missing", f.Key)
				continue
			}
			check(path+"."+f.Key, fv, f.Type, errs)
		}
		for k := range obj {
			if !slices.ContainsFunc(fields, func(f Field) bool { return f.Key == k }) {
				fail("key %q is not in %s", k, t)
			}
		}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		list, ok := v.([]any)
		if !ok {
			fail("%T, want a list", v)
			return
		}
		for i, e := range list {
			check(fmt.Sprintf("%s[%d]", path, i), e, t.Elem(), errs)
		}
	case t.Kind() == reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			fail("%T, want an object", v)
			return
		}
		for k, e := range obj {
			if !SnakeCase(k) {
				fail("map key %q is not snake_case", k)
			}
			check(path+"."+k, e, t.Elem(), errs)
		}
	case t.Kind() == reflect.String:
		if _, ok := v.(string); !ok {
			fail("%T, want a string", v)
		}
	case t.Kind() == reflect.Bool:
		if _, ok := v.(bool); !ok {
			fail("%T, want a boolean", v)
		}
	default: // numbers
		if _, ok := v.(float64); !ok {
			fail("%T, want a number", v)
		}
	}
}
