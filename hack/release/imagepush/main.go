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

// Command imagepush builds isochron's images FROM scratch for several platforms and
// pushes each as an OCI image index, without a Docker engine (go-containerregistry).
// `make docker-push` runs it (hack/make/release.mk):
//
//	imagepush -registry ghcr.io/isochron -version v0.1.0 -dockerfiles build \
//	  -context linux/amd64=bin/release/linux-amd64 -context linux/arm64=bin/release/linux-arm64 \
//	  -digests dist/digests.txt manager nic-agent rtprobe
//
// Each image NAME is what build/NAME.Dockerfile says (the one source of an image's files,
// user, entrypoint and labels, which `make docker-build` builds with a Docker engine; read
// by internal/dockerfile, as build/dockerfile_test.go checks it), its
// files taken from each platform's context directory. It is pushed as
// REGISTRY/NAME:VERSION; the index digests are written to -digests, one
// REGISTRY/NAME:VERSION@sha256:... a line, for make build-installer. Credentials come from
// the Docker config (~/.docker/config.json, $DOCKER_CONFIG), as `docker login` or
// `crane auth login` write it; a registry on localhost is spoken to over plain HTTP.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"isochron.io/isochron/hack/release/internal/imageref"
	"isochron.io/isochron/internal/dockerfile"
)

// contexts is the repeated -context PLATFORM=DIR flag.
type contexts []platformContext

type platformContext struct {
	platform v1.Platform
	dir      string
}

func (c *contexts) String() string { return fmt.Sprint(*c) }

func (c *contexts) Set(s string) error {
	p, dir, ok := strings.Cut(s, "=")
	if !ok || dir == "" {
		return fmt.Errorf("want PLATFORM=DIR (linux/arm64=bin/release/linux-arm64), got %q", s)
	}
	platform, err := v1.ParsePlatform(p)
	if err != nil {
		return err
	}
	*c = append(*c, platformContext{platform: *platform, dir: dir})
	return nil
}

func main() {
	var (
		registry    = flag.String("registry", "", "The repository prefix the images are pushed under (ghcr.io/isochron).")
		version     = flag.String("version", "", "The images' tag, and their ARG VERSION.")
		dockerfiles = flag.String("dockerfiles", "build", "The directory of the images' Dockerfiles (NAME.Dockerfile).")
		digests     = flag.String("digests", "", "Where to write each pushed index's REGISTRY/NAME:VERSION@DIGEST.")
		ctxs        contexts
	)
	flag.Var(&ctxs, "context", "PLATFORM=DIR: the build context of one platform (repeat for each).")
	flag.Parse()
	if *registry == "" || *version == "" || len(ctxs) == 0 || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: imagepush -registry REGISTRY -version VERSION -context PLATFORM=DIR... [-digests FILE] NAME...")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *registry, *version, *dockerfiles, *digests, ctxs, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "imagepush:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, registry, version, dockerfiles, digestsFile string, ctxs contexts, names []string) error {
	var pushed []string
	for _, n := range names {
		ref, err := name.NewTag(imageref.Ref(registry, n, version))
		if err != nil {
			return fmt.Errorf("image %s: %w", n, err)
		}
		r, err := dockerfile.Parse(filepath.Join(dockerfiles, n+".Dockerfile"), map[string]string{"VERSION": version})
		if err != nil {
			return err
		}
		idx, err := buildIndex(r, ctxs)
		if err != nil {
			return fmt.Errorf("building %s: %w", ref, err)
		}
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s (log in with docker login or crane auth login): %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("imagepush: %s@%s (%s)\n", ref, d, platformsOf(ctxs))
		pushed = append(pushed, ref.String()+"@"+d.String())
	}
	if digestsFile == "" {
		return nil
	}
	return imageref.WriteDigests(digestsFile, pushed)
}

func platformsOf(ctxs contexts) string {
	var s []string
	for _, c := range ctxs {
		s = append(s, c.platform.String())
	}
	return strings.Join(s, ", ")
}
