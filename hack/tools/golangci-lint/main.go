// Command golangci-lint is golangci-lint v2 with the kube-api-linter module
// plugin (sigs.k8s.io/kube-api-linter, linter name "kubeapilinter") compiled
// in. `make lint` builds it into bin/golangci-lint-<version>; .golangci.yml at
// the repository root configures it.
//
// `golangci-lint custom` would produce the same binary, but it git-clones
// golangci-lint at build time. This package instead gets golangci-lint and the
// plugin as ordinary Go modules, pinned in this directory's go.mod and go.sum,
// and does what golangci-lint's own cmd/golangci-lint does: fill in a
// commands.BuildInfo and call commands.Execute.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"

	// Module plugins register themselves from an init function
	// (register.Plugin). The module's root package registers the
	// "kubeapilinter" plugin (pkg/plugin/base) and its default set of
	// analysers (pkg/registration); importing pkg/plugin/base alone would give
	// a plugin with no analysers.
	_ "sigs.k8s.io/kube-api-linter"
)

const golangciModule = "github.com/golangci/golangci-lint/v2"

// Upstream's release builds set these with -ldflags -X; they may still be set
// that way, but by default buildInfo takes them from the pinned module.
var (
	version = ""
	commit  = ""
	date    = ""
)

func main() {
	if err := commands.Execute(buildInfo()); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "The command is terminated due to an error: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}

// buildInfo reports the golangci-lint version this binary was built from. The
// main module here is this wrapper (version "(devel)"), so the version is
// that of the golangci-lint dependency pinned in go.mod, in the form upstream
// prints ("2.15.0", without the "v").
func buildInfo() commands.BuildInfo {
	info := commands.BuildInfo{
		GoVersion: "unknown",
		Version:   version,
		Commit:    commit,
		Date:      date,
	}

	bi, ok := debug.ReadBuildInfo()
	if ok {
		info.GoVersion = bi.GoVersion
		for _, dep := range bi.Deps {
			if dep.Path != golangciModule {
				continue
			}
			if dep.Replace != nil {
				dep = dep.Replace
			}
			if info.Version == "" {
				info.Version = strings.TrimPrefix(dep.Version, "v")
			}
			if info.Commit == "" {
				info.Commit = fmt.Sprintf("(module %s, mod sum: %q, with %s)", golangciModule, dep.Sum, pluginVersions(bi))
			}
		}
	}

	if info.Version == "" {
		info.Version = "unknown"
	}
	if info.Commit == "" {
		info.Commit = "?"
	}
	if info.Date == "" {
		info.Date = "(unknown)"
	}
	return info
}

// pluginVersions names the plugin modules compiled in, with their versions.
func pluginVersions(bi *debug.BuildInfo) string {
	for _, dep := range bi.Deps {
		if dep.Path == "sigs.k8s.io/kube-api-linter" {
			return dep.Path + "@" + dep.Version
		}
	}
	return "no plugins"
}
