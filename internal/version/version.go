// Package version is what each isochron binary reports of its build: the version, the
// commit and the build date, which `make build` sets with -ldflags -X (GO_LDFLAGS in
// the Makefile, the same for the images), and the Go version.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by -ldflags -X isochron.io/isochron/internal/version.<name>=<value>.
var (
	// Version is the Makefile's VERSION: the release (v0.1.0) on a clean checkout of its
	// tag, else the release, the commit and whether the tree was modified
	// (v0.1.0-g0c0f4edab428-dirty).
	Version string
	// Commit is the full hash of the commit built.
	Commit string
	// Date is when the binary was built, in RFC 3339 (UTC).
	Date string
)

// unknown stands for what neither -ldflags nor Go's build information says.
const unknown = "unknown"

// Info is one binary's build.
type Info struct {
	Version   string
	Commit    string
	Date      string
	GoVersion string
}

// Get is this binary's build. A binary built without the Makefile's -ldflags (go build,
// go run, the tests' builds) reports the version and commit Go stamps from git.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(Info{Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version()}, bi)
}

// resolve fills what -ldflags left empty in set from Go's build information bi (nil
// when there is none): the main module's version and the vcs.revision; unknown where
// neither says.
func resolve(set Info, bi *debug.BuildInfo) Info {
	if bi != nil {
		if set.Version == "" && bi.Main.Version != "(devel)" {
			set.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && set.Commit == "" {
				set.Commit = s.Value
			}
		}
	}
	for _, v := range []*string{&set.Version, &set.Commit, &set.Date, &set.GoVersion} {
		if *v == "" {
			*v = unknown
		}
	}
	return set
}

// String is the build in one line: v0.1.0 (commit 0c0f4edab428..., built
// 2026-05-04T10:00:00Z, go1.26.8).
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, i.Commit, i.Date, i.GoVersion)
}

// KeysAndValues are the build as the key/value pairs of a structured log line.
func (i Info) KeysAndValues() []any {
	return []any{"version", i.Version, "commit", i.Commit, "buildDate", i.Date, "goVersion", i.GoVersion}
}
