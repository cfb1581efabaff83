package config

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// applyEnv sets every key that has an environment variable: the key's path
// in upper case, joined by underscores, after EnvPrefix; kafka.brokers is
// OUTBOXRELAY_KAFKA_BROKERS. Lists are comma-separated.
func applyEnv(c *Config, environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix+"_") {
			env[k] = v
		}
	}
	var errs []error
	walk(reflect.ValueOf(c).Elem(), "", func(key string, f reflect.StructField, v reflect.Value) {
		name := EnvName(key)
		s, ok := env[name]
		if !ok {
			return
		}
		if err := setString(v, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	})
	return errors.Join(errs...)
}

// EnvName is the environment variable for a dotted key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// walk calls fn for every leaf key of a config struct, depth first, in
// field order.
func walk(v reflect.Value, prefix string, fn func(key string, f reflect.StructField, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" && opts == "inline" && f.Type.Kind() == reflect.Struct {
			walk(v.Field(i), prefix, fn)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			walk(fv, key, fn)
			continue
		}
		fn(key, f, fv)
	}
}

func setString(v reflect.Value, s string) error {
	if v.Type() == reflect.TypeFor[time.Duration]() {
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		v.SetInt(int64(n))
	case reflect.Pointer:
		if v.Type().Elem().Kind() != reflect.Bool {
			return fmt.Errorf("unsupported type %s", v.Type())
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		v.Set(reflect.ValueOf(&b))
	case reflect.Slice:
		var items []string
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
		if v.Type().Elem().Kind() == reflect.String {
			v.Set(reflect.ValueOf(items))
			return nil
		}
		// Entries that read themselves from text (outbox.tables).
		out := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, item := range items {
			tu, ok := out.Index(i).Addr().Interface().(encoding.TextUnmarshaler)
			if !ok {
				return fmt.Errorf("unsupported type %s", v.Type())
			}
			if err := tu.UnmarshalText([]byte(item)); err != nil {
				return err
			}
		}
		v.Set(out)
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// Reference is the configuration reference as a Markdown table: every key,
// its environment variable, default and meaning.
func Reference() string {
	var b strings.Builder
	b.WriteString("| key | environment | default | meaning |\n|---|---|---|---|\n")
	var c Config
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.StructField, _ reflect.Value) {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", key, EnvName(key), f.Tag.Get("default"), f.Tag.Get("doc"))
	})
	return b.String()
}
