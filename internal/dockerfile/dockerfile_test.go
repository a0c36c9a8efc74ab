package dockerfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRTProbe(t *testing.T) {
	r, err := Parse("../../build/rtprobe.Dockerfile", map[string]string{"VERSION": "v9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Copy{{Src: "rtprobe", Dest: "/rtprobe"}, {Src: "agent.img", Dest: "/disk/agent.img", UID: 107, GID: 107}}
	if diff := cmp.Diff(want, r.Copies); diff != "" {
		t.Errorf("copies (-want +got):\n%s", diff)
	}
	if r.User != "65532:65532" || !cmp.Equal(r.Entrypoint, []string{"/rtprobe"}) {
		t.Errorf("user %q, entrypoint %q", r.User, r.Entrypoint)
	}
	if got := r.Labels["org.opencontainers.image.version"]; got != "v9.9.9" {
		t.Errorf("version label %q, want the ARG's value v9.9.9", got)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ dockerfile, wantErr string }{
		"a base image":         {"FROM alpine\nCOPY a /a\nENTRYPOINT [\"/a\"]\n", "FROM scratch"},
		"a shell":              {"FROM scratch\nRUN true\n", "not supported"},
		"an ARG without value": {"FROM scratch\nARG OTHER\n", "no value given"},
		"a directory copied":   {"FROM scratch\nCOPY bin/ /bin/\nENTRYPOINT [\"/a\"]\n", "one file"},
		"a shell entrypoint":   {"FROM scratch\nCOPY a /a\nENTRYPOINT /a\n", "exec form"},
		"two entrypoints":      {"FROM scratch\nCOPY a /a\nENTRYPOINT [\"/a\"]\nENTRYPOINT [\"/b\"]\n", "a second ENTRYPOINT"},
		"two users":            {"FROM scratch\nUSER 1:1\nUSER 0:0\n", "a second USER"},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "x.Dockerfile")
			if err := os.WriteFile(file, []byte(tc.dockerfile), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Parse(file, map[string]string{"VERSION": "v1"})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse() error = %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}
