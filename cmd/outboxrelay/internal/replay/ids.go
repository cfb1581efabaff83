package replay

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"strings"
)

// idList hands out the ids a selection gives, those of the command line
// then those of the file, a chunk at a time, so that a file of millions
// of ids is never held whole: a chunk is read, published, and its place
// saved. Within a chunk rows go in commit order; chunks go in the order
// of the file. The digest of the ids tells a resumed replay that the file
// is still the one it started with.
type idList struct {
	given []string
	path  string
	f     *os.File
	sc    *bufio.Scanner
	line  int
	sum   hash.Hash
}

func openIDs(sel Selection) (*idList, error) {
	l := &idList{given: sel.IDs, path: sel.IDsFile, sum: sha256.New()}
	if sel.IDsFile != "" {
		f, err := os.Open(sel.IDsFile)
		if err != nil {
			return nil, fmt.Errorf("--ids-file: %w", err)
		}
		l.f, l.sc = f, bufio.NewScanner(f)
		l.sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	}
	return l, nil
}

// next returns up to n more ids; none at the end. Blank lines and lines
// starting with # are skipped; spaces around an id are not part of it.
func (l *idList) next(n int) ([]string, error) {
	var out []string
	for len(out) < n && len(l.given) > 0 {
		out = append(out, l.add(l.given[0]))
		l.given = l.given[1:]
	}
	for l.sc != nil && len(out) < n && l.sc.Scan() {
		l.line++
		id := strings.TrimSpace(l.sc.Text())
		if id == "" || strings.HasPrefix(id, "#") {
			continue
		}
		out = append(out, l.add(id))
	}
	if l.sc != nil {
		if err := l.sc.Err(); err != nil {
			return nil, fmt.Errorf("--ids-file %s, line %d: %w", l.path, l.line+1, err)
		}
	}
	return out, nil
}

func (l *idList) add(id string) string {
	l.sum.Write([]byte(id))
	l.sum.Write([]byte{'\n'})
	return id
}

// skip passes over the first n ids, those a stopped replay had done.
func (l *idList) skip(n int64) error {
	for n > 0 {
		chunk, err := l.next(int(min(n, 10000)))
		if err != nil {
			return err
		}
		if len(chunk) == 0 {
			return fmt.Errorf("the ids end after fewer than the %d the replay had done: --ids-file %s changed since it started", n, l.path)
		}
		n -= int64(len(chunk))
	}
	return nil
}

// digest is the SHA-256 of the ids handed out so far.
func (l *idList) digest() string { return hex.EncodeToString(l.sum.Sum(nil)) }

func (l *idList) Close() {
	if l.f != nil {
		l.f.Close()
	}
}
