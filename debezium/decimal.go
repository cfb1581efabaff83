package debezium

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// numeric columns with decimal.handling.mode precise, Debezium's default,
// as its PostgreSQL connector types and converts them
// (debezium-connector-postgres, PostgresValueConverter.java: numericSchema,
// convertDecimal, isVariableScaleDecimal; debezium-connector-common,
// data/SpecialValueDecimal.java, data/VariableScaleDecimal.java,
// schema/SchemaFactory.java datatypeVariableScaleDecimalSchema):
//   - numeric(p,s) is Connect's Decimal: bytes named
//     org.apache.kafka.connect.data.Decimal, version 1, parameters scale=s
//     and connect.decimal.precision=p (SpecialValueDecimal.builder), the
//     value a BigDecimal of scale s;
//   - numeric without a type modifier (pgjdbc's length 131089, scale 0) is
//     io.debezium.data.VariableScaleDecimal, version 1, doc "Variable
//     scaled decimal", a struct {scale int32, value bytes}: the value's
//     trailing zeros stripped (a negative scale set back to 0), then its
//     scale and its unscaled value as BigInteger.toByteArray;
//   - NaN and the infinities fail: SpecialValueDecimal.fromLogical throws
//     a ConnectException for them in precise mode ("Got a special value
//     (NaN/Infinity) for Decimal type in column ... but current mode does
//     not handle it"), which stops Debezium's connector; here it is the
//     event's error.
//
// A VariableScaleDecimal gets no column default: Debezium's
// PostgresDefaultValueConverter.parseDefaultValue drops a Struct default
// ("Struct can't be used as default value"), so it is left out here too.

const (
	nameDecimal              = "org.apache.kafka.connect.data.Decimal"
	nameVariableScaleDecimal = "io.debezium.data.VariableScaleDecimal"
	// docVariableScaleDecimal is SchemaFactory's doc for it.
	docVariableScaleDecimal = "Variable scaled decimal"
)

// javaDecimal is a java.math.BigDecimal: unscaled × 10^-scale.
type javaDecimal struct {
	unscaled *big.Int
	scale    int32
}

// bytes is Decimal.fromLogical: the unscaled value as
// BigInteger.toByteArray, big-endian two's complement in the fewest bytes
// that keep the sign bit, at least one.
func (d javaDecimal) bytes() []byte { return twosComplement(d.unscaled) }

func twosComplement(n *big.Int) []byte {
	// BigInteger.bitLength: for a negative number, that of -n-1.
	m := n
	if n.Sign() < 0 {
		m = new(big.Int).Neg(n)
		m.Sub(m, big.NewInt(1))
	}
	size := m.BitLen()/8 + 1
	if n.Sign() >= 0 {
		return n.FillBytes(make([]byte, size))
	}
	// 2^(8·size) + n, the two's complement in size bytes.
	v := new(big.Int).Lsh(big.NewInt(1), uint(8*size))
	v.Add(v, n)
	return v.FillBytes(make([]byte, size))
}

