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

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
)

// recipe is what a Dockerfile FROM scratch says of its image: the files it copies from
// the build context, and the image's configuration.
type recipe struct {
	copies     []copyFile
	labels     map[string]string
	user       string
	entrypoint []string
	cmd        []string
}

// copyFile is one COPY: src in the build context, dest in the image, owned by uid:gid.
type copyFile struct {
	src, dest string
	uid, gid  int
}

// parseDockerfile reads the Dockerfiles of build/, which hold only what an image FROM
// scratch needs (build/dockerfile_test.go checks them): FROM scratch, ARG, LABEL
// key="value" pairs, COPY [--chown=UID:GID] SRC DEST, USER, ENTRYPOINT and CMD in exec
// form. Anything else is an error, so that this build and `docker build` cannot differ
// silently. args are the values of the ARGs (${NAME} in LABEL values).
func parseDockerfile(file string, args map[string]string) (*recipe, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	r := &recipe{labels: map[string]string{}}
	var line strings.Builder
	from := false
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(l, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(l)
		cmd, rest, _ := strings.Cut(line.String(), " ")
		line.Reset()
		rest = strings.TrimSpace(rest)
		if err := r.apply(strings.ToUpper(cmd), rest, args, &from); err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", file, cmd, rest, err)
		}
	}
	if line.Len() > 0 {
		return nil, fmt.Errorf("%s: ends in a line continuation", file)
	}
	if !from || len(r.copies) == 0 || len(r.entrypoint) == 0 {
		return nil, fmt.Errorf("%s: want FROM scratch, a COPY and an ENTRYPOINT", file)
	}
	return r, nil
}

func (r *recipe) apply(cmd, rest string, args map[string]string, from *bool) error {
	switch cmd {
	case "FROM":
		if rest != "scratch" || *from {
			return fmt.Errorf("only one stage, FROM scratch, is supported")
		}
		*from = true
	case "ARG":
		if _, ok := args[rest]; !ok {
			return fmt.Errorf("no value given for ARG %s", rest)
		}
	case "LABEL":
		for rest != "" {
			key, after, ok := strings.Cut(rest, `="`)
			end := strings.Index(after, `"`)
			if !ok || end < 0 || strings.ContainsAny(key, " \t") {
				return fmt.Errorf(`want key="value" pairs`)
			}
			r.labels[key] = os.Expand(after[:end], func(name string) string { return args[name] })
			rest = strings.TrimSpace(after[end+1:])
		}
	case "COPY":
		f := strings.Fields(rest)
		c := copyFile{}
		if len(f) == 3 && strings.HasPrefix(f[0], "--chown=") {
			if _, err := fmt.Sscanf(strings.TrimPrefix(f[0], "--chown="), "%d:%d", &c.uid, &c.gid); err != nil {
				return fmt.Errorf("want --chown=UID:GID (numeric): %w", err)
			}
			f = f[1:]
		}
		if len(f) != 2 || !path.IsAbs(f[1]) || strings.HasSuffix(f[1], "/") || strings.ContainsAny(f[0], "*?/") {
			return fmt.Errorf("want COPY [--chown=UID:GID] FILE /PATH, one file of the context to an absolute path")
		}
		c.src, c.dest = f[0], path.Clean(f[1])
		r.copies = append(r.copies, c)
	case "USER":
		r.user = rest
	case "ENTRYPOINT", "CMD":
		var v []string
		if err := json.Unmarshal([]byte(rest), &v); err != nil {
			return fmt.Errorf("want the exec form, a JSON list: %w", err)
		}
		if cmd == "CMD" {
			r.cmd = v
		} else {
			r.entrypoint = v
		}
	default:
		return fmt.Errorf("not supported by imagepush (FROM scratch, ARG, LABEL, COPY, USER, ENTRYPOINT, CMD)")
	}
	return nil
}
