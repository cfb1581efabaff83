package debezium

import (
	"cmp"
	"regexp"
	"strconv"
	"strings"
)

// producerSecurity is what security.protocol says of the other producer
// options: whether TLS and SASL settings apply.
type producerSecurity struct {
	protocol  string
	tls, sasl bool
}

// producerOptions maps producer.override.* (Connect) or
// debezium.sink.kafka.producer.* (Debezium Server).
func (tr *translator) producerOptions() {
	protocol, _ := tr.producer.Get("security.protocol")
	protocol = strings.ToUpper(strings.TrimSpace(protocol))
	sec := producerSecurity{
		protocol: protocol,
		tls:      protocol == "SSL" || protocol == "SASL_SSL",
		sasl:     protocol == "SASL_SSL" || protocol == "SASL_PLAINTEXT",
	}
	for _, k := range tr.producer.Keys() {
		v, _ := tr.producer.Get(k)
		switch {
		case strings.HasPrefix(k, "sasl."):
			tr.saslOption(k, v, sec)
		case strings.HasPrefix(k, "ssl."):
			tr.sslOption(k, v, sec)
		default:
			tr.producerOption(k, v, sec)
		}
	}
	if sec.sasl {
		if _, ok := tr.producer.Get("sasl.mechanism"); !ok {
			tr.note(tr.prodLabel+"sasl.mechanism", Unsupported, "not set, and Kafka's default GSSAPI (Kerberos) is not supported")
		}
	}
	if _, ok := tr.t.Setting("kafka.brokers"); !ok {
		tr.note("bootstrap.servers", Info, "the brokers are the Connect worker's, not the connector's: set kafka.brokers with --config or OUTBOXRELAY_KAFKA_BROKERS")
	}
}

// producerOption maps one producer option that is neither SASL's nor
// TLS's.
func (tr *translator) producerOption(k, v string, sec producerSecurity) {
	name := tr.prodLabel + k
	switch k {
	case "bootstrap.servers":
		var brokers []string
		for b := range strings.SplitSeq(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
		tr.set("kafka.brokers", brokers)
	case "client.id":
		tr.set("kafka.client_id", v)
	case "compression.type":
		switch v {
		case "none", "gzip", "snappy", "lz4", "zstd":
			tr.set("kafka.compression", v)
		default:
			tr.note(name, Unsupported, "%q is not none, gzip, snappy, lz4 or zstd", v)
		}
	case "max.request.size":
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			tr.set("kafka.max_record_bytes", n)
		} else {
			tr.note(name, Unsupported, "%q is not a positive number of bytes", v)
		}
	case "security.protocol":
		switch sec.protocol {
		case "PLAINTEXT":
		case "SSL", "SASL_SSL":
			tr.set("kafka.tls.enabled", true)
		case "SASL_PLAINTEXT":
			tr.set("kafka.allow_plaintext_sasl", true)
			tr.note(name, Info, "SASL without TLS: kafka.allow_plaintext_sasl is set")
		default:
			tr.note(name, Unsupported, "%q is not PLAINTEXT, SSL, SASL_SSL or SASL_PLAINTEXT", v)
		}
	case "partitioner.class":
		if v != "org.apache.kafka.clients.producer.internals.DefaultPartitioner" {
			tr.note(name, Unsupported, "%s: outboxrelay partitions by murmur2 of the key bytes, the Java client's default", v)
		}
	case "key.serializer", "value.serializer":
		if !strings.HasSuffix(v, ".StringSerializer") && !strings.HasSuffix(v, ".ByteArraySerializer") {
			tr.note(name, Unsupported, "%s is not supported; the converted record is written as it is", v)
		}
	default:
		tr.note(name, Info, "no effect on records: outboxrelay always produces with acks=all and idempotence")
	}
}

// saslOption maps one sasl.* producer option.
func (tr *translator) saslOption(k, v string, sec producerSecurity) {
	name := tr.prodLabel + k
	switch {
	case !sec.sasl:
		tr.note(name, Info, "unused: security.protocol is %s", cmp.Or(sec.protocol, "PLAINTEXT"))
	case k == "sasl.mechanism":
		switch m := strings.ToUpper(strings.TrimSpace(v)); m {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
			tr.set("kafka.sasl.mechanism", strings.ToLower(m))
		default:
			tr.note(name, Unsupported, "%s is not supported; outboxrelay authenticates with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", v)
		}
	case k == "sasl.jaas.config":
		user, password, ok := parseJAAS(v)
		if !ok {
			tr.note(name, Unsupported, "outboxrelay reads username and password from a PlainLoginModule or ScramLoginModule line only")
			return
		}
		tr.set("kafka.sasl.username", user)
		tr.t.secrets["kafka.sasl.password"] = password
		tr.note(name, Info, "used by run --debezium-config; `debezium translate` leaves the password out (set OUTBOXRELAY_KAFKA_SASL_PASSWORD or kafka.sasl.password_file)")
	default:
		tr.note(name, Info, "no effect on records: outboxrelay always produces with acks=all and idempotence")
	}
}

// sslOption maps one ssl.* producer option.
func (tr *translator) sslOption(k, v string, sec producerSecurity) {
	name := tr.prodLabel + k
	switch {
	case !sec.tls:
		tr.note(name, Info, "unused: security.protocol is %s", cmp.Or(sec.protocol, "PLAINTEXT"))
	case k == "ssl.truststore.location" || k == "ssl.keystore.location":
		store := strings.TrimSuffix(strings.TrimPrefix(k, "ssl."), ".location")
		if typ, _ := tr.producer.Get("ssl." + store + ".type"); !strings.EqualFold(typ, "PEM") {
			tr.note(name, Unsupported, "%s stores (%s) are not supported: convert it to PEM and set %s", cmp.Or(typ, "JKS"), v,
				map[string]string{"truststore": "kafka.tls.ca_file", "keystore": "kafka.tls.cert_file and kafka.tls.key_file"}[store])
			return
		}
		if store == "truststore" {
			tr.set("kafka.tls.ca_file", v)
		} else {
			tr.set("kafka.tls.cert_file", v)
			tr.set("kafka.tls.key_file", v)
		}
	case k == "ssl.endpoint.identification.algorithm" && v == "":
		tr.note(name, Warning, "empty (no host name check) is not supported: outboxrelay checks the broker's certificate name; set kafka.tls.server_name if it differs from the host")
	case k == "ssl.key.password":
		tr.note(name, Unsupported, "encrypted private keys are not supported; decrypt it to a PEM key file")
	default:
		tr.note(name, Info, "TLS setting outboxrelay does not need (Go's TLS defaults apply)")
	}
}

// jaasEntry reads username="..." and password="..." from a JAAS line.
var jaasEntry = regexp.MustCompile(`(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"`)

func parseJAAS(s string) (user, password string, ok bool) {
	if !strings.Contains(s, "PlainLoginModule") && !strings.Contains(s, "ScramLoginModule") {
		return "", "", false
	}
	var haveUser, havePassword bool
	for _, m := range jaasEntry.FindAllStringSubmatch(s, -1) {
		v := strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(m[2])
		if m[1] == "username" {
			user, haveUser = v, true
		} else {
			password, havePassword = v, true
		}
	}
	return user, password, haveUser && havePassword
}
