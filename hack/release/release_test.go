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

// Package release tests the release's whole path (make test-release): make docker-push
// into a registry the test starts in-process, then make build-installer against it.
package release

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"

	"isochron.io/isochron/hack/release/internal/imageref"
)

const version = "v0.0.0-release-test"

// file is who owns a file of an image, and its mode.
type file struct {
	uid, gid int
	mode     int64
}

// images are the release's images and the files each holds: its program at /<name>,
// executable by anyone, and its other files.
var images = map[string]map[string]file{
	"manager":   {"manager": {mode: 0o755}},
	"nic-agent": {"nic-agent": {mode: 0o755}},
	// The probe agent's disk, a containerDisk KubeVirt's qemu (107) reads.
	"rtprobe": {"rtprobe": {mode: 0o755}, "disk/agent.img": {uid: 107, gid: 107, mode: 0o440}},
}

var platforms = map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}

func TestReleaseFromOneSource(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the binaries for two platforms")
	}
	registry := startRegistry(t) + "/isochron"
	tmp := t.TempDir()
	dist := filepath.Join(tmp, "dist")
	runMake(t, "docker-push", "build-installer", "REGISTRY="+registry, "VERSION="+version,
		"DIST="+dist, "RELEASE_BIN="+filepath.Join(tmp, "bin"))

	digests, err := imageref.ReadDigests(filepath.Join(dist, "digests.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for n, files := range images {
		t.Run(n, func(t *testing.T) {
			ref := imageref.Ref(registry, n, version)
			checkIndex(t, ref, digests[ref], n, files)
		})
	}

	t.Run("install.yaml names every image by the digest pushed", func(t *testing.T) {
		want := map[string]string{}
		for n := range images {
			ref := imageref.Ref(registry, n, version)
			want[n] = ref + "@" + digests[ref]
		}
		got := installImages(t, filepath.Join(dist, "install.yaml"))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("images of install.yaml by name (-want +got):\n%s", diff)
		}
	})

	t.Run("monitoring.yaml links the runbooks", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(dist, "monitoring.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "runbook_url: https://github.com/isochron/isochron/blob/main/docs/operations.md#") {
			t.Errorf("monitoring.yaml has no runbook_url under the default RUNBOOK_BASE_URL")
		}
	})
}

// startRegistry serves a registry (distribution, storage in memory) on localhost, which
// go-containerregistry speaks to over plain HTTP, and returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"inmemory":    configuration.Parameters{},
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
		},
	}
	cfg.Log.Level = "error"
	app := handlers.NewApp(context.Background(), cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(app)
	srv.Listener = l
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		_ = app.Shutdown()
	})
	return "localhost:" + l.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):]
}

// runMake runs make in the repository's root with args.
func runMake(t *testing.T, args ...string) {
	t.Helper()
	mk := os.Getenv("MAKE")
	if mk == "" {
		mk = "make"
	}
	cmd := exec.Command(mk, append([]string{"-C", "../.."}, args...)...)
	out, err := cmd.CombinedOutput()
	t.Logf("make %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("make %s: %v", strings.Join(args, " "), err)
	}
}

// checkIndex checks that ref is an OCI image index of digest with one image for each
// platform, labelled, running as 65532 the program /<n>, and holding files, each
// binary built for its platform.
func checkIndex(t *testing.T, ref, digest, n string, files map[string]file) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if d, _ := idx.Digest(); d.String() != digest {
		t.Errorf("%s is %s, digests.txt says %q", ref, d, digest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("%s is a %s, want an OCI image index", ref, im.MediaType)
	}
	var got []string
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			t.Fatalf("%s: manifest %s has no platform", ref, desc.Digest)
		}
		p := desc.Platform.String()
		got = append(got, p)
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, ref+" "+p, img, *desc.Platform, n, files)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, got); diff != "" {
		t.Errorf("%s: platforms (-want +got):\n%s", ref, diff)
	}
}

func checkImage(t *testing.T, what string, img v1.Image, p v1.Platform, n string, files map[string]file) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s: config says %s/%s", what, cf.OS, cf.Architecture)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/" + n}) {
		t.Errorf("%s: user %q, entrypoint %q; want 65532:65532, [/%s]", what, cf.Config.User, cf.Config.Entrypoint, n)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://isochron.io/isochron",
		"org.opencontainers.image.title":    "isochron-" + n,
	} {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("%s: label %s = %q, want %q", what, k, got, v)
		}
	}

	found := map[string]bool{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		want, ok := files[h.Name]
		if !ok {
			t.Errorf("%s: unexpected file /%s", what, h.Name)
			continue
		}
		found[h.Name] = true
		if h.Uid != want.uid || h.Gid != want.gid || h.Mode&0o7777 != want.mode {
			t.Errorf("%s: /%s is %d:%d %o, want %d:%d %o", what, h.Name, h.Uid, h.Gid, h.Mode, want.uid, want.gid, want.mode)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: /%s is not an ELF binary: %v", what, h.Name, err)
			continue
		}
		if f.Machine != platforms[p.String()] {
			t.Errorf("%s: /%s is built for %s", what, h.Name, f.Machine)
		}
		if strings.HasSuffix(h.Name, ".img") && h.Size%512 != 0 {
			t.Errorf("%s: /%s is %d bytes, not whole 512-byte sectors", what, h.Name, h.Size)
		}
	}
	for f := range files {
		if !found[f] {
			t.Errorf("%s: /%s missing", what, f)
		}
	}
}

type container struct {
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
}

// installImages returns every image install.yaml names: those of the containers and
// init containers of its pod templates, and the manager's --probe-image argument
// ("rtprobe"), by the last element of their repository. It fails on two references to
// one repository that differ.
func installImages(t *testing.T, file string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	add := func(ref string) {
		repo := path.Base(imageref.Repository(ref))
		if prev, ok := got[repo]; ok && prev != ref {
			t.Errorf("install.yaml names %s and %s", prev, ref)
		}
		got[repo] = ref
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	pods := 0
	for {
		var obj struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						Containers     []container `yaml:"containers"`
						InitContainers []container `yaml:"initContainers"`
					}
				}
			}
		}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		spec := obj.Spec.Template.Spec
		if len(spec.Containers) > 0 {
			pods++
		}
		for _, c := range slices.Concat(spec.Containers, spec.InitContainers) {
			add(c.Image)
			for _, a := range c.Args {
				if image, ok := strings.CutPrefix(a, imageref.ProbeImageArg); ok {
					add(image)
				}
			}
		}
	}
	if pods != 2 {
		t.Errorf("install.yaml has %d pod templates, want 2 (the manager's Deployment, the NIC agent's DaemonSet)", pods)
	}
	return got
}
