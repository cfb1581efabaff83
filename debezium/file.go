package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Kind is the kind of a Debezium configuration file.
type Kind int

const (
	// ConnectJSON is a Kafka Connect REST payload: {"name": ..., "config": {...}}.
	ConnectJSON Kind = iota + 1
	// ConnectFlatJSON is the bare "config" object of a Connect connector.
	ConnectFlatJSON
	// ConnectProperties is a connector .properties file (connect-standalone).
	ConnectProperties
	// ServerProperties is Debezium Server's application.properties.
	ServerProperties
)

func (k Kind) String() string {
	switch k {
	case ConnectJSON:
		return "Kafka Connect connector JSON"
	case ConnectFlatJSON:
		return "Kafka Connect connector config JSON"
	case ConnectProperties:
		return "Kafka Connect connector properties"
	case ServerProperties:
		return "Debezium Server application.properties"
	}
	return "unknown"
}

// File is a Debezium configuration as read, before any mapping.
type File struct {
	Kind Kind
	// Name is the connector's name, when the file has one.
	Name string
	// Props are the options as written, with Kind-specific prefixes kept:
	// connector options for Connect files, debezium.* keys for Debezium
	// Server.
	Props *Properties
}

// ParseFile reads a Debezium configuration: JSON (with "name" and
// "config", or the flat config object) or a .properties file, which is
// Debezium Server's when any key starts with "debezium.".
func ParseFile(data []byte) (*File, error) {
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\uFEFF")), " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return parseJSONFile(trimmed)
	}
	props, err := ParseProperties(data)
	if err != nil {
		return nil, err
	}
	if props.Len() == 0 {
		return nil, errors.New("the file holds no options")
	}
	f := &File{Kind: ConnectProperties, Props: props}
	for _, k := range props.Keys() {
		if strings.HasPrefix(k, "debezium.") {
			f.Kind = ServerProperties
			break
		}
	}
	if f.Kind == ConnectProperties {
		f.Name, _ = props.Get("name")
	}
	return f, nil
}

func parseJSONFile(data []byte) (*File, error) {
	obj, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	f := &File{Kind: ConnectFlatJSON}
	if raw, ok := obj.get("config"); ok {
		inner, err := decodeObject(raw)
		if err != nil {
			return nil, fmt.Errorf(`"config": %w`, err)
		}
		f.Kind = ConnectJSON
		for _, k := range obj.keys {
			switch k {
			case "config":
			case "name":
				if err := json.Unmarshal(obj.values[k], &f.Name); err != nil {
					return nil, fmt.Errorf(`"name" is not a string`)
				}
			default:
				// The REST API's PUT payload has only name and config; a
				// listing (GET /connectors?expand=info) adds tasks and
				// type, which say nothing about records.
			}
		}
		obj = inner
	}
	f.Props = NewProperties()
	for _, k := range obj.keys {
		v, err := jsonScalar(obj.values[k])
		if err != nil {
			return nil, fmt.Errorf("option %q: %w", k, err)
		}
		f.Props.Set(k, v)
	}
	if f.Kind == ConnectFlatJSON {
		f.Name, _ = f.Props.Get("name")
	} else if n, ok := f.Props.Get("name"); ok && f.Name == "" {
		f.Name = n
	}
	if f.Props.Len() == 0 {
		return nil, errors.New("the connector config holds no options")
	}
	return f, nil
}

// object is a JSON object with its key order.
type object struct {
	keys   []string
	values map[string]json.RawMessage
}

func (o object) get(k string) (json.RawMessage, bool) {
	v, ok := o.values[k]
	return v, ok
}

func decodeObject(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	o := object{values: map[string]json.RawMessage{}}
	tok, err := dec.Token()
	if err != nil {
		return o, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return o, errors.New("not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return o, fmt.Errorf("not JSON: %w", err)
		}
		key := tok.(string) // object keys are strings once '{' was read
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return o, fmt.Errorf("not JSON: key %q: %w", key, err)
		}
		if _, dup := o.values[key]; !dup {
			o.keys = append(o.keys, key)
		}
		o.values[key] = raw
	}
	if _, err := dec.Token(); err != nil {
		return o, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return o, errors.New("not JSON: text after the object")
	}
	return o, nil
}

// jsonScalar turns a JSON string, number or boolean into the string Kafka
// Connect would see.
func jsonScalar(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("empty value")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case 't', 'f':
		return string(raw), nil
	case 'n':
		return "", errors.New("is null; leave the option out instead")
	case '{', '[':
		return "", errors.New("is an object or array; Kafka Connect options are strings")
	}
	return string(raw), nil
}
