package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The markers a page puts on the line before a ```yaml fence (blank lines
// may come between) to say how TestDocsYAMLExamples treats the block.
const (
	// partialMarker: the block is part of a configuration. It is loaded
	// over docsBase, as the relay layers a file over a base.
	partialMarker = "<!-- partial -->"
	// notConfigPrefix: the block is not a relay configuration (a
	// Kubernetes manifest, a compose file); the comment must say what it
	// is, e.g. <!-- not-config: a Kubernetes Deployment -->.
	notConfigPrefix = "<!-- not-config:"
)

// docsBase is the least a configuration needs, under a partial example.
const docsBase = `postgres:
  url: postgres://relay@db:5432/app
kafka:
  brokers: [kafka:9092]
`

// docsYAMLBlock is one ```yaml block of a page.
type docsYAMLBlock struct {
	file   string
	line   int // of the opening fence
	marker string
	text   string
}

// TestDocsYAMLExamples loads every ```yaml block of README.md and docs/
// with the relay's own loader and validation, so an example a user copies
// cannot hold a key that is gone, a misspelt one or a value the relay
// refuses.
func TestDocsYAMLExamples(t *testing.T) {
	files, err := filepath.Glob("../../../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../../../README.md"}, files...)
	var blocks []docsYAMLBlock
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, yamlBlocks(strings.TrimPrefix(f, "../../../../"), string(data))...)
	}
	checked := 0
	for _, b := range blocks {
		where := fmt.Sprintf("%s:%d", b.file, b.line)
		t.Run(where, func(t *testing.T) {
			var base []byte
			switch {
			case b.marker == partialMarker:
				base = []byte(docsBase)
			case strings.HasPrefix(b.marker, notConfigPrefix):
				reason := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(b.marker, notConfigPrefix), "-->"))
				if reason == "" {
					t.Fatalf("%s: %s says the block is not a relay configuration but not what it is; write <!-- not-config: what it is -->", where, b.marker)
				}
				t.Skipf("not a relay configuration: %s", reason)
			}
			path := filepath.Join(t.TempDir(), "example.yaml")
			if err := os.WriteFile(path, []byte(withExampleFiles(t, b.text)), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := load(base, path, nil, true); err != nil {
				t.Errorf("%s: the ```yaml example does not load: %v\n"+
					"Fix the example. If it is meant as part of a configuration, put %s on the line before its fence (it is then loaded over postgres.url and kafka.brokers); "+
					"if it is not a relay configuration at all, put <!-- not-config: what it is --> there.\n%s", where, err, partialMarker, b.text)
			}
		})
		checked++
	}
	if checked == 0 {
		t.Fatal("found no ```yaml block in README.md or docs/*.md; is the test reading the right files?")
	}
}

// fileRef matches the places an example names a file that the loader or
// the validation reads: the *_file keys and the TLS parameters of a
// PostgreSQL URL.
var fileRef = regexp.MustCompile(`(?m)(^\s*(url_file|password_file|ca_file|cert_file|key_file):\s*|[?&](sslrootcert|sslcert|sslkey)=)([^\s&#]+)`)

// withExampleFiles points each file an example names (a path like
// /var/run/secrets/... or /etc/outboxrelay/ca.pem, which does not exist
// here) at a temporary file with stand-in content of the right kind: a
// secret, a connection URL, a certificate or its key. The loader then reads
// and checks it as it would the real one.
func withExampleFiles(t *testing.T, text string) string {
	t.Helper()
	certPEM, keyPEM := standInCertificate(t)
	dir := t.TempDir()
	n := 0
	return fileRef.ReplaceAllStringFunc(text, func(ref string) string {
		m := fileRef.FindStringSubmatch(ref)
		var content []byte
		switch m[2] + m[3] {
		case "password_file":
			content = []byte("stand-in-secret\n")
		case "url_file":
			content = []byte("postgres://relay@db:5432/app\n")
		case "ca_file", "cert_file", "sslrootcert", "sslcert":
			content = certPEM
		case "key_file", "sslkey":
			content = keyPEM
		}
		n++
		p := filepath.Join(dir, fmt.Sprintf("file%d", n))
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return m[1] + p
	})
}

// standInCertificate is a self-signed certificate and its key, in PEM.
func standInCertificate(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "outboxrelay docs example"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// yamlBlocks finds the ```yaml (or ```yml) fences of a Markdown page, each
// with the HTML comment on the last non-blank line before it, if any.
func yamlBlocks(file, page string) []docsYAMLBlock {
	var blocks []docsYAMLBlock
	lines := strings.Split(page, "\n")
	prev := "" // the last non-blank line outside a fence
	for i := 0; i < len(lines); i++ {
		fence, info, ok := openingFence(lines[i])
		if !ok {
			if s := strings.TrimSpace(lines[i]); s != "" {
				prev = s
			}
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && !closesFence(lines[i], fence); i++ {
			body = append(body, lines[i])
		}
		if lang := strings.Fields(info + " "); len(lang) > 0 && (lang[0] == "yaml" || lang[0] == "yml") {
			marker := ""
			if strings.HasPrefix(prev, "<!--") {
				marker = prev
			}
			blocks = append(blocks, docsYAMLBlock{file: file, line: start + 1, marker: marker, text: strings.Join(body, "\n") + "\n"})
		}
		prev = ""
	}
	return blocks
}

// openingFence reports whether line opens a fenced code block, with its
// fence (``` or ~~~, three or more) and info string.
func openingFence(line string) (fence, info string, ok bool) {
	s := strings.TrimLeft(line, " ")
	if len(line)-len(s) > 3 {
		return "", "", false
	}
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(s) && s[n] == c {
			n++
		}
		if n >= 3 {
			return s[:n], strings.TrimSpace(s[n:]), true
		}
	}
	return "", "", false
}

// closesFence reports whether line closes a block opened with fence: the
// same character, at least as many, nothing after.
func closesFence(line, fence string) bool {
	s := strings.TrimSpace(line)
	return len(s) >= len(fence) && strings.Trim(s, fence[:1]) == ""
}
