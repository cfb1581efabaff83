package debezium

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// numeric and interval columns as Debezium's PostgreSQL connector writes
// them with decimal.handling.mode double or string (precise: decimal.go) and
// interval.handling.mode numeric or string
// (debezium-connector-postgres, PostgresValueConverter.java:
// convertDecimal, convertInterval; debezium-connector-common,
// data/SpecialValueDecimal.java, time/MicroDuration.java,
// time/Interval.java).

// DecimalHandling is the connector's decimal.handling.mode.
type DecimalHandling string

const (
	DecimalPrecise DecimalHandling = "precise"
	DecimalDouble  DecimalHandling = "double"
	DecimalString  DecimalHandling = "string"
)

// IntervalHandling is the connector's interval.handling.mode.
type IntervalHandling string

const (
	IntervalNumeric IntervalHandling = "numeric"
	IntervalString  IntervalHandling = "string"
)

// TimePrecision is the connector's time.precision.mode (the ones
// outboxrelay writes).
type TimePrecision string

const (
	TimeAdaptive             TimePrecision = "adaptive"
	TimeAdaptiveMicroseconds TimePrecision = "adaptive_time_microseconds"
	TimeConnect              TimePrecision = "connect"
)

// valueModes are the connector options that type a column; the zero value
// is Debezium's defaults (adaptive, precise, numeric).
type valueModes struct {
	time     TimePrecision
	decimal  DecimalHandling
	interval IntervalHandling
}

// precise reports whether numerics are Connect's Decimal or Debezium's
// VariableScaleDecimal (decimal.handling.mode precise, the default).
func (m valueModes) precise() bool {
	return m.decimal != DecimalDouble && m.decimal != DecimalString
}

