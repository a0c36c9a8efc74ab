package version

import (
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolve(t *testing.T) {
	const commit = "0c0f4edab4280c0f4edab4280c0f4edab4280c0f"
	byMake := Info{Version: "v0.1.0-g0c0f4edab428", Commit: commit, Date: "2026-05-04T10:00:00Z", GoVersion: "go1.26.8"}
	goBuild := &debug.BuildInfo{
		Main:     debug.Module{Path: "isochron.io/isochron", Version: "v0.0.0-20260504100000-0c0f4edab428+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1111111111111111111111111111111111111111"}, {Key: "vcs.modified", Value: "true"}},
	}
	tests := map[string]struct {
		set  Info
		bi   *debug.BuildInfo
		want Info
	}{
		"make's -ldflags win over Go's stamp": {set: byMake, bi: goBuild, want: byMake},
		"go build: Go's stamp of the module and commit": {
			set:  Info{GoVersion: "go1.26.8"},
			bi:   goBuild,
			want: Info{Version: "v0.0.0-20260504100000-0c0f4edab428+dirty", Commit: "1111111111111111111111111111111111111111", Date: unknown, GoVersion: "go1.26.8"},
		},
		"go build outside git: unknown": {
			set:  Info{GoVersion: "go1.26.8"},
			bi:   &debug.BuildInfo{Main: debug.Module{Path: "isochron.io/isochron", Version: "(devel)"}},
			want: Info{Version: unknown, Commit: unknown, Date: unknown, GoVersion: "go1.26.8"},
		},
		"no build information": {set: Info{}, want: Info{Version: unknown, Commit: unknown, Date: unknown, GoVersion: unknown}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, resolve(tc.set, tc.bi)); diff != "" {
				t.Errorf("resolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestString(t *testing.T) {
	i := Info{Version: "v0.1.0", Commit: "0c0f4edab428", Date: "2026-05-04T10:00:00Z", GoVersion: "go1.26.8"}
	if got, want := i.String(), "v0.1.0 (commit 0c0f4edab428, built 2026-05-04T10:00:00Z, go1.26.8)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