// String is BigDecimal.toString: plain when the scale is not negative and
// the adjusted exponent is -6 or more, else one digit, the others after a
// point, and E with the adjusted exponent (signed when positive).
func (d javaDecimal) String() string {
	digits := new(big.Int).Abs(d.unscaled).String()
	sign := ""
	if d.unscaled.Sign() < 0 {
		sign = "-"
	}
	scale := int(d.scale)
	adjusted := -scale + len(digits) - 1
	if scale >= 0 && adjusted >= -6 {
		if scale == 0 {
			return sign + digits
		}
		if len(digits) <= scale {
			digits = strings.Repeat("0", scale-len(digits)+1) + digits
		}
		return sign + digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	out := digits[:1]
	if len(digits) > 1 {
		out += "." + digits[1:]
	}
	out += "E"
	if adjusted > 0 {
		out += "+"
	}
	return sign + out + strconv.Itoa(adjusted)
}

// parseJavaDecimal reads plain decimal text ("-12.340") as new
// BigDecimal(text) does: the scale is the number of fraction digits.
func parseJavaDecimal(text string) (javaDecimal, bool) {
	whole, frac, _ := strings.Cut(text, ".")
	n, ok := new(big.Int).SetString(whole+frac, 10)
	if !ok {
		return javaDecimal{}, false
	}
	return javaDecimal{unscaled: n, scale: int32(len(frac))}, true
}

// stripTrailingZeros is BigDecimal.stripTrailingZeros followed by
// convertDecimal's setScale(0) of a negative scale: zero is 0 with scale
// 0.
func (d javaDecimal) stripTrailingZeros() javaDecimal {
	n := new(big.Int).Set(d.unscaled)
	scale := d.scale
	ten := big.NewInt(10)
	q, r := new(big.Int), new(big.Int)
	for n.Sign() != 0 && scale > 0 {
		q.QuoRem(n, ten, r)
		if r.Sign() != 0 {
			break
		}
		n.Set(q)
		scale--
	}
	if n.Sign() == 0 {
		scale = 0
	}
	return javaDecimal{unscaled: n, scale: scale}
}

// variableScale reports whether the column is a VariableScaleDecimal in
// precise mode: a numeric without a type modifier.
func (c *column) variableScale() bool {
	_, _, ok := c.numericMod()
	return !ok
}

// numericMod is a numeric column's precision and scale from its type
// modifier (numeric(p, s) stores ((p << 16) | s) + 4); not ok for a
// numeric without one.
func (c *column) numericMod() (precision, scale int, ok bool) {
	if c.typMod < 0 {
		return 0, 0, false
	}
	m := c.typMod - 4
	return int(m >> 16 & 0xFFFF), int(m & 0xFFFF), true
}

// variableScaleDecimalSchema is SchemaFactory's
// datatypeVariableScaleDecimalSchema.
func variableScaleDecimalSchema(s *Schema) {
	s.Type, s.Name, s.Version, s.Doc = TypeStruct, nameVariableScaleDecimal, 1, docVariableScaleDecimal
	s.Fields = []Field{
		{Name: "scale", Schema: &Schema{Type: TypeInt32}},
		{Name: "value", Schema: &Schema{Type: TypeBytes}},
	}
}

// preciseSchema types a numeric column in precise mode.
func (c *column) preciseSchema(s *Schema) {
	precision, scale, ok := c.numericMod()
	if !ok {
		variableScaleDecimalSchema(s)
		return
	}
	s.Type, s.Name, s.Version = TypeBytes, nameDecimal, 1
	s.Params = []Param{
		{"scale", strconv.Itoa(scale)},
		{"connect.decimal.precision", strconv.Itoa(precision)},
	}
}

// preciseValue converts a numeric's text in precise mode: a javaDecimal
// of the column's scale, or a VariableScaleDecimal struct.
func (c *column) preciseValue(text string) (any, error) {
	switch text {
	case "NaN", "Infinity", "-Infinity":
		return nil, fmt.Errorf("%s: Debezium fails on NaN and the infinities with decimal.handling.mode precise (\"Got a special value (NaN/Infinity) for Decimal type in column %s but current mode does not handle it\"); set decimal.handling.mode string (routing.decimal_handling) to write them", text, c.name)
	}
	plain, err := c.decimalText(text)
	if err != nil {
		return nil, err
	}
	d, ok := parseJavaDecimal(plain)
	if !ok {
		return nil, fmt.Errorf("%q is not a number", text)
	}
	if !c.variableScale() {
		return d, nil
	}
	d = d.stripTrailingZeros()
	// fromLogical(fieldDefn.schema(), ...): the struct has the field's
	// schema, optional where the column is.
	s := &Schema{Optional: !c.notNull}
	variableScaleDecimalSchema(s)
	return &Struct{Schema: s, Values: []any{int64(d.scale), d.bytes()}}, nil
}
