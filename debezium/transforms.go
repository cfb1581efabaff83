package debezium

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Transform is one of Kafka Connect's single message transforms, applied
// after the outbox router to the record it made, as a Connect worker
// applies the transforms listed after the router's in transforms
// (org.apache.kafka.connect.runtime.TransformationStage): when it has a
// predicate, only to the records the predicate matches (or, with Negate,
// does not match).
type Transform struct {
	// Name is the transform's name in the connector's transforms list.
	Name string `yaml:"name"`
	// Type is the transform's class: its full name
	// (org.apache.kafka.connect.transforms.InsertField$Value) or the
	// short one Kafka Connect also accepts (InsertField$Value). One of
	// [TransformTypes].
	Type string `yaml:"type"`
	// Options are the transform's options, by their names in Kafka
	// Connect (regex, replacement, fields, ...).
	Options map[string]string `yaml:"options,omitempty"`
	// Predicate names one of the router's Predicates; empty for none.
	Predicate string `yaml:"predicate,omitempty"`
	// Negate applies the transform to the records the predicate does not
	// match.
	Negate bool `yaml:"negate,omitempty"`
}

// Predicate is one of Kafka Connect's predicates, which decide whether a
// transform applies to a record.
type Predicate struct {
	Name string `yaml:"name"`
	// Type is the predicate's class, full or short: one of
	// [PredicateTypes].
	Type    string            `yaml:"type"`
	Options map[string]string `yaml:"options,omitempty"`
}

const (
	transformsPkg = "org.apache.kafka.connect.transforms."
	predicatesPkg = "org.apache.kafka.connect.transforms.predicates."
)

// transformKinds are the transforms outboxrelay applies, by short class
// name, with the options each reads (beyond those every one has).
var transformKinds = map[string]struct {
	options []string
	compile func(o transformOptions) (transformFunc, error)
}{
	"RegexRouter":        {[]string{"regex", "replacement"}, compileRegexRouter},
	"TimestampRouter":    {[]string{"topic.format", "timestamp.format"}, compileTimestampRouter},
	"InsertHeader":       {[]string{"header", "value.literal"}, compileInsertHeader},
	"DropHeaders":        {[]string{"headers"}, compileDropHeaders},
	"HeaderFrom$Key":     {headerFromOptions, compileHeaderFrom(partKey)},
	"HeaderFrom$Value":   {headerFromOptions, compileHeaderFrom(partValue)},
	"InsertField$Key":    {insertFieldOptions, compileInsertField(partKey)},
	"InsertField$Value":  {insertFieldOptions, compileInsertField(partValue)},
	"ReplaceField$Key":   {replaceFieldOptions, compileReplaceField(partKey)},
	"ReplaceField$Value": {replaceFieldOptions, compileReplaceField(partValue)},
	"ValueToKey":         {[]string{"fields", "replace.null.with.default"}, compileValueToKey},
	"Filter":             {nil, compileFilter},
}

// predicateKinds are the predicates outboxrelay tests, by short class
// name, with their options.
var predicateKinds = map[string]struct {
	options []string
	compile func(o transformOptions) (predicateFunc, error)
}{
	"TopicNameMatches":  {[]string{"pattern"}, compileTopicNameMatches},
	"HasHeaderKey":      {[]string{"name"}, compileHasHeaderKey},
	"RecordIsTombstone": {nil, compileRecordIsTombstone},
}

// TransformTypes are the full class names of the transforms outboxrelay
// applies.
func TransformTypes() []string { return classNames(transformsPkg, transformKinds) }

// PredicateTypes are the full class names of the predicates outboxrelay
// tests.
func PredicateTypes() []string { return classNames(predicatesPkg, predicateKinds) }

func classNames[V any](pkg string, kinds map[string]V) []string {
	var out []string
	for k := range kinds {
		out = append(out, pkg+k)
	}
	slices.Sort(out)
	return out
}

// shortClass is the class name without the package Kafka Connect's short
// names leave out; ok is false for a class of another package.
func shortClass(pkg, class string) (string, bool) {
	class = strings.TrimSpace(class)
	if short, ok := strings.CutPrefix(class, pkg); ok {
		return short, true
	}
	return class, !strings.Contains(class, ".")
}

// connectRecord is a routed record as Kafka Connect holds it between the
// router and the converters: each part typed by its Connect schema, or
// raw bytes where the format is raw (outboxrelay's own, with no Connect
// record behind it; no transform applies then).
type connectRecord struct {
	topic     string
	partition *int32
	key       recordPart
	value     recordPart
	headers   []connectHeader
	timestamp time.Time
}

