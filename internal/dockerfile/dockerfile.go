// Package dockerfile reads the Dockerfiles of build/, which hold only what an image FROM
// scratch needs. It is their one reader: build/dockerfile_test.go checks the Dockerfiles
// with it (in make test), and hack/release/imagepush builds and pushes the images it
// describes without a Docker engine (make docker-push), so what is checked is what is
// pushed.
package dockerfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
)

// Recipe is what a Dockerfile FROM scratch says of its image: the files it copies from
// the build context, and the image's configuration.
type Recipe struct {
	// Copies are the COPY instructions, in order.
	Copies []Copy
	// Labels are the LABEL key="value" pairs, ${ARG}s expanded.
	Labels map[string]string
	// User is USER as written (uid:gid).
	User string
	// Entrypoint and Cmd are ENTRYPOINT and CMD, both in exec form.
	Entrypoint []string
	Cmd        []string
}

// Copy is one COPY: Src in the build context, Dest in the image, owned by UID:GID
// (--chown; 0:0 without it).
type Copy struct {
	Src, Dest string
	UID, GID  int
}

// Parse reads a Dockerfile of build/: FROM scratch, ARG, LABEL key="value" pairs, COPY
// [--chown=UID:GID] SRC DEST, USER, ENTRYPOINT and CMD in exec form; comments and blank
// lines dropped, a line ending in a backslash joined to the next. Anything else is an
// error, so that an engine-less build and `docker build` cannot differ silently. args
// are the values of the ARGs (${NAME} in LABEL values).
func Parse(file string, args map[string]string) (*Recipe, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	r := &Recipe{Labels: map[string]string{}}
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
	if !from || len(r.Copies) == 0 || len(r.Entrypoint) == 0 {
		return nil, fmt.Errorf("%s: want FROM scratch, a COPY and an ENTRYPOINT", file)
	}
	return r, nil
}

func (r *Recipe) apply(cmd, rest string, args map[string]string, from *bool) error {
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
			r.Labels[key] = os.Expand(after[:end], func(name string) string { return args[name] })
			rest = strings.TrimSpace(after[end+1:])
		}
	case "COPY":
		f := strings.Fields(rest)
		c := Copy{}
		if len(f) == 3 && strings.HasPrefix(f[0], "--chown=") {
			if _, err := fmt.Sscanf(strings.TrimPrefix(f[0], "--chown="), "%d:%d", &c.UID, &c.GID); err != nil {
				return fmt.Errorf("want --chown=UID:GID (numeric): %w", err)
			}
			f = f[1:]
		}
		if len(f) != 2 || !path.IsAbs(f[1]) || strings.HasSuffix(f[1], "/") || strings.ContainsAny(f[0], "*?/") {
			return fmt.Errorf("want COPY [--chown=UID:GID] FILE /PATH, one file of the context to an absolute path")
		}
		c.Src, c.Dest = f[0], path.Clean(f[1])
		r.Copies = append(r.Copies, c)
	case "USER":
		if r.User != "" {
			return fmt.Errorf("a second USER: only the last would count")
		}
		r.User = rest
	case "ENTRYPOINT", "CMD":
		var v []string
		if err := json.Unmarshal([]byte(rest), &v); err != nil {
			return fmt.Errorf("want the exec form, a JSON list: %w", err)
		}
		dst := &r.Entrypoint
		if cmd == "CMD" {
			dst = &r.Cmd
		}
		if *dst != nil {
			return fmt.Errorf("a second %s: only the last would count", cmd)
		}
		*dst = v
	default:
		return fmt.Errorf("not supported by imagepush, which builds the images without an engine (FROM scratch, ARG, LABEL, COPY, USER, ENTRYPOINT, CMD)")
	}
	return nil
}
