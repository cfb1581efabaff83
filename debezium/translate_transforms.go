package debezium

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// otherTransform maps a transform of the chain that is not the outbox
// router: after the router, one of Kafka Connect's that outboxrelay
// applies joins routing.transforms; anything else, and any transform
// before the router (which sees Debezium's change event, a record
// outboxrelay never makes), is refused naming it.
func (tr *translator) otherTransform(name, typ string) {
	prefix := "transforms." + name + "."
	short, ok := shortClass(transformsPkg, typ)
	_, known := transformKinds[short]
	switch {
	case tr.router == "":
		tr.note("transforms."+name, Unsupported, "transform %q (%s) comes before the outbox router, where it sees Debezium's change event, which outboxrelay does not make: only transforms after the router (%s) are applied", name, typ, eventRouterClass)
	case !ok || !known:
		tr.note("transforms."+name, Unsupported, "transform %q (%s) is not supported: after the outbox router outboxrelay applies Kafka Connect's %s", name, typ, strings.Join(transformShortNames(), ", "))
	default:
		tr.chainTransform(name, typ, prefix)
		return
	}
	tr.markPrefix(prefix)
}

// transformShortNames are the short class names of TransformTypes.
func transformShortNames() []string {
	var out []string
	for _, t := range TransformTypes() {
		out = append(out, strings.TrimPrefix(t, transformsPkg))
	}
	return out
}

// chainTransform reads one transform after the router and the predicate
// it names.
func (tr *translator) chainTransform(name, typ, prefix string) {
	t := Transform{Name: name, Type: strings.TrimSpace(typ)}
	for _, k := range tr.conn.Keys() {
		opt, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		v, _ := tr.get(k)
		switch opt {
		case "type":
		case "predicate":
			t.Predicate = strings.TrimSpace(v)
		case "negate":
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "true":
				t.Negate = true
			case "false":
			default:
				tr.note(k, Unsupported, "%q is not true or false", v)
			}
		default:
			if t.Options == nil {
				t.Options = map[string]string{}
			}
			t.Options[opt] = v
		}
	}
	if t.Predicate != "" && !slices.ContainsFunc(tr.preds, func(p Predicate) bool { return p.Name == t.Predicate }) {
		p := Predicate{Name: t.Predicate}
		pp := "predicates." + t.Predicate + "."
		for _, k := range tr.conn.Keys() {
			if opt, ok := strings.CutPrefix(k, pp); ok {
				v, _ := tr.get(k)
				if opt == "type" {
					p.Type = strings.TrimSpace(v)
				} else {
					if p.Options == nil {
						p.Options = map[string]string{}
					}
					p.Options[opt] = v
				}
			}
		}
		tr.used["predicates"] = true
		tr.preds = append(tr.preds, p)
	}
	tr.chain = append(tr.chain, t)
}

// chainSettings checks the transforms after the router as the relay will
// compile them, noting each it refuses, and writes routing.transforms and
// routing.predicates.
func (tr *translator) chainSettings() {
	if len(tr.chain) == 0 {
		return
	}
	preds := map[string]predicateFunc{}
	for _, p := range tr.preds {
		f, err := compilePredicate(p)
		if err != nil {
			tr.note("predicates."+p.Name, Unsupported, "%v", err)
			continue
		}
		preds[p.Name] = f
	}
	valueStruct := tr.t.hasSetting("routing.expand_json_payload")
	if v, ok := tr.t.Setting("routing.additional_fields"); ok {
		fs, _ := v.([]string)
		valueStruct = valueStruct || slices.ContainsFunc(fs, func(f string) bool {
			af, err := ParseAdditionalField(f)
			return err == nil && af.Placement == PlaceEnvelope
		})
	}
	keyStruct := false
	var steps []string
	for _, t := range tr.chain {
		_, err := compileStage(t, preds, rawParts{})
		if err == nil {
			err = structFor(t.Type, valueStruct, keyStruct)
		}
		if short, _ := shortClass(transformsPkg, t.Type); short == "ValueToKey" {
			keyStruct = true
		}
		if err != nil {
			tr.note("transforms."+t.Name, Unsupported, "%v", err)
			continue
		}
		steps = append(steps, describeTransform(t))
	}
	tr.setNode("routing.transforms", tr.chain)
	if len(tr.preds) > 0 {
		tr.setNode("routing.predicates", tr.preds)
	}
	if len(steps) > 0 {
		tr.note("transforms", Info, "applied after the outbox router, in order, to the record it makes, before the converters write it: %s", strings.Join(steps, "; then "))
	}
}

// describeTransform is a transform in a note: its name, short class and
// predicate.
func describeTransform(t Transform) string {
	short, _ := shortClass(transformsPkg, t.Type)
	s := fmt.Sprintf("%s (%s)", t.Name, short)
	if t.Predicate != "" {
		not := ""
		if t.Negate {
			not = "not "
		}
		s += fmt.Sprintf(" where %smatched by %s", not, t.Predicate)
	}
	return s
}

// setNode sets a native key to v's YAML.
func (tr *translator) setNode(key string, v any) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		tr.note(key, Unsupported, "%v", err)
		return
	}
	tr.set(key, &n)
}
