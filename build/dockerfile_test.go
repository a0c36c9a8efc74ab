/*
Copyright 2026 The isochron Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package build holds the Dockerfiles of isochron's images. Its test checks them
// without a Docker engine: FROM scratch, a numeric non-root user, an exec-form
// entrypoint, and a COPY of exactly the static binary that `make docker-build`
// puts in the build context.
package build

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"isochron.io/isochron/internal/dockerfile"
)

// images names each image and its program: build/<name>.Dockerfile ships the
// static build of ./cmd/<name>, at /<name>.
var images = []string{"manager", "nic-agent", "rtprobe"}

// extraFiles are, per image, the files of bin/ it ships besides its program: the COPY
// that puts each where it belongs (after the program's), and who owns it there.
var extraFiles = map[string][]struct {
	src, dest string
	uid, gid  int
}{
	// The probe agent's disk, a containerDisk for KubeVirt: readable by qemu (107).
	"rtprobe": {{src: "agent.img", dest: "/disk/agent.img", uid: 107, gid: 107}},
}

// parse reads build/<file> with the reader make docker-push builds the images from
// (internal/dockerfile), which refuses what an image FROM scratch cannot hold: another
// base image, a RUN, SHELL or shell-form ENTRYPOINT or CMD (there is no shell), a second
// USER or ENTRYPOINT.
func parse(t *testing.T, file string) *dockerfile.Recipe {
	t.Helper()
	r, err := dockerfile.Parse(file, map[string]string{"VERSION": "v0.0.0-test"})
	if err != nil {
		t.Fatalf("%v: the images are FROM scratch, one static binary and its files, without a shell", err)
	}
	return r
}

// nonRootID reports whether id is a numeric user or group id other than root's.
func nonRootID(id string) bool {
	n, err := strconv.Atoi(id)
	return err == nil && n > 0
}

func TestDockerfiles(t *testing.T) {
	for _, name := range images {
		t.Run(name, func(t *testing.T) {
			file := name + ".Dockerfile"
			r := parse(t, file)

			// The static binary at the root, then the image's other files, nothing else.
			want := []dockerfile.Copy{{Src: name, Dest: "/" + name}}
			for _, f := range extraFiles[name] {
				want = append(want, dockerfile.Copy{Src: f.src, Dest: f.dest, UID: f.uid, GID: f.gid})
			}
			if diff := cmp.Diff(want, r.Copies); diff != "" {
				t.Errorf("%s: COPY instructions (-want +got):\n%s", file, diff)
			}

			// Exec form (Parse refuses another), so it runs without a shell, of the binary
			// just copied.
			if len(r.Entrypoint) == 0 || r.Entrypoint[0] != "/"+name {
				t.Errorf("%s: ENTRYPOINT %q, want [%q]", file, r.Entrypoint, "/"+name)
			}

			// uid:gid, both numeric (no /etc/passwd; runAsNonRoot checks only
			// numeric users) and neither root.
			uid, gid, ok := strings.Cut(r.User, ":")
			if !ok || !nonRootID(uid) || !nonRootID(gid) {
				t.Errorf("%s: USER %s, want numeric non-root uid:gid", file, r.User)
			}

			for _, key := range []string{"source", "title", "description", "licenses"} {
				if r.Labels["org.opencontainers.image."+key] == "" {
					t.Errorf("%s: no LABEL org.opencontainers.image.%s", file, key)
				}
			}
			if l := r.Labels["org.opencontainers.image.licenses"]; l != "Apache-2.0" {
				t.Errorf("%s: licenses %q, want Apache-2.0", file, l)
			}
		})
	}
}

// TestMakeDockerBuild checks, through `make -n docker-build`, that each image's
// build context holds only the binary that the same make run builds static from
// ./cmd/<name>, under the name its Dockerfile copies, and that the binary reports the
// version the image is tagged with.
func TestMakeDockerBuild(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	cmd := exec.Command("make", "--no-print-directory", "-n", "-C", "..", "docker-build", "GO=go", "DOCKER=docker")
	// Not the flags of a make this test may run under (make test-unit).
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=", "MFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n docker-build: %v\n%s", err, out)
	}
	var lines [][]string
	for _, line := range strings.Split(string(out), "\n") {
		lines = append(lines, strings.Fields(line))
	}
	// find returns the first command line that match accepts.
	find := func(t *testing.T, what string, match func(f []string) bool) []string {
		t.Helper()
		for _, f := range lines {
			if match(f) {
				return f
			}
		}
		t.Fatalf("make -n docker-build runs no %s:\n%s", what, out)
		return nil
	}
	// after returns the word after flag in f.
	after := func(f []string, flag string) string {
		i := slices.Index(f, flag)
		if i < 0 || i+1 >= len(f) {
			return ""
		}
		return f[i+1]
	}

	for _, name := range images {
		t.Run(name, func(t *testing.T) {
			pkg := "./cmd/" + name
			build := find(t, "go build of "+pkg, func(f []string) bool {
				return slices.Contains(f, "build") && slices.Contains(f, pkg) && path.Base(after(f, "-o")) == name
			})
			if !slices.Contains(build, "CGO_ENABLED=0") || !slices.Contains(build, "-trimpath") {
				t.Errorf("%s is not built static and -trimpath: %s", pkg, strings.Join(build, " "))
			}
			bin := after(build, "-o")

			cp := find(t, "copy of "+bin, func(f []string) bool {
				return len(f) == 3 && f[0] == "cp" && f[1] == bin && path.Base(f[2]) == name
			})
			context, copied := filepath.Split(cp[2])
			context = filepath.Clean(context)

			dockerfilePath := "build/" + name + ".Dockerfile"
			docker := find(t, "docker build -f "+dockerfilePath, func(f []string) bool {
				return slices.Contains(f, "docker") && after(f, "-f") == dockerfilePath
			})
			if got := docker[len(docker)-1]; got != context {
				t.Errorf("docker build -f %s uses context %s, want %s (where the binary is copied)", dockerfilePath, got, context)
			}
			// The binary reports the version the image is tagged with (internal/version).
			var reported string
			for _, w := range build {
				if v, ok := strings.CutPrefix(w, "isochron.io/isochron/internal/version.Version="); ok {
					reported = v
				}
			}
			if tag := after(docker, "-t"); reported == "" || !strings.HasSuffix(tag, ":"+reported) {
				t.Errorf("%s is built with -ldflags -X ...internal/version.Version=%q, but its image is tagged %s", pkg, reported, tag)
			}
			find(t, "emptying of the context "+context, func(f []string) bool {
				return len(f) == 3 && f[0] == "rm" && f[1] == "-rf" && f[2] == context
			})

			if src := parse(t, name+".Dockerfile").Copies[0].Src; src != copied {
				t.Errorf("%s copies %q first, but make puts %s in its context as %q", dockerfilePath, src, bin, copied)
			}
			// The other files come from bin/, where make build writes them.
			for _, f := range extraFiles[name] {
				find(t, "copy of "+f.src+" into "+context, func(l []string) bool {
					return len(l) >= 3 && l[0] == "cp" && filepath.Base(l[len(l)-2]) == f.src && l[len(l)-1] == filepath.Join(context, f.src)
				})
			}
		})
	}
}
