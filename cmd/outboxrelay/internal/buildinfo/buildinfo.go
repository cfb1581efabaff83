package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// DevVersion is the version of a build that records none: `go run`, `go
// test`, or a build outside a module's version control.
const DevVersion = "dev"

// Info describes one build.
type Info struct {
	// Version is the release set with -ldflags, else the main module's
	// version (a tag, or a pseudo-version go build derives from the
	// commit, +dirty when modified), else DevVersion.
	Version string
	// Revision is the commit the binary was built from, "" when unknown.
	Revision string
	// Time is the commit's time (RFC 3339), "" when unknown.
	Time string
	// Modified says the working tree had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary, e.g. go1.26.8.
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Read describes the running binary. override is the version set at link
// time (empty when none was).
func Read(override string) Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok, override)
}

// fromBuildInfo is Read for a given build info; ok false means none was
// recorded (a binary built without module support).
func fromBuildInfo(bi *debug.BuildInfo, ok bool, override string) Info {
	info := Info{Version: DevVersion, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if ok && bi != nil {
		// "(devel)" is what the toolchain records when it knows no
		// version; DevVersion says the same in outboxrelay's words.
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if override != "" {
		info.Version = override
	}
	return info
}

// String is what `outboxrelay version` prints: the version on the first
// line, which scripts may compare, then the revision, its time and the
// toolchain, a line each.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "outboxrelay %s\n", i.Version)
	rev, at := i.Revision, i.Time
	if rev == "" {
		rev = "unknown (built without version control information)"
	} else if i.Modified {
		rev += " (modified)"
	}
	if at == "" {
		at = "unknown"
	}
	fmt.Fprintf(&b, "revision: %s\n", rev)
	fmt.Fprintf(&b, "time:     %s\n", at)
	fmt.Fprintf(&b, "go:       %s %s\n", i.GoVersion, i.Platform)
	return b.String()
}
