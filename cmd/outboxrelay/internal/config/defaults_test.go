package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The reference takes each default from the components' SetDefaults; a
// default tag is only for what no value can say. A tag beside a value must
// name that value, so the two cannot drift apart, and a key with neither
// would show no default at all.
func TestReferenceDefaults(t *testing.T) {
	var c Config
	c.setDefaults()
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.StructField, v reflect.Value) {
		tag, hasTag := f.Tag.Lookup("default")
		val, set := defaultOf(v)
		switch {
		case set && hasTag && !strings.Contains(tag, val):
			t.Errorf("%s: default tag %q does not name the default SetDefaults gives, %s", key, tag, val)
		case set && hasTag && tag == val:
			t.Errorf("%s: default tag %q repeats what SetDefaults gives; remove it", key, tag)
		case !set && !hasTag:
			t.Errorf("%s: no default from SetDefaults and no default tag saying what it is", key)
		}
		if f.Tag.Get("doc") == "" {
			t.Errorf("%s: no doc tag", key)
		}
	})
}

// Every enumeration's default is one of its values, and Validate refuses
// a value that is none of them, naming the key.
func TestEnumerations(t *testing.T) {
	var c Config
	c.setDefaults()
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, _ reflect.StructField, v reflect.Value) {
		e, ok := v.Interface().(enum)
		if !ok {
			return
		}
		if s := v.String(); s != "" && !slices.Contains(e.Values(), s) {
			t.Errorf("%s: default %q is not one of %v", key, s, e.Values())
		}
		bad := c
		if strings.HasPrefix(key, "poll.") {
			bad.Source = SourcePoll // the poll section is checked for that source
		}
		// The field of bad at the same path as v.
		bv := fieldAt(reflect.ValueOf(&bad).Elem(), key)
		bv.SetString("bogus")
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), key+`: "bogus"`) {
			t.Errorf("%s bogus: Validate said %v, want an error naming the key and the value", key, err)
		}
	})
}

// fieldAt is the leaf of v at the dotted key.
func fieldAt(v reflect.Value, key string) reflect.Value {
	var out reflect.Value
	walk(v, "", func(k string, _ reflect.StructField, fv reflect.Value) {
		if k == key {
			out = fv
		}
	})
	return out
}
