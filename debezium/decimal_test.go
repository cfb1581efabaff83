package debezium

import (
	"bytes"
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/outboxrelay/outboxrelay/connector"
)

// numericMod is PostgreSQL's type modifier of numeric(p,s).
func numericMod(p, s int) int32 { return int32(p<<16|s) + 4 }

// Numeric columns with decimal.handling.mode precise, each written by the
// converters the relay supports. The schemas and values follow Debezium's
// AbstractRecordsProducerTest.schemasAndValuesForBigDecimalEncodedNumericTypes
// (debezium-connector-postgres): numeric(3,2) 1.10 is
// Decimal.builder(2).parameter("connect.decimal.precision", "3").optional()
// with BigDecimal("1.10"); an unconstrained numeric 10.1111 is
// VariableScaleDecimal.optionalSchema() with {scale 4, value
// BigDecimal("10.1111").unscaledValue().toByteArray()}, and 22.0000 is
// {scale 0, value of 22} (stripTrailingZeros). The JSON is Kafka's
// JsonConverter (asJsonSchema: type, fields, optional, name, version, doc,
// parameters, default; TO_JSON_LOGICAL_CONVERTERS writing a Decimal as
// Decimal.fromLogical's bytes with decimal.format BASE64, its default);
// the header is SimpleHeaderConverter (Values.append writes a Number by
// its toString, a Struct as {"field":value,...} with bytes in base64); the
// string is StringConverter (BigDecimal.toString).
func TestPreciseNumericColumns(t *testing.T) {
	const (
		vsdSchema = `{"type":"struct","fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],` +
			`"optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,"doc":"Variable scaled decimal"}`
	)
	decimalSchema := func(p, s, opt string) string {
		return `{"type":"bytes","optional":` + opt + `,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"` + s + `","connect.decimal.precision":"` + p + `"}`
	}
	for _, tc := range []struct {
		name   string
		c      column
		text   string
		schema string
		json   string
		header string
		str    string // "" when StringConverter cannot write it
	}{
		// 110 is 0x6e.
		{"numeric(3,2)", column{typName: "numeric", typMod: numericMod(3, 2)}, "1.10",
			decimalSchema("3", "2", "true") + `}`, `"bg=="`, "1.10", "1.10"},
		// ARPT's d_int: 1 in a scale-2 column is 1.00, unscaled 100 (0x64).
		{"numeric(3,2) whole", column{typName: "numeric", typMod: numericMod(3, 2)}, "1.00",
			decimalSchema("3", "2", "true") + `}`, `"ZA=="`, "1.00", "1.00"},
		// -1250 as two's complement: 0xfb1e.
		{"negative", column{typName: "numeric", typMod: numericMod(10, 2), notNull: true}, "-12.50",
			decimalSchema("10", "2", "false") + `}`, `"+x4="`, "-12.50", "-12.50"},
		// BigInteger.toByteArray keeps a sign byte: 128 is 00 80, -128 is 80.
		{"sign byte", column{typName: "numeric", typMod: numericMod(5, 0)}, "128",
			decimalSchema("5", "0", "true") + `}`, `"AIA="`, "128", "128"},
		{"minus 128", column{typName: "numeric", typMod: numericMod(5, 0)}, "-128",
			decimalSchema("5", "0", "true") + `}`, `"gA=="`, "-128", "-128"},
		// BigDecimal.toString goes to E notation below an adjusted
		// exponent of -6: 1.00E-8.
		{"small", column{typName: "numeric", typMod: numericMod(12, 10)}, "0.0000000100",
			decimalSchema("12", "10", "true") + `}`, `"ZA=="`, "1.00E-8", "1.00E-8"},
		// PostgresDefaultValueConverter: the default as a BigDecimal of
		// the column's scale, 5.00, unscaled 500 (0x01f4).
		{"default", column{typName: "numeric", typMod: numericMod(10, 2), defaultExpr: "5"}, "1.10",
			decimalSchema("10", "2", "true") + `,"default":"AfQ="}`, `"bg=="`, "1.10", "1.10"},
		// 101111 is 0x018af7.
		{"unconstrained", column{typName: "numeric", typMod: -1}, "10.1111",
			vsdSchema, `{"scale":4,"value":"AYr3"}`, `{"scale":4,"value":"AYr3"}`, ""},
		{"unconstrained whole", column{typName: "numeric", typMod: -1}, "22.0000",
			vsdSchema, `{"scale":0,"value":"Fg=="}`, `{"scale":0,"value":"Fg=="}`, ""},
		// A Struct default is dropped ("Struct can't be used as default
		// value"); 0 strips to scale 0, value 00.
		{"unconstrained zero, default dropped", column{typName: "numeric", typMod: -1, defaultExpr: "1.5"}, "0.000",
			vsdSchema, `{"scale":0,"value":"AA=="}`, `{"scale":0,"value":"AA=="}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.name = "amount"
			s, err := tc.c.schema()
			if err != nil {
				t.Fatal(err)
			}
			if got := string(appendSchemaJSON(nil, s, "")); got != tc.schema {
				t.Errorf("schema\n got %s\nwant %s", got, tc.schema)
			}
			v, err := tc.c.value([]byte(tc.text), false)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.validate(v); err != nil {
				t.Errorf("the value does not fit its schema: %v", err)
			}
			got, err := convert(FormatJSON, s, v)
			if err != nil || string(got) != tc.json {
				t.Errorf("JsonConverter: %s (%v), want %s", got, err, tc.json)
			}
			withSchema, err := convert(FormatJSONSchema, s, v)
			if want := `{"schema":` + tc.schema + `,"payload":` + tc.json + `}`; err != nil || string(withSchema) != want {
				t.Errorf("JsonConverter with schemas: %s (%v), want %s", withSchema, err, want)
			}
			h, err := convertHeader(FormatSimple, s, v)
			if err != nil || string(h) != tc.header {
				t.Errorf("SimpleHeaderConverter: %s (%v), want %s", h, err, tc.header)
			}
			str, err := convert(FormatString, s, v)
			switch {
			case tc.str == "" && err == nil:
				t.Errorf("StringConverter wrote %s; Struct.toString writes the bytes field as Java's object name, which the relay refuses", str)
			case tc.str != "" && (err != nil || string(str) != tc.str):
				t.Errorf("StringConverter: %s (%v), want %s", str, err, tc.str)
			}
		})
	}
}

// SpecialValueDecimal.fromLogical throws a ConnectException for NaN and the
// infinities in precise mode, fixed or variable scale (convertDecimal hands
// a special value to it before it looks at the scale); the relay makes that
// the event's error, naming the column and the way out.
func TestPreciseNumericSpecialValues(t *testing.T) {
	for _, mod := range []int32{numericMod(10, 2), -1} {
		for _, text := range []string{"NaN", "Infinity", "-Infinity"} {
			c := &column{name: "amount", typName: "numeric", typMod: mod}
			v, err := c.value([]byte(text), false)
			if err == nil {
				t.Errorf("typmod %d %s: %#v, want an error", mod, text, v)
				continue
			}
			for _, want := range []string{`column "amount"`, text, "decimal.handling.mode string"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("typmod %d %s: %v, want it to say %q", mod, text, err, want)
				}
			}
		}
	}
}

// BigInteger.toByteArray, checked at the edges of each byte length against
// the value it reads back as two's complement.
func TestTwosComplement(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want []byte
	}{
		{0, []byte{0}}, {1, []byte{1}}, {-1, []byte{0xff}}, {127, []byte{0x7f}}, {128, []byte{0, 0x80}},
		{-128, []byte{0x80}}, {-129, []byte{0xff, 0x7f}}, {255, []byte{0, 0xff}}, {32767, []byte{0x7f, 0xff}},
		{-32768, []byte{0x80, 0}}, {-32769, []byte{0xff, 0x7f, 0xff}},
	} {
		if got := twosComplement(big.NewInt(tc.n)); !bytes.Equal(got, tc.want) {
			t.Errorf("%d: % x, want % x", tc.n, got, tc.want)
		}
	}
}

// The Avro schema Confluent's AvroData.fromConnectSchema derives: for a
// Decimal, the BYTES case adds scale and precision (from
// connect.decimal.precision) first, then the connect.* properties
// (version, parameters, name), then LogicalTypes.decimal's logicalType;
// AvroDataTest.createDecimalSchema builds the same, in that order. The
// VariableScaleDecimal struct is a record with connect.doc before
// connect.version (connectMetaData). Values are Decimal.fromLogical's
// bytes.
func TestAvroPreciseNumeric(t *testing.T) {
	fixed := &column{name: "amount", typName: "numeric", typMod: numericMod(10, 2)}
	variable := &column{name: "ratio", typName: "numeric", typMod: -1}
	s, st := recordOf(t, "dbserver1.public.outbox.order.Value", []*column{fixed, variable}, []string{"12.50", "10.1111"})
	text, err := avroSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"record","name":"Value","namespace":"dbserver1.public.outbox.order","fields":[` +
		`{"name":"amount","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},` +
		`{"name":"ratio","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],` +
		`"connect.doc":"Variable scaled decimal","connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}],"default":null}],` +
		`"connect.name":"dbserver1.public.outbox.order.Value"}`
	if text != want {
		t.Errorf("schema\n got %s\nwant %s", text, want)
	}
	b := avroBytes(t, text, s, st)
	// amount: branch 1 (zigzag 02), bytes of length 2 (04), 1250 as
	// 04 e2; ratio: branch 1, scale 4 (08), bytes of length 3 (06),
	// 01 8a f7.
	wantB := []byte{2, 4, 0x04, 0xe2, 2, 8, 6, 0x01, 0x8a, 0xf7}
	if !bytes.Equal(b, wantB) {
		t.Errorf("encoded % x\nwant % x", b, wantB)
	}
	// A default: toAvroLogical's bytes as an ISO-8859-1 string, 5.00 is
	// 01 f4.
	d := &column{name: "amount", typName: "numeric", typMod: numericMod(10, 2), defaultExpr: "5"}
	ds, err := d.schema()
	if err != nil {
		t.Fatal(err)
	}
	text, err = avroSchema(ds)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.default":"\u0001ô","connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"},"null"]`; text != want {
		t.Errorf("schema with a default\n got %s\nwant %s", text, want)
	}
}

// Connect's Decimal and VariableScaleDecimal have types of their own in
// Confluent's ProtobufData (confluent.type.Decimal), which outboxrelay
// does not write: a numeric key, payload or envelope field with precise
// is refused at start with protobuf, naming the column and the ways out;
// Avro, JSON Schema and JsonConverter take it.
func TestPreciseNumericRefusedWithProtobuf(t *testing.T) {
	cols := outboxColumns(&column{name: "amount", typName: "numeric", typMod: numericMod(10, 2)},
		&column{name: "ratio", typName: "numeric", typMod: -1})
	envelope := []string{"amount:envelope", "ratio:envelope"}
	for _, tc := range []struct {
		format Format
		errs   []string
	}{
		{FormatProtobuf, []string{`envelope field amount column "amount"`, "org.apache.kafka.connect.data.Decimal", `envelope field ratio column "ratio"`,
			"io.debezium.data.VariableScaleDecimal", "format protobuf", "routing.decimal_handling"}},
		{FormatJSONSR, nil},
		{FormatAvro, nil},
		{FormatJSONSchema, nil},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			cfg := RouterConfig{ValueFormat: tc.format, AdditionalFields: envelope}
			if tc.format.UsesRegistry() {
				cfg.Registry.URLs = []string{"http://registry.invalid"}
			}
			err := fixedRouter(t, cfg, cols...).Check(context.Background())
			wantCheck(t, err, tc.errs)
		})
	}
}

