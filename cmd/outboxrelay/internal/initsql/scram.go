package initsql

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// scramIterations is PostgreSQL's default (scram_iterations).
const scramIterations = 4096

// ScramVerifier returns the SCRAM-SHA-256 verifier PostgreSQL stores for
// password (RFC 5802 and 7677, in PostgreSQL's format), as psql's
// \password computes it: ALTER ROLE ... PASSWORD '<verifier>' sets the
// password without the password itself reaching the server, its logs or
// pg_stat_statements.
//
// PostgreSQL normalises a password with SASLprep before hashing it, which
// changes only non-ASCII text; to stay exact without implementing SASLprep,
// only printable ASCII passwords are accepted.
func ScramVerifier(password string) (string, error) {
	if password == "" {
		return "", errors.New("the password is empty")
	}
	for _, r := range password {
		if r < 0x20 || r > 0x7e {
			return "", errors.New("the password has characters outside printable ASCII; set it yourself with psql's \\password")
		}
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	return scramVerifier(password, salt, scramIterations)
}

func scramVerifier(password string, salt []byte, iter int) (string, error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iter, sha256.Size)
	if err != nil {
		return "", err
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iter, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
