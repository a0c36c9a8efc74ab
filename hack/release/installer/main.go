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

// Command installer makes a release's install manifest from a kustomize build of
// config/default (make build-installer, hack/make/release.mk): it reads the build on
// stdin and writes it to stdout with every container image, and the manager's
// --probe-image argument (which kustomize's images cannot reach), set to the release's:
//
//	kustomize build config/default | installer -digests dist/digests.txt \
//	  -image isochron/manager=ghcr.io/isochron/manager:v0.1.0 ... > dist/install.yaml
//
// -image SOURCE=REF replaces each image whose repository is SOURCE (any tag or digest)
// with REF, pinned as REF@sha256:... when -digests (what make docker-push wrote) has
// REF's digest. An image no -image names, or an -image that names no image of the build,
// is an error: every image of the install comes from the release.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"isochron.io/isochron/hack/release/internal/imageref"
)

// images is the repeated -image SOURCE=REF flag.
type images map[string]string

func (m images) String() string { return fmt.Sprint(map[string]string(m)) }

func (m images) Set(s string) error {
	src, ref, ok := strings.Cut(s, "=")
	if !ok || src == "" || ref == "" {
		return fmt.Errorf("want SOURCE=REF (isochron/manager=ghcr.io/isochron/manager:v0.1.0), got %q", s)
	}
	m[src] = ref
	return nil
}

func main() {
	imgs := images{}
	flag.Var(imgs, "image", "SOURCE=REF: the image REF replaces every image of repository SOURCE (repeat for each).")
	digestsFile := flag.String("digests", "", "REF@sha256:... lines (make docker-push); a missing file pins nothing.")
	flag.Parse()
	if len(imgs) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: installer -image SOURCE=REF... [-digests FILE] < kustomize-build > install.yaml")
		os.Exit(2)
	}
	if err := run(imgs, *digestsFile, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "installer:", err)
		os.Exit(1)
	}
}

func run(imgs images, digestsFile string, in io.Reader, out io.Writer) error {
	digests, err := imageref.ReadDigests(digestsFile)
	if err != nil {
		return err
	}
	refs := map[string]string{}
	for src, ref := range imgs {
		d, ok := digests[ref]
		if !ok {
			fmt.Fprintf(os.Stderr, "installer: %s is not pinned: no digest of it in %q (make docker-push writes them)\n", ref, digestsFile)
			refs[src] = ref
			continue
		}
		refs[src] = ref + "@" + d
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	rewritten, err := rewrite(data, refs)
	if err != nil {
		return err
	}
	_, err = out.Write(rewritten)
	return err
}