// The JSON Schema JsonSchemaData.rawSchemaFromConnectSchema derives with
// decimal.format BASE64 (JsonSchemaDataConfig's default): a Decimal is a
// StringSchema (the BYTES case) with connect.type bytes, its name the
// title, connect.version, and connect.parameters, a HashMap of its
// parameters; VariableScaleDecimal an object with its doc as the
// description. ToStringVisitor writes title, description, default, then
// the unprocessed properties in the order of everit's copy of
// JsonSchemaData's HashMap (javahash.go; a table of 4 for three keys:
// connect.version, connect.type, connect.parameters; amount before ratio,
// scale before value), and connect.parameters in its HashMap's order
// (scale, then connect.decimal.precision). fromConnectData writes a Decimal as a BinaryNode of its
// bytes, base64 in the record, and a default as its text (toJsonSchemaValue,
// BinaryNode.asText). Checked once against Confluent's code, built and run
// as jsonschema_test.go says: the schemas and the record are its text.
func TestJSONSchemaPreciseNumeric(t *testing.T) {
	amount := &column{name: "amount", typName: "numeric", typMod: numericMod(10, 2)}
	ratio := &column{name: "ratio", typName: "numeric", typMod: -1}
	s, st := recordOf(t, "v", []*column{amount, ratio}, []string{"12.50", "10.1111"})
	got, err := jsonSRFormat{}.derive(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"object","title":"v","properties":{` +
		`"amount":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"string","title":"org.apache.kafka.connect.data.Decimal","connect.version":1,"connect.type":"bytes","connect.parameters":{"scale":"2","connect.decimal.precision":"10"}}]},` +
		`"ratio":{"connect.index":1,"oneOf":[{"type":"null"},{"type":"object","title":"io.debezium.data.VariableScaleDecimal","description":"Variable scaled decimal","connect.version":1,"properties":{` +
		`"scale":{"type":"integer","connect.index":0,"connect.type":"int32"},"value":{"type":"string","connect.index":1,"connect.type":"bytes"}}}]}}}`
	if got != want {
		t.Errorf("schema\n got %s\nwant %s", got, want)
	}
	_, b, err := jsonSRFormat{}.encode(nil, s, st)
	if want := `{"amount":"BOI=","ratio":{"scale":4,"value":"AYr3"}}`; err != nil || string(b) != want {
		t.Errorf("record %s (%v), want %s", b, err, want)
	}
	d := &column{name: "amount", typName: "numeric", typMod: numericMod(10, 2), notNull: true, defaultExpr: "5"}
	ds, err := d.schema()
	if err != nil {
		t.Fatal(err)
	}
	got, err = jsonSRFormat{}.derive(ds)
	if want := `{"type":"string","title":"org.apache.kafka.connect.data.Decimal","default":"AfQ=","connect.version":1,"connect.type":"bytes","connect.parameters":{"scale":"2","connect.decimal.precision":"10"}}`; err != nil || got != want {
		t.Errorf("schema with a default\n got %s (%v)\nwant %s", got, err, want)
	}
}

// A numeric key column (table.field.event.key) with precise: the key is
// what the key converter writes of the column's Decimal (JsonConverter:
// base64 of the bytes, the parameters in the schema; StringConverter:
// BigDecimal.toString), and the partition murmur2 of those bytes, as for
// any key.
func TestRoutePreciseNumericKey(t *testing.T) {
	cols := outboxColumns(&column{name: "amount", typName: "numeric", typMod: numericMod(10, 2), notNull: true})
	m := connector.ColumnMap{AggregateID: "amount"}.WithDefaults()
	for _, tc := range []struct {
		name string
		f    Format
		key  string
	}{
		{"JsonConverter", FormatJSON, `"BOI="`},
		{"JsonConverter with schemas", FormatJSONSchema, `{"schema":{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,` +
			`"parameters":{"scale":"2","connect.decimal.precision":"10"}},"payload":"BOI="}`},
		{"StringConverter", FormatString, "12.50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := m.NewEvent([]connector.Column{
				{Name: "id", Value: []byte("4d47e190-0402-4048-bc2c-89dd54343cdc")},
				{Name: "aggregatetype", Value: []byte("order")},
				{Name: "aggregateid", Value: []byte("1")},
				{Name: "payload", Value: []byte(`{}`)},
				{Name: "amount", Value: []byte("12.50")},
			}, time.Unix(0, 0), "test")
			r := fixedRouter(t, RouterConfig{KeyFormat: tc.f, Columns: m}, cols...)
			msg, err := r.Route(context.Background(), &e)
			if err != nil {
				t.Fatal(err)
			}
			if string(msg.Key) != tc.key {
				t.Errorf("key %s, want %s", msg.Key, tc.key)
			}
		})
	}
}

// Two VariableScaleDecimal columns in one Avro envelope: AvroData's
// fromConnectSchemaWithCycle reuses the record it made for the name
// (FromConnectContext.cycleReferences), and Avro's Schema.toString writes
// the second as a reference to it (NamedSchema.writeNameRef), qualified,
// the enclosing namespace being another; Avro refuses a name defined twice.
func TestAvroTwoVariableScaleDecimals(t *testing.T) {
	a, err := (&column{name: "a", typName: "numeric", typMod: -1}).schema()
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&column{name: "b", typName: "numeric", typMod: -1, notNull: true}).schema()
	if err != nil {
		t.Fatal(err)
	}
	c, err := (&column{name: "c", typName: "numeric", typMod: -1}).schema()
	if err != nil {
		t.Fatal(err)
	}
	s := &Schema{Type: TypeStruct, Name: "x.y.Value", Fields: []Field{{Name: "a", Schema: a}, {Name: "b", Schema: b}, {Name: "c", Schema: c}}}
	text, err := avroSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"record","name":"Value","namespace":"x.y","fields":[{"name":"a","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data",` +
		`"fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.doc":"Variable scaled decimal","connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}],"default":null},` +
		`{"name":"b","type":"io.debezium.data.VariableScaleDecimal"},{"name":"c","type":["null","io.debezium.data.VariableScaleDecimal"],"default":null}],"connect.name":"x.y.Value"}`
	if text != want {
		t.Errorf("schema\n got %s\nwant %s", text, want)
	}
	as, err := avroFormat{}.parse(text, s)
	if err != nil {
		t.Fatal(err)
	}
	va, _ := (&column{name: "a", typName: "numeric", typMod: -1}).value([]byte("1.5"), false)
	vb, _ := (&column{name: "b", typName: "numeric", typMod: -1, notNull: true}).value([]byte("-2"), false)
	vc, _ := (&column{name: "c", typName: "numeric", typMod: -1}).value([]byte("0"), false)
	_, got, err := avroFormat{}.encode(as, s, &Struct{Schema: s, Values: []any{va, vb, vc}})
	// a: branch 1, scale 1 (02), 1 byte (02), 15 (0f); b: scale 0, 1
	// byte, -2 (fe); c: branch 1, scale 0, 1 byte, 0.
	if want := []byte{2, 2, 2, 0x0f, 0, 2, 0xfe, 2, 0, 2, 0}; err != nil || !bytes.Equal(got, want) {
		t.Errorf("encoded % x (%v), want % x", got, err, want)
	}
}

