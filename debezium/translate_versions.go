package debezium

import "strings"

// The options of this file came, went or changed meaning in Debezium 3.2
// to 3.6 (PostgresConnectorConfig and CommonConnectorConfig at each
// v3.x.0.Final tag of debezium/debezium, and its CHANGELOG.md): a
// configuration written for a current Debezium translates, and one
// written for an older one too, each note saying which version changed
// the option.

// versionedOptions maps the LSN flushing, offset validation and
// partition root options.
func (tr *translator) versionedOptions() {
	tr.lsnFlushMode()
	tr.offsetMismatch()
	if v, ok := tr.get("publish.via.partition.root"); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "false":
		case "true":
			// PostgresReplicationConnection creates the publication WITH
			// (publish_via_partition_root = true), so that a partitioned
			// table's rows come as the root table's.
			tr.note("publish.via.partition.root", Warning, "true (Debezium 3.2 and later): outboxrelay creates its publication without publish_via_partition_root; for a partitioned outbox table create the publication yourself WITH (publish_via_partition_root = true), which outboxrelay then uses as it is")
		default:
			tr.note("publish.via.partition.root", Unsupported, "%q is not true or false", v)
		}
	}
}

// lsnFlushMode maps lsn.flush.mode (Debezium 3.4 and later), and
// flush.lsn.source, which it replaced (deprecated in 3.4, read only when
// lsn.flush.mode is unset: PostgresConnectorConfig.resolveLsnFlushMode).
func (tr *translator) lsnFlushMode() {
	mode, hasMode := tr.get("lsn.flush.mode")
	old, hasOld := tr.get("flush.lsn.source")
	mode = strings.ToLower(strings.TrimSpace(mode))
	switch {
	case hasMode && hasOld:
		tr.note("flush.lsn.source", Info, "ignored, as Debezium 3.4 and later ignore it beside lsn.flush.mode")
	case hasOld:
		switch strings.ToLower(strings.TrimSpace(old)) {
		case "true":
			mode = "connector"
		case "false":
			mode = "manual"
		default:
			tr.note("flush.lsn.source", Unsupported, "%q is not true or false", old)
			return
		}
		tr.note("flush.lsn.source", Info, "deprecated in Debezium 3.4 for lsn.flush.mode; read as lsn.flush.mode=%s", mode)
	case !hasMode:
		return
	}
	key := "lsn.flush.mode"
	if !hasMode {
		key = "flush.lsn.source"
	}
	switch mode {
	case "connector", "connector_and_driver":
		tr.note(key, Info, "%s: outboxrelay confirms the slot up to what Kafka acknowledged and, while nothing is in flight, up to the server's position from its keepalives, as connector_and_driver does (Debezium 3.4 and later), so an idle outbox holds back no WAL", mode)
	case "manual":
		tr.note(key, Warning, "manual: outboxrelay always confirms the slot up to what Kafka acknowledged; whatever flushed it instead must stop")
	default:
		tr.note(key, Unsupported, "%q is not connector, manual or connector_and_driver", mode)
	}
}

// offsetMismatch maps offset.mismatch.strategy (Debezium 3.4 and later)
// and internal.slot.seek.to.known.offset.on.start, which it replaced:
// what the connector does when its stored offset and the slot disagree.
func (tr *translator) offsetMismatch() {
	const text = "outboxrelay streams from the slot's confirmed position, and compares it with its checkpoint in Kafka at every start, which tells a lost or recreated slot (docs/checkpoint.md)"
	if v, ok := tr.get("offset.mismatch.strategy"); ok {
		switch s := strings.ToLower(strings.TrimSpace(v)); s {
		case "no_validation", "trust_offset", "trust_slot", "trust_greater_lsn":
			tr.note("offset.mismatch.strategy", Info, "%s (Debezium 3.4 and later): %s", s, text)
		default:
			tr.note("offset.mismatch.strategy", Unsupported, "%q is not no_validation, trust_offset, trust_slot or trust_greater_lsn", v)
		}
	}
	if _, ok := tr.get("internal.slot.seek.to.known.offset.on.start"); ok {
		tr.note("internal.slot.seek.to.known.offset.on.start", Info, "deprecated in Debezium 3.4 for offset.mismatch.strategy: %s", text)
	}
}
