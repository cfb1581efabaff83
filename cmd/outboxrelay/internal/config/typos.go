package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// unknownField is yaml.v3's text for a key that no field of the struct
// being decoded takes, with KnownFields set.
var unknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (\S+)$`)

// explainTypos rewrites the unknown keys of a decode error as their full
// path with the known key nearest to each, as an unknown environment
// variable is reported: "kafka.broker is not a key; did you mean
// kafka.brokers?" rather than the Go type the key was looked for in.
func explainTypos(err *yaml.TypeError) *yaml.TypeError {
	sections := sectionsByType()
	out := &yaml.TypeError{Errors: make([]string, len(err.Errors))}
	for i, e := range err.Errors {
		out.Errors[i] = e
		m := unknownField.FindStringSubmatch(e)
		if m == nil {
			continue
		}
		line, key, typ := m[1], m[2], m[3]
		secs := sections[typ]
		if len(secs) == 0 {
			continue
		}
		paths := make([]string, len(secs))
		for j, s := range secs {
			paths[j] = join(s.prefix, key)
		}
		msg := fmt.Sprintf("line %s: %s is not a key", line, strings.Join(paths, " or "))
		if near := nearestKey(key, secs[0].keys); near != "" {
			msg += "; did you mean " + join(secs[0].prefix, near) + "?"
		} else if deeper := flatKey(key, secs[0].prefix, sections); deeper != "" {
			// kafka_brokers at the top: a key of a section written as
			// its environment variable spells it.
			msg += "; did you mean " + deeper + ", in its section?"
		}
		out.Errors[i] = msg + " (`outboxrelay config-reference` lists every key)"
	}
	return out
}

// section is a struct of the configuration: where it sits in the file
// and the keys it takes.
type section struct {
	prefix string
	keys   []string
}

// sectionsByType maps each struct type of Config, as yaml.v3 names it
// ("config.Kafka"), to the sections it is decoded into; one type may
// serve several (a TLS block, say). An inlined struct's keys are its
// parent's, and yaml.v3 names the parent in its errors.
func sectionsByType() map[string][]section {
	out := map[string][]section{}
	var visit func(t reflect.Type, prefix string)
	visit = func(t reflect.Type, prefix string) {
		s := section{prefix: prefix}
		for _, f := range yamlFields(t) {
			s.keys = append(s.keys, f.name)
			if f.typ.Kind() == reflect.Struct && f.typ != reflect.TypeFor[time.Duration]() {
				visit(f.typ, join(prefix, f.name))
			}
		}
		out[t.String()] = append(out[t.String()], s)
	}
	visit(reflect.TypeFor[Config](), "")
	return out
}

type yamlField struct {
	name string
	typ  reflect.Type // pointers taken off
}

// yamlFields are the keys a struct takes, those of inlined structs
// included.
func yamlFields(t reflect.Type) []yamlField {
	var fields []yamlField
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case name == "" && opts == "inline" && ft.Kind() == reflect.Struct:
			fields = append(fields, yamlFields(ft)...)
		case name != "" && name != "-":
			fields = append(fields, yamlField{name, ft})
		}
	}
	return fields
}

// nearestKey is the key among known nearest to key, if one is near enough
// to be a misspelling of it: at most a third of its letters apart.
func nearestKey(key string, known []string) string {
	best, bestDist := "", len(key)/3+1
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// flatKey is the key below the section at prefix that key spells with
// underscores for dots (kafka_brokers for kafka.brokers), if any.
func flatKey(key, prefix string, sections map[string][]section) string {
	for _, secs := range sections {
		for _, s := range secs {
			if prefix != "" && !strings.HasPrefix(s.prefix, prefix+".") || s.prefix == prefix {
				continue
			}
			for _, k := range s.keys {
				full := join(s.prefix, k)
				rel := strings.TrimPrefix(full, prefix+".")
				if strings.ReplaceAll(rel, ".", "_") == key {
					return full
				}
			}
		}
	}
	return ""
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}