// recordPart is the key or the value: a Connect schema and value, or the
// raw bytes of a raw format. label names it in errors.
type recordPart struct {
	schema *Schema
	value  any
	raw    []byte
	isRaw  bool
	label  string
}

// connectHeader is one header, typed or raw as a part is.
type connectHeader struct {
	key    string
	schema *Schema
	value  any
	raw    []byte
	isRaw  bool
	label  string
}

// millis is the record's timestamp as Kafka Connect holds it.
func (rec *connectRecord) millis() int64 { return rec.timestamp.UnixMilli() }

// part is the key or the value.
type part bool

const (
	partKey   part = true
	partValue part = false
)

func (p part) of(rec *connectRecord) *recordPart {
	if p == partKey {
		return &rec.key
	}
	return &rec.value
}

func (p part) String() string {
	if p == partKey {
		return "key"
	}
	return "value"
}

// transformFunc applies a transform to a record; nil drops the record.
type transformFunc func(rec *connectRecord) (*connectRecord, error)

// predicateFunc tests a record.
type predicateFunc func(rec *connectRecord) bool

// transformOptions are a transform's or predicate's options, with what
// each read, so that an option it does not read is refused.
type transformOptions struct {
	name string
	m    map[string]string
}

func (o transformOptions) get(key string) (string, bool) {
	v, ok := o.m[key]
	return v, ok
}

// required is an option without a default, as ConfigDef.NO_DEFAULT_VALUE.
func (o transformOptions) required(key string) (string, error) {
	v, ok := o.m[key]
	if !ok {
		return "", fmt.Errorf("option %s is required", key)
	}
	return v, nil
}

// list is a ConfigDef.Type.LIST option: comma-separated, each item
// trimmed, an empty string the empty list.
func (o transformOptions) list(key string) []string {
	v := strings.TrimSpace(o.m[key])
	if v == "" {
		return nil
	}
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		out = append(out, strings.TrimSpace(item))
	}
	return out
}

// boolean is a ConfigDef.Type.BOOLEAN option: true or false in any case.
func (o transformOptions) boolean(key string, def bool) (bool, error) {
	v, ok := o.m[key]
	if !ok {
		return def, nil
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("option %s: %q is not true or false", key, v)
}

// stage is one compiled transform with its predicate.
type stage struct {
	name      string
	apply     transformFunc
	predicate predicateFunc
	negate    bool
}

// chain is the compiled transforms, in order.
type chain []stage

// apply runs the chain; a nil record is a record a transform dropped.
func (c chain) apply(rec *connectRecord) (*connectRecord, error) {
	for _, s := range c {
		if s.predicate != nil && s.predicate(rec) == s.negate {
			continue
		}
		out, err := s.apply(rec)
		if err != nil {
			return nil, fmt.Errorf("transform %s: %w", s.name, err)
		}
		if out == nil {
			return nil, nil
		}
		rec = out
	}
	return rec, nil
}

// compileChain checks the transforms and predicates and makes the chain;
// raw says which formats are raw, whose parts no transform may touch, and
// valueStruct whether the router's value can be a struct (an envelope or
// an expanded payload).
func compileChain(ts []Transform, ps []Predicate, raw rawParts, valueStruct bool) (chain, error) {
	var errs []error
	preds := map[string]predicateFunc{}
	for _, p := range ps {
		f, err := compilePredicate(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("predicate %q: %w", p.Name, err))
			continue
		}
		preds[p.Name] = f
	}
	var c chain
	names := map[string]bool{}
	keyStruct := false
	for _, t := range ts {
		s, err := compileStage(t, preds, raw)
		if err == nil {
			err = structFor(t.Type, valueStruct, keyStruct)
		}
		if short, _ := shortClass(transformsPkg, t.Type); short == "ValueToKey" {
			keyStruct = true
		}
		if names[t.Name] {
			err = errors.Join(err, errors.New("a second transform of this name"))
		}
		names[t.Name] = true
		if err != nil {
			errs = append(errs, fmt.Errorf("transform %q (%s): %w", t.Name, t.Type, err))
			continue
		}
		c = append(c, s)
	}
	return c, errors.Join(errs...)
}

// structTransforms are the transforms that need a struct key or value,
// with the purpose Requirements.requireStruct names when it fails.
var structTransforms = map[string]struct {
	p       part
	purpose string
}{
	"InsertField$Key":    {partKey, "field insertion"},
	"InsertField$Value":  {partValue, "field insertion"},
	"ReplaceField$Key":   {partKey, "field replacement"},
	"ReplaceField$Value": {partValue, "field replacement"},
	"HeaderFrom$Key":     {partKey, "header move/copy"},
	"HeaderFrom$Value":   {partValue, "header move/copy"},
	"ValueToKey":         {partValue, "copying fields from value to key"},
}