// numericValue converts a numeric's text. The special values go out as
// SpecialValueDecimal writes them: NaN and the infinities as Java's double
// in double mode, as the enum's name (NAN, POSITIVE_INFINITY,
// NEGATIVE_INFINITY) in string mode. Any other value is a BigDecimal
// whose scale is the column's where it has a type modifier
// (withScaleAdjustedIfNeeded; PostgreSQL's text has it already), as
// written for an unconstrained column; string mode writes its
// toPlainString, double mode its doubleValue, the nearest double.
func (c *column) numericValue(text string) (any, error) {
	if c.modes.precise() {
		return c.preciseValue(text)
	}
	special := map[string]struct {
		f    float64
		name string
	}{
		"NaN":       {math.NaN(), "NAN"},
		"Infinity":  {math.Inf(1), "POSITIVE_INFINITY"},
		"-Infinity": {math.Inf(-1), "NEGATIVE_INFINITY"},
	}
	if sv, ok := special[text]; ok {
		if c.modes.decimal == DecimalString {
			return sv.name, nil
		}
		return sv.f, nil
	}
	plain, err := c.decimalText(text)
	if err != nil {
		return nil, err
	}
	if c.modes.decimal == DecimalString {
		return plain, nil
	}
	f, err := strconv.ParseFloat(plain, 64)
	if err != nil && !isRange(err) {
		return nil, fmt.Errorf("%q is not a number", text)
	}
	return f, nil
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// plainDecimal matches what BigDecimal's toPlainString writes and
// PostgreSQL prints of a numeric.
var plainDecimal = regexp.MustCompile(`^-?[0-9]+(?:\.[0-9]+)?$`)

// decimalText is the BigDecimal's toPlainString: the text with its scale
// set to the column's, zeros added (a literal default may have fewer
// digits; setScale without rounding fails on more, and Debezium then
// leaves the default out).
func (c *column) decimalText(text string) (string, error) {
	text = strings.TrimSpace(text)
	if !plainDecimal.MatchString(text) {
		// A default such as 1e3: BigDecimal reads it; so does big.Float,
		// exactly enough to print it plain.
		r, ok := new(big.Rat).SetString(text)
		if !ok {
			return "", fmt.Errorf("%q is not a number", text)
		}
		text = r.FloatString(decimalsOf(text))
	}
	_, scale, ok := c.numericMod()
	if !ok {
		return text, nil
	}
	_, frac, _ := strings.Cut(text, ".")
	switch {
	case len(frac) == scale:
		return text, nil
	case len(frac) > scale:
		return "", fmt.Errorf("%q has more than the column's %d decimals", text, scale)
	case len(frac) == 0:
		text += "."
	}
	return text + strings.Repeat("0", scale-len(frac)), nil
}

// decimalsOf is the scale BigDecimal gives a number in exponent form:
// the fraction's digits less the exponent, at least 0.
func decimalsOf(text string) int {
	mant, exp, _ := strings.Cut(strings.ToLower(text), "e")
	_, frac, _ := strings.Cut(mant, ".")
	e, _ := strconv.Atoi(exp)
	return max(len(frac)-e, 0)
}

// pgInterval is pgjdbc's PGInterval of PostgreSQL's interval text in the
// default IntervalStyle postgres ("1 year 2 mons 3 days 04:05:06.78",
// "-1 days +02:03:00"): each unit signed on its own, a time part whose
// sign covers its hours, minutes and seconds.
type pgInterval struct {
	years, months, days, hours, minutes int
	// seconds as PGInterval.getSeconds: whole seconds plus microseconds
	// over 1e6, a double.
	seconds float64
}

var intervalUnit = regexp.MustCompile(`^([+-]?[0-9]+) (years?|mons?|days?)$`)

func parseInterval(text string) (pgInterval, error) {
	var iv pgInterval
	bad := fmt.Errorf("%q is not an interval outboxrelay can convert (IntervalStyle postgres)", text)
	fields := strings.Fields(text)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.Contains(f, ":") {
			neg := strings.HasPrefix(f, "-")
			f = strings.TrimLeft(f, "+-")
			parts := strings.Split(f, ":")
			if len(parts) != 3 {
				return iv, bad
			}
			h, err1 := strconv.Atoi(parts[0])
			m, err2 := strconv.Atoi(parts[1])
			whole, frac, _ := strings.Cut(parts[2], ".")
			s, err3 := strconv.Atoi(whole)
			us, err4 := strconv.Atoi((frac + "000000")[:6])
			if err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(frac) > 6 {
				return iv, bad
			}
			sec := float64(s) + float64(us)/1e6
			if neg {
				h, m, sec = -h, -m, -sec
			}
			iv.hours, iv.minutes, iv.seconds = h, m, sec
			continue
		}
		if i+1 >= len(fields) {
			return iv, bad
		}
		m := intervalUnit.FindStringSubmatch(f + " " + fields[i+1])
		if m == nil {
			return iv, bad
		}
		i++
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return iv, bad
		}
		switch strings.TrimSuffix(m[2], "s") {
		case "year":
			iv.years = n
		case "mon":
			iv.months = n
		case "day":
			iv.days = n
		}
	}
	return iv, nil
}

// daysPerMonthAvg is MicroDuration.DAYS_PER_MONTH_AVG, 365.25 / 12.
const daysPerMonthAvg = 365.25 / 12.0

// intervalValue converts an interval's text: interval.handling.mode
// numeric is MicroDuration.durationMicros with the average month, in
// Java's double arithmetic, cut to a long; string is Interval.toIsoString,
// PnYnMnDTnHnMnS with the seconds as BigDecimal.valueOf(double) with
// trailing zeros stripped, written plain.
func (c *column) intervalValue(text string) (any, error) {
	iv, err := parseInterval(text)
	if err != nil {
		return nil, err
	}
	if c.modes.interval == IntervalString {
		secs := strconv.FormatFloat(iv.seconds, 'f', -1, 64)
		if strings.Contains(secs, ".") {
			secs = strings.TrimRight(strings.TrimRight(secs, "0"), ".")
		}
		if secs == "-0" {
			secs = "0"
		}
		return fmt.Sprintf("P%dY%dM%dDT%dH%dM%sS", iv.years, iv.months, iv.days, iv.hours, iv.minutes, secs), nil
	}
	// Each step rounded to a double, as Java evaluates it; the
	// conversions keep Go from fusing a multiply and an add.
	numberOfDays := float64(float64(iv.years*12+iv.months)*daysPerMonthAvg) + float64(iv.days)
	numberOfSeconds := float64(float64(float64(float64(float64(numberOfDays*24)+float64(iv.hours))*60)+float64(iv.minutes))*60) + iv.seconds
	return int64(float64(numberOfSeconds * 1e6)), nil
}
