package secret

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRedact is the one rule on every form a connection string or URL
// takes: want is the exact output, and none of secrets may survive.
func TestRedact(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		secrets        []string
	}{
		{"URL user info", "postgres://relay:SEKRET@db:5432/app", "postgres://relay:xxxxx@db:5432/app", []string{"SEKRET"}},
		{"URL sslpassword", "postgres://relay@db/app?sslmode=require&sslpassword=SEKRET1&application_name=x", "postgres://relay@db/app?sslmode=require&sslpassword=xxxxx&application_name=x", []string{"SEKRET1"}},
		{"URL password parameter", "postgresql://db/app?password=SEKRET", "postgresql://db/app?password=xxxxx", []string{"SEKRET"}},
		{"URL both and a user password", "postgres://u:PW1@db/app?password=PW2&sslpassword=PW3", "postgres://u:xxxxx@db/app?password=xxxxx&sslpassword=xxxxx", []string{"PW1", "PW2", "PW3"}},
		{"percent-encoded key", "postgres://db/app?ssl%70assword=SEKRET", "postgres://db/app?ssl%70assword=xxxxx", []string{"SEKRET"}},
		{"percent-encoded password", "https://reg:a!b%40c@registry:8081", "https://reg:xxxxx@registry:8081", []string{"a!b", "%40c"}},
		{"key in another case", "postgres://db/app?SSLPassword=SEKRET", "postgres://db/app?SSLPassword=xxxxx", []string{"SEKRET"}},
		{"# in a query value", "postgres://db/app?sslpassword=SE#KRET&x=1", "postgres://db/app?sslpassword=xxxxx&x=1", []string{"SE", "KRET"}},
		{"unparsable URL, bad escape", "https://reg:SEKRET2%zz@registry:8081", "https://reg:xxxxx@registry:8081", []string{"SEKRET2"}},
		{"unparsable URL, space", "postgres://relay:hun ter2@db/app?sslpassword=x y", "postgres://relay:xxxxx@db/app?sslpassword=xxxxx", []string{"hun", "ter2", "x y"}},
		{"unescaped / in the password", "postgres://u:12/se@db/app", "postgres://u:xxxxx@db/app", []string{"12/se", "/se"}},
		{"unescaped ? in the password", "postgres://u:12?se@db/app", "postgres://u:xxxxx@db/app", []string{"se"}},
		{"unescaped @ in the password", "postgres://u:p@ss@db/app", "postgres://u:xxxxx@db/app", []string{"p@ss"}},
		{"@ in a query value is data", "postgres://u@db:5432/app?application_name=me@here", "postgres://u@db:5432/app?application_name=me@here", nil},
		{"no secret", "postgres://relay@db:5432/app?sslmode=verify-full", "postgres://relay@db:5432/app?sslmode=verify-full", nil},
		{"user without a password", "https://reg@registry:8081", "https://reg@registry:8081", nil},
		{"no scheme, user info", "reg:SEKRET@registry:8081", "reg:xxxxx@registry:8081", []string{"SEKRET"}},
		{"host and port alone", "registry:8081", "registry:8081", nil},
		{"keyword/value", "host=db user=relay password=SEKRET dbname=app", "host=db user=relay password=xxxxx dbname=app", []string{"SEKRET"}},
		{"keyword/value sslpassword", "host=db sslpassword=SEKRET1 sslmode=require", "host=db sslpassword=xxxxx sslmode=require", []string{"SEKRET1"}},
		{"quoted value with spaces", "host=db sslpassword='SEK RET1' password = 'P W' dbname=app", "host=db sslpassword=xxxxx password = xxxxx dbname=app", []string{"SEK", "RET1", "P W"}},
		{"quoted value with escapes", `host=db password='Q\'Z c' user=u`, "host=db password=xxxxx user=u", []string{"Q", "Z c"}},
		{"unquoted value with an escaped space", `password=Q\ Z host=db`, "password=xxxxx host=db", []string{"Q", " Z"}},
		{"empty value takes the next word, as libpq", "password= host=db", "password= xxxxx", []string{"host=db"}},
		{"unterminated quote", "host=db password='SEK RET", "host=db password=xxxxx", []string{"SEK", "RET"}},
		{"unreadable before the secret", "host=db bogus sslpassword=SEKRET1", "host=db bogus sslpassword=xxxxx", []string{"SEKRET1"}},
		{"keyword/value without secrets", "host=db user=relay", "host=db user=relay", nil},
		{"empty", "", "", nil},
		// Cases of the redaction this rule replaced (config, pgsql).
		{"escaped quote in a quoted value", `host=h password='hun ter\'2' dbname=d`, "host=h password=xxxxx dbname=d", []string{"hun", "ter"}},
		{"spaces around =", "password = hunter2", "password = xxxxx", []string{"hunter2"}},
		{"quotes in a URL's password", `postgres://u:p'r\d "x"@h/db`, "postgres://u:xxxxx@h/db", []string{"p'r", `"x"`}},
		{"@ in a URL's password and a password parameter", "postgres://u:a@b@h/db?sslmode=disable&password=x", "postgres://u:xxxxx@h/db?sslmode=disable&password=xxxxx", []string{"a@b"}},
		{"space in a URL's password and parameter", "postgres://u:p%20w@h/db?password=x y&sslmode=disable", "postgres://u:xxxxx@h/db?password=xxxxx&sslmode=disable", []string{"p%20w", "x y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Redact(tc.in)
			if got != tc.want {
				t.Errorf("Redact(%q)\n = %q\nwant %q", tc.in, got, tc.want)
			}
			for _, s := range tc.secrets {
				if strings.Contains(got, s) {
					t.Errorf("Redact(%q) = %q shows %q", tc.in, got, s)
				}
			}
		})
	}
}

