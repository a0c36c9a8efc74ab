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
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// images names each image and its program: build/<name>.Dockerfile ships the
// static build of ./cmd/<name>, at /<name>.
var images = []string{"manager", "nic-agent", "rtprobe"}

// extraFiles are, per image, the files of bin/ it ships besides its program: the COPY
// that puts each where it belongs (after the program's), and who owns it there.
var extraFiles = map[string][]struct{ src, dest, chown string }{
	// The probe agent's disk, a containerDisk for KubeVirt: readable by qemu (107).
	"rtprobe": {{src: "agent.img", dest: "/disk/agent.img", chown: "107:107"}},
}

// instruction is one Dockerfile instruction: its keyword in upper case and the
// rest of its (continuation-joined) line.
type instruction struct {
	cmd, args string
}

// parseDockerfile reads the instructions of a Dockerfile: comments and blank
// lines dropped, lines ending in a backslash joined to the next.
func parseDockerfile(t *testing.T, name string) []instruction {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: ends in a line continuation", name)
	}
	return out
}

// only returns the arguments of the one instruction cmd, failing if there is
// not exactly one.
func only(t *testing.T, name string, ins []instruction, cmd string) string {
	t.Helper()
	var found []string
	for _, in := range ins {
		if in.cmd == cmd {
			found = append(found, in.args)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: want exactly one %s, got %q", name, cmd, found)
	}
	return found[0]
}

// labels parses the key="value" pairs of every LABEL instruction.
func labels(t *testing.T, name string, ins []instruction) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, in := range ins {
		if in.cmd != "LABEL" {
			continue
		}
		rest := in.args
		for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
			key, after, ok := strings.Cut(rest, `="`)
			end := strings.Index(after, `"`)
			if !ok || end < 0 || strings.ContainsAny(key, " \t") {
				t.Fatalf("%s: LABEL %q: want key=\"value\" pairs", name, in.args)
			}
			out[key] = after[:end]
			rest = after[end+1:]
		}
	}
	return out
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
			ins := parseDockerfile(t, file)

			// Nothing to pull: the only stage starts from the empty image.
			if from := only(t, file, ins, "FROM"); from != "scratch" {
				t.Errorf("%s: FROM %s, want FROM scratch (no registry to pull a base image from)", file, from)
			}
			// No shell in a scratch image, so nothing may need one.
			for _, in := range ins {
				if in.cmd == "RUN" || in.cmd == "SHELL" || in.cmd == "CMD" && !strings.HasPrefix(in.args, "[") {
					t.Errorf("%s: %s %s needs a shell, which FROM scratch has not", file, in.cmd, in.args)
				}
			}

			// The static binary at the root, then the image's other files, nothing else.
			want := [][]string{{name, "/" + name}}
			for _, f := range extraFiles[name] {
				want = append(want, []string{"--chown=" + f.chown, f.src, f.dest})
			}
			var copies [][]string
			for _, in := range ins {
				if in.cmd == "COPY" {
					copies = append(copies, strings.Fields(in.args))
				}
			}
			if diff := cmp.Diff(want, copies); diff != "" {
				t.Errorf("%s: COPY instructions (-want +got):\n%s", file, diff)
			}

			// Exec form, so it runs without a shell, of the binary just copied.
			var entrypoint []string
			if err := json.Unmarshal([]byte(only(t, file, ins, "ENTRYPOINT")), &entrypoint); err != nil {
				t.Errorf("%s: ENTRYPOINT is not exec form (a JSON array): %v", file, err)
			} else if len(entrypoint) == 0 || entrypoint[0] != "/"+name {
				t.Errorf("%s: ENTRYPOINT %q, want [%q]", file, entrypoint, "/"+name)
			}

			// uid:gid, both numeric (no /etc/passwd; runAsNonRoot checks only
			// numeric users) and neither root.
			user := only(t, file, ins, "USER")
			uid, gid, ok := strings.Cut(user, ":")
			if !ok || !nonRootID(uid) || !nonRootID(gid) {
				t.Errorf("%s: USER %s, want numeric non-root uid:gid", file, user)
			}

			got := labels(t, file, ins)
			for _, key := range []string{"source", "title", "description", "licenses"} {
				if got["org.opencontainers.image."+key] == "" {
					t.Errorf("%s: no LABEL org.opencontainers.image.%s", file, key)
				}
			}
			if l := got["org.opencontainers.image.licenses"]; l != "Apache-2.0" {
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

			dockerfile := "build/" + name + ".Dockerfile"
			docker := find(t, "docker build -f "+dockerfile, func(f []string) bool {
				return slices.Contains(f, "docker") && after(f, "-f") == dockerfile
			})
			if got := docker[len(docker)-1]; got != context {
				t.Errorf("docker build -f %s uses context %s, want %s (where the binary is copied)", dockerfile, got, context)
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

			ins := parseDockerfile(t, name+".Dockerfile")
			var firstCopy string
			for _, in := range ins {
				if in.cmd == "COPY" && firstCopy == "" {
					firstCopy = in.args
				}
			}
			if src := strings.Fields(firstCopy); len(src) == 0 || src[0] != copied {
				t.Errorf("%s copies %q first, but make puts %s in its context as %q", dockerfile, src, bin, copied)
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
