package debezium

// Mapped returns the options a translation used.
func Mapped(t *Translation) []string { return t.mapped }