// TestValues finds each secret as the driver reads it, for the log
// scrubber, which sees values in the forms libraries print.
func TestValues(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"URL", "postgres://u:p%40ss@db/app?sslpassword=S%20K", []string{"p%40ss", "p@ss", "S%20K", "S K", "S+K"}},
		{"keyword/value", `host=db password='it\'s' sslpassword=a\ b`, []string{"'it\\'s'", "it's", "a\\ b", "a b"}},
		{"none", "host=db", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Values(tc.in)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("Values(%q) = %q, want it to hold %q", tc.in, got, w)
				}
			}
			if tc.want == nil && len(got) > 0 {
				t.Errorf("Values(%q) = %q, want none", tc.in, got)
			}
		})
	}
}

// TestRedactError keeps what is wrong and drops the secrets from errors
// that quote a URL or a connection string, however deeply wrapped.
func TestRedactError(t *testing.T) {
	_, urlErr := url.Parse("https://reg:SEKRET2%zz@registry:8081")
	_, pgURLErr := pgconn.ParseConfig("postgres://relay:SEKRET@db:99999/app?sslpassword=SEKRET1")
	_, pgKVErr := pgconn.ParseConfig("host=db port=99999 password='SEK`: RET' sslpassword=SEKRET1")
	plain := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		err     error
		want    string
		secrets []string
	}{
		{"url.Parse", urlErr, `parse "https://reg:xxxxx@registry:8081": invalid URL escape "%zz"`, []string{"SEKRET2"}},
		{"url.Parse wrapped", fmt.Errorf("schema_registry.url: %w", urlErr), `schema_registry.url: parse "https://reg:xxxxx@registry:8081"`, []string{"SEKRET2"}},
		{"url.Parse joined", errors.Join(plain, fmt.Errorf("x: %w", urlErr)), "connection refused\nx: parse", []string{"SEKRET2"}},
		{"pgconn URL", fmt.Errorf("postgres.url: %w", pgURLErr), "postgres.url: cannot parse the connection string: invalid port", []string{"SEKRET", "db:"}},
		{"pgconn keyword/value", pgKVErr, "cannot parse the connection string: invalid port", []string{"SEK", "RET"}},
		{"nothing to hide", plain, "connection refused", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error to redact")
			}
			got := RedactError(tc.err).Error()
			if !strings.Contains(got, tc.want) {
				t.Errorf("RedactError = %q, want it to say %q", got, tc.want)
			}
			for _, s := range tc.secrets {
				if strings.Contains(got, s) {
					t.Errorf("RedactError = %q shows %q", got, s)
				}
			}
		})
	}
	if RedactError(plain) != plain {
		t.Error("an error with nothing to hide is not returned as it is")
	}
	var ue *url.Error
	if errors.As(RedactError(fmt.Errorf("x: %w", urlErr)), &ue) {
		t.Error("the redacted error still leads to the url.Error, which prints the password")
	}
}
