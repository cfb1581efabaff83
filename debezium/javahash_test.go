package debezium

import (
	"slices"
	"strings"
	"testing"
)

// TestJavaHashOrder checks the iteration order of a HashMap copied with
// new HashMap<>(m), which is how everit holds JsonSchemaData's properties
// and fields. The wants were printed by OpenJDK 25 (java H.java: put the
// keys in a new HashMap<>() in this order, copy it, print keySet()).
func TestJavaHashOrder(t *testing.T) {
	for _, tc := range []struct{ keys, want string }{
		{"payload,eventType,seq,ok", "eventType,ok,payload,seq"},
		{"connect.type,connect.index", "connect.index,connect.type"},
		{"connect.type,connect.version,connect.index", "connect.index,connect.version,connect.type"},
		{"connect.version,connect.index", "connect.index,connect.version"},
		{"payload,eventType,priority,created,at,ok,blob,ratio", "at,blob,payload,created,eventType,priority,ok,ratio"},
		{"seq,customer,lines,tags", "lines,seq,customer,tags"},
		{"sku,qty", "sku,qty"},
		{"payload,eventType", "payload,eventType"},
		{"id,name,address,tags,seq,zip,city,street,a,b,c,d,e,f,g,h,i,j,k,l,m,n,o", "zip,a,b,address,c,d,city,e,f,g,h,i,j,k,l,m,n,tags,o,street,name,id,seq"},
	} {
		got := javaCopyOrder(strings.Split(tc.keys, ","))
		if !slices.Equal(got, strings.Split(tc.want, ",")) {
			t.Errorf("%s: got %v, want %s", tc.keys, got, tc.want)
		}
	}
}

// TestJacksonDecimal: a float default as Jackson writes the BigDecimal it
// read from org.json's text; the wants are OpenJDK's new
// BigDecimal(s).toString() of Java's Double.toString.
func TestJacksonDecimal(t *testing.T) {
	for in, want := range map[string]string{"1.0E7": "1.0E+7", "1.2345E-5": "0.000012345", "1.0E-10": "1.0E-10",
		"123.45": "123.45", "0.001": "0.001", "-2.5E-7": "-2.5E-7", "1.0": "1", "-0.0": "0", "2.50": "2.5"} {
		if got := jacksonDecimal(in); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
}
