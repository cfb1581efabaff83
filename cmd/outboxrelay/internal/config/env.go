package config

import (
	"encoding"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// applyEnv sets every key that has an environment variable: the key's path
// in upper case, joined by underscores, after EnvPrefix; kafka.brokers is
// OUTBOXRELAY_KAFKA_BROKERS. Lists are comma-separated. Any other
// OUTBOXRELAY_ variable, but those of [otherEnv], is an error, as an
// unknown key in the file is: a misspelt one would otherwise leave its key
// at the file's value or the default without a word.
func applyEnv(c *Config, environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix+"_") {
			env[k] = v
		}
	}
	var errs []error
	var known []string
	walk(reflect.ValueOf(c).Elem(), "", func(key string, f reflect.StructField, v reflect.Value) {
		name := EnvName(key)
		known = append(known, name)
		s, ok := env[name]
		if !ok {
			return
		}
		delete(env, name)
		if err := setString(v, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	})
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if otherEnv[name] || strings.HasPrefix(name, testEnvPrefix) {
			continue
		}
		msg := "no configuration key has this variable"
		if near := closest(name, known); near != "" {
			msg += "; did you mean " + near + "?"
		}
		errs = append(errs, fmt.Errorf("%s: %s (`outboxrelay config-reference` lists every key's)", name, msg))
	}
	return errors.Join(errs...)
}

// otherEnv are the OUTBOXRELAY_ variables that set no configuration key,
// which applyEnv leaves to the code that reads them.
var otherEnv = map[string]bool{
	// `outboxrelay init --apply`'s admin connection (cmd/outboxrelay).
	"OUTBOXRELAY_INIT_ADMIN_URL": true,
	// Where the tests and the benchmark find initdb (internal/localpg).
	"OUTBOXRELAY_PG_BIN": true,
}

// testEnvPrefix starts the variables the tests read (internal/testenv,
// integration), which may be set while they run the relay.
const testEnvPrefix = EnvPrefix + "_TEST_"

// closest is the name among known nearest to name, if one is near enough
// to be a misspelling of it: what follows the prefix at most a third of
// its letters apart.
func closest(name string, known []string) string {
	p := len(EnvPrefix + "_")
	best, bestDist := "", (len(name)-p)/3+1
	for _, k := range known {
		if d := editDistance(name[p:], k[p:]); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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
//
// A key's default is what setDefaults, that is the SetDefaults of the
// component that owns the key, gives a configuration that sets nothing, so
// the table cannot drift from the code. A key with no such value (required,
// off, or worked out at run time) says what its default is in a default
// tag, as does one whose default depends on other keys; such a tag names
// the value too (TestReferenceDefaults). A key whose type lists its values
// (enum) has them listed.
func Reference() string {
	var b strings.Builder
	b.WriteString("| key | environment | default | meaning |\n|---|---|---|---|\n")
	var c Config
	c.setDefaults()
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.StructField, v reflect.Value) {
		def := f.Tag.Get("default")
		if def == "" {
			def, _ = defaultOf(v)
		}
		doc := f.Tag.Get("doc")
		if e, ok := v.Interface().(enum); ok {
			doc += " One of " + strings.Join(quoted(e.Values()), ", ") + "."
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", key, EnvName(key), def, doc)
	})
	return b.String()
}

// defaultOf is a defaulted key's value as the reference shows it; false
// when the value is the zero value, which the key's default tag describes.
func defaultOf(v reflect.Value) (string, bool) {
	if v.IsZero() {
		return "", false
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return shortDuration(d), true
	}
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	return fmt.Sprint(v.Interface()), true
}

// shortDuration is d as written in a config file: 24h, 5m, 1m30s, 200ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func quoted(values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = "`" + v + "`"
	}
	return out
}
