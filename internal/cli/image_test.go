package cli

import "testing"

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"isochron/manager:v0.1.0":               "v0.1.0",
		"registry:5000/isochron/manager:v0.2.0": "v0.2.0",
		"registry:5000/isochron/manager":        "registry:5000/isochron/manager",
		"isochron/manager:v0.1.0@sha256:abc":    "v0.1.0",
		"isochron/manager@sha256:abc":           "isochron/manager@sha256:abc",
	} {
		if got := ImageTag(image); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", image, got, want)
		}
	}
}
