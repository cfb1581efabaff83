package debezium

import (
	"net"
	"net/url"
)

// postgresURL builds postgres.url from database.*.
func (tr *translator) postgresURL() {
	host, okHost := tr.get("database.hostname")
	port, ok := tr.get("database.port")
	if !ok {
		port = "5432"
	}
	user, _ := tr.get("database.user")
	password, hasPassword := tr.get("database.password")
	db, okDB := tr.get("database.dbname")
	if !okHost || !okDB {
		tr.note("database.hostname", Warning, "database.hostname and database.dbname are needed for postgres.url; set OUTBOXRELAY_POSTGRES_URL instead")
		return
	}
	u := &url.URL{Scheme: "postgres", Host: net.JoinHostPort(host, port), Path: "/" + db}
	if user != "" {
		u.User = url.User(user)
	}
	q := url.Values{}
	for _, k := range []string{"sslmode", "sslrootcert", "sslcert", "sslkey"} {
		if v, ok := tr.get("database." + k); ok {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	tr.set("postgres.url", u.String())
	if hasPassword {
		tr.t.password = password
		tr.note("database.password", Info, "used by run --debezium-config; `debezium translate` leaves it out of postgres.url (set PGPASSWORD, a ~/.pgpass entry, or OUTBOXRELAY_POSTGRES_URL)")
	}
	// The client key's passphrase is a secret as the password is.
	if v, ok := tr.get("database.sslpassword"); ok && v != "" {
		tr.t.sslPassword = v
		tr.note("database.sslpassword", Info, "used by run --debezium-config; `debezium translate` leaves it out of postgres.url (set PGSSLPASSWORD, or OUTBOXRELAY_POSTGRES_URL with sslpassword=...)")
	}
}

// withSecrets is postgres.url raw with the password and sslpassword the
// translation keeps out of the YAML it shows (database.password,
// database.sslpassword) put back in.
func (t *Translation) withSecrets(raw string) (string, error) {
	if t.password == "" && t.sslPassword == "" {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if t.password != "" {
		u.User = url.UserPassword(u.User.Username(), t.password)
	}
	if t.sslPassword != "" {
		q := u.Query()
		q.Set("sslpassword", t.sslPassword)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}
