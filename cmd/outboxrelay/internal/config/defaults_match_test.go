package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestReferenceDefaultsAreTheDumped: where a key's default tag describes
// its default in words, it still says the value config-dump prints (the
// value its component's SetDefaults gives), so the reference and the dump
// never disagree: a tag that starts with a value starts with that one,
// and one that only describes starts with "(".
//
// The Debezium routing keys and schema_registry are the exception the
// page states: config-dump shows them as set, since setting any of them
// turns Debezium's router on, and their tags give the default the router
// then applies.
func TestReferenceDefaultsAreTheDumped(t *testing.T) {
	asSet := map[string]bool{}
	walk(reflect.ValueOf(&DebeziumRouting{}).Elem(), "routing", func(key string, _ reflect.StructField, _ reflect.Value) {
		asSet[key] = true
	})
	var c Config
	c.setDefaults()
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.StructField, v reflect.Value) {
		tag, ok := f.Tag.Lookup("default")
		if !ok || strings.HasPrefix(tag, "(") || asSet[key] || strings.HasPrefix(key, "schema_registry.") {
			return
		}
		want := dumpedScalar(v)
		if want == "" {
			t.Errorf("%s: default tag %q on a value config-dump prints as a list or map", key, tag)
			return
		}
		if first, _, _ := strings.Cut(tag, " "); first != want {
			t.Errorf("%s: docs/configuration.md gives the default %q, config-dump prints %s: make the tag start with %s, or with \"(\" if it only describes",
				key, tag, want, want)
		}
	})
}

// dumpedScalar is v as config-dump prints a scalar; "" for a list or map.
func dumpedScalar(v reflect.Value) string {
	if d, ok := v.Interface().(time.Duration); ok {
		return shortDuration(d)
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "null"
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.Struct:
		return ""
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
	}
	return fmt.Sprint(v.Interface())
}
