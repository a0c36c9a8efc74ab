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
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"isochron.io/isochron/internal/dockerfile"
)

// epoch is every file's mtime and the image's creation time: an image depends only on
// its files, so the same build pushes the same digest.
var epoch = time.Unix(0, 0).UTC()

// machines is the ELF machine of each Go architecture an image is built for: a binary
// of the wrong one in a platform's context is an error, not an image that cannot start.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// buildIndex builds the image r describes for each platform, from that platform's
// context, and returns their OCI image index, annotated with the images' labels.
func buildIndex(r *dockerfile.Recipe, ctxs contexts) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, c := range ctxs {
		img, err := buildImage(r, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.platform, err)
		}
		p := c.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	annotated, ok := mutate.Annotations(idx, r.Labels).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotating the index")
	}
	return annotated, nil
}

// buildImage builds one platform's image: one layer with the files r copies (parent
// directories and files owned as COPY --chown says, modes as in the context, mtime 0)
// and r's user, entrypoint and labels.
func buildImage(r *dockerfile.Recipe, c platformContext) (v1.Image, error) {
	layerTar, err := layer(r, c)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "imagepush (hack/release) from the Dockerfile's COPY",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = c.platform.OS, c.platform.Architecture, c.platform.Variant, c.platform.OSVersion
	cf.Config.User = r.User
	cf.Config.Entrypoint = r.Entrypoint
	cf.Config.Cmd = r.Cmd
	cf.Config.Labels = r.Labels
	return mutate.ConfigFile(img, cf)
}

// layer writes the tar of r's files from context c.
func layer(r *dockerfile.Recipe, c platformContext) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"/": true}
	for _, f := range r.Copies {
		src := filepath.Join(c.dir, f.Src)
		if err := checkMachine(src, c.platform.Architecture); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		// Parent directories first, as COPY creates them: owned by its --chown.
		var parents []string
		for d := path.Dir(f.Dest); !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			dirs[d] = true
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, Uid: f.UID, Gid: f.GID, ModTime: epoch, Format: tar.FormatPAX,
			}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: f.Dest[1:], Size: int64(len(data)), Mode: int64(st.Mode().Perm()),
			Uid: f.UID, Gid: f.GID, ModTime: epoch, Format: tar.FormatPAX,
		}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkMachine fails if file is an ELF binary of another architecture than arch.
func checkMachine(file, arch string) error {
	want, known := machines[arch]
	f, err := elf.Open(file)
	if err != nil {
		return nil //nolint:nilerr // not an ELF file: nothing to check
	}
	defer f.Close()
	if !known || f.Machine != want {
		return fmt.Errorf("%s is a %s binary, not one for %s (cross-compile it with GOARCH=%s)", file, f.Machine, arch, arch)
	}
	return nil
}