// Connect's Date, Time and Timestamp, which time.precision.mode connect
// places, are messages of their own in ProtobufData too: refused at start
// with protobuf, naming the column and the ways out, not at the first
// event; the other modes' types are plain numbers.
func TestConnectTimeRefusedWithProtobuf(t *testing.T) {
	cols := outboxColumns(&column{name: "due", typName: "date", typMod: -1})
	for _, tc := range []struct {
		mode TimePrecision
		errs []string
	}{
		{TimeConnect, []string{`envelope field due column "due" has type date`, "org.apache.kafka.connect.data.Date", "format protobuf", "routing.time_precision"}},
		{TimeAdaptive, nil},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			cfg := RouterConfig{ValueFormat: FormatProtobuf, TimePrecision: tc.mode, AdditionalFields: []string{"due:envelope"}}
			cfg.Registry.URLs = []string{"http://registry.invalid"}
			err := fixedRouter(t, cfg, cols...).Check(context.Background())
			wantCheck(t, err, tc.errs)
		})
	}
}

// recordOf is a struct schema called name of cols' schemas, as the router
// types placed columns, and the struct of their values read from texts.
func recordOf(t *testing.T, name string, cols []*column, texts []string) (*Schema, *Struct) {
	t.Helper()
	s := &Schema{Type: TypeStruct, Name: name}
	st := &Struct{Schema: s}
	for i, c := range cols {
		cs, err := c.schema()
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.value([]byte(texts[i]), false)
		if err != nil {
			t.Fatal(err)
		}
		s.Fields = append(s.Fields, Field{Name: c.name, Schema: cs})
		st.Values = append(st.Values, v)
	}
	return s, st
}

// avroBytes is st encoded with the Avro schema text, as hamba/avro reads
// it: a check of the schema text as much as of the value.
func avroBytes(t *testing.T, text string, s *Schema, st *Struct) []byte {
	t.Helper()
	as, err := avro.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	native, err := avroValue(as, s, st)
	if err != nil {
		t.Fatal(err)
	}
	b, err := avro.Marshal(as, native)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