// structFor refuses a transform that needs a struct where the record can
// never have one: Kafka Connect's would fail on every record.
func structFor(typ string, valueStruct, keyStruct bool) error {
	short, _ := shortClass(transformsPkg, typ)
	st, ok := structTransforms[short]
	switch {
	case !ok:
		return nil
	case st.p == partValue && !valueStruct:
		return fmt.Errorf("it needs a struct value, and without envelope fields or an expanded JSON payload the routed value is the payload column: Kafka Connect's %s fails on every record with a payload (only Struct objects supported for [%s])", short, st.purpose)
	case st.p == partKey && !keyStruct:
		return fmt.Errorf("it needs a struct key, and the routed key is the aggregate id column unless a ValueToKey before it makes one: Kafka Connect's %s fails on every record (only Struct objects supported for [%s])", short, st.purpose)
	}
	return nil
}

// rawParts says which of a record's parts a raw format writes.
type rawParts struct{ key, value, headers bool }

// touches are the parts each transform reads or writes beyond the topic.
var touches = map[string]rawParts{
	"InsertHeader":       {headers: true},
	"HeaderFrom$Key":     {key: true, headers: true},
	"HeaderFrom$Value":   {value: true, headers: true},
	"InsertField$Key":    {key: true},
	"InsertField$Value":  {value: true},
	"ReplaceField$Key":   {key: true},
	"ReplaceField$Value": {value: true},
	"ValueToKey":         {key: true, value: true},
}

func compileStage(t Transform, preds map[string]predicateFunc, raw rawParts) (stage, error) {
	short, ok := shortClass(transformsPkg, t.Type)
	kind, known := transformKinds[short]
	if !ok || !known {
		return stage{}, fmt.Errorf("%s is not a transform outboxrelay applies; it applies %s", t.Type, strings.Join(TransformTypes(), ", "))
	}
	if err := checkOptions(t.Options, kind.options); err != nil {
		return stage{}, err
	}
	if tc := touches[short]; (tc.key && raw.key) || (tc.value && raw.value) || (tc.headers && raw.headers) {
		return stage{}, fmt.Errorf("it works on the record's Connect %s, and routing.%s raw writes the column as stored, with no Connect record behind it: set the format Debezium's converter writes (string, json, json+schema, ...)",
			rawTouched(tc, raw), rawFormatKey(tc, raw))
	}
	apply, err := kind.compile(transformOptions{name: t.Name, m: t.Options})
	if err != nil {
		return stage{}, err
	}
	s := stage{name: t.Name, apply: apply, negate: t.Negate}
	if t.Predicate != "" {
		if s.predicate = preds[t.Predicate]; s.predicate == nil {
			return stage{}, fmt.Errorf("predicate %q is not among the predicates", t.Predicate)
		}
	} else if t.Negate {
		return stage{}, errors.New("negate without a predicate")
	}
	return s, nil
}

func rawTouched(tc, raw rawParts) string {
	switch {
	case tc.key && raw.key:
		return "key"
	case tc.value && raw.value:
		return "value"
	}
	return "headers"
}

func rawFormatKey(tc, raw rawParts) string {
	switch {
	case tc.key && raw.key:
		return "key_format"
	case tc.value && raw.value:
		return "value_format"
	}
	return "header_format"
}

func compilePredicate(p Predicate) (predicateFunc, error) {
	short, ok := shortClass(predicatesPkg, p.Type)
	kind, known := predicateKinds[short]
	if !ok || !known {
		return nil, fmt.Errorf("%s is not a predicate outboxrelay tests; it tests %s", p.Type, strings.Join(PredicateTypes(), ", "))
	}
	if err := checkOptions(p.Options, kind.options); err != nil {
		return nil, err
	}
	return kind.compile(transformOptions{name: p.Name, m: p.Options})
}

// checkOptions refuses an option the transform does not read, naming it:
// Kafka Connect ignores it, but it is most likely a typo or an option of
// a version outboxrelay does not follow.
func checkOptions(m map[string]string, known []string) error {
	reads := "it has none"
	if len(known) > 0 {
		reads = strings.Join(known, ", ")
	}
	var errs []error
	for _, k := range sortedKeys(m) {
		if !slices.Contains(known, k) {
			errs = append(errs, fmt.Errorf("option %s is not one outboxrelay reads (%s)", k, reads))
		}
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
