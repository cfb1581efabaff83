package localpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// BinDirEnv names the environment variable that, when set, is the directory
// holding initdb and postgres. It wins over every other place.
const BinDirEnv = "OUTBOXRELAY_PG_BIN"

// minMajorVersion is the oldest PostgreSQL this project supports: pgoutput
// streaming of large transactions and DROP DATABASE ... WITH (FORCE) need 13.
const minMajorVersion = 13

// ErrNotInstalled is returned (wrapped) by Start when no usable PostgreSQL
// server binaries are found. Callers such as test helpers branch on it to tell
// the user what to install.
var ErrNotInstalled = errors.New("no PostgreSQL server binaries found: " +
	"install PostgreSQL 13 or newer, e.g. `apt-get install postgresql` on Debian/Ubuntu, " +
	"or set " + BinDirEnv + " to the directory holding initdb")

// debianBinGlob is where Debian and Ubuntu install one directory per major
// version; none of it is on PATH.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// findBinDir returns the directory holding initdb and postgres, searched in
// the order documented on the package; // want is the major MajorEnv asks for, 0 if any will do.
func findBinDir(ctx context.Context) (dir string, want int, err error) {
	if want, err = requestedMajor(); err != nil {
		return "", 0, err
	}
	if dir := os.Getenv(BinDirEnv); dir != "" {
		if !hasServerBinaries(dir) {
			return "", 0, fmt.Errorf("%s=%q has no initdb and postgres executables: %w", BinDirEnv, dir, ErrNotInstalled)
		}
		return dir, want, nil
	}
	if want != 0 {
		dir, err := majorBinDir(want)
		return dir, want, err
	}
	dir, err = findAnyBinDir(ctx)
	return dir, 0, err
}

// findAnyBinDir returns the directory holding initdb and postgres when no
// major is asked for.
func findAnyBinDir(ctx context.Context) (string, error) {

	// Debian ships a pg_config wrapper with libpq-dev alone, whose bindir
	// (/usr/bin) has no initdb: check the answer instead of trusting it.
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
		cancel()
		if dir := strings.TrimSpace(string(out)); err == nil && hasServerBinaries(dir) {
			return dir, nil
		}
	}

	if dir := highestDebianBinDir(); dir != "" {
		return dir, nil
	}

	if initdb, err := exec.LookPath("initdb"); err == nil {
		// Resolve symlinks such as /usr/local/bin/initdb so that postgres is
		// looked for next to the real initdb.
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			initdb = real
		}
		if dir := filepath.Dir(initdb); hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", ErrNotInstalled
}

// highestDebianBinDir returns the bin directory of the highest major version
// under /usr/lib/postgresql, or "" when there is none.
func highestDebianBinDir() string {
	dirs, _ := filepath.Glob(debianBinGlob)
	best, bestVersion := "", -1
	for _, dir := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		if err != nil || v <= bestVersion || !hasServerBinaries(dir) {
			continue
		}
		best, bestVersion = dir, v
	}
	return best
}

func hasServerBinaries(dir string) bool {
	return isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres"))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// versionPattern matches the output of `postgres --version`, for example
// "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)" or "... 17beta1".
var versionPattern = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// checkVersion rejects servers older than minMajorVersion, so that a test
// fails with "install a newer PostgreSQL" rather than a puzzling SQL error.
func checkVersion(ctx context.Context, binDir string) (major int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	bin := filepath.Join(binDir, "postgres")
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("run %s --version: %w", bin, err)
	}
	m := versionPattern.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("parse version of %s from %q", bin, strings.TrimSpace(string(out)))
	}
	major, _ = strconv.Atoi(string(m[1]))
	if major < minMajorVersion {
		return major, fmt.Errorf("%s is PostgreSQL %d, older than %d: %w", bin, major, minMajorVersion, ErrNotInstalled)
	}
	return major, nil
}
